"""Test cases, the comparison, and the tolerance of every kernel.

A `Case` names a kernel, its sizes, the kind of values and a seed. `build(case)`
draws fresh random inputs from that seed and returns a `Problem`: the arguments in
the host function's order, which of them are outputs, and how large an error each
output element may carry. `run_case(function, case)` then

1. computes the float64 answer with reference.cpu (or, with against="gold", the
   float32 answer of reference.gold on the GPU),
2. uploads the inputs, fills every output with NaN, calls `function` and waits,
3. checks that no input changed and that every output element is within its bound
   (NaN never is, so an element the kernel did not write fails).

Tolerances. Each bound is an estimate of the float32 rounding error of a correct
implementation, in units of U = 2^-24 (the float32 unit roundoff) times the size of
the quantities that were rounded; reasons are given per kernel below. Against gold
the bound doubles, since both sides carry float32 rounding.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Callable

import numpy as np

from reference import cpu

U = 2.0**-24            # float32 unit roundoff: a correctly rounded operation errs by <= U * |result|
TINY = 2.0**-126        # smallest normal float32: below it only absolute accuracy is possible

# The graded forward-pass kernels (every kernels/ directory has them) ...
FUNCTIONS = {
    "encoder": "encoder_forward",
    "layernorm": "layernorm_forward",
    "matmul": "matmul_forward",
    "attention": "attention_forward",
    "softmax": "softmax_forward",
    "residual": "residual_forward",
    "gelu": "gelu_forward",
}
# ... and the kit's KV-cache decoding kernels (kernels/decode.py).
DECODE_FUNCTIONS = {
    "encoder_at_positions": "encoder_at_positions_forward",
    "kv_cache_append": "kv_cache_append_forward",
    "decode_attention": "decode_attention_forward",
}
ALL_FUNCTIONS = {**FUNCTIONS, **DECODE_FUNCTIONS}
KERNELS = tuple(ALL_FUNCTIONS)


@dataclasses.dataclass(frozen=True)
class Case:
    kernel: str
    sizes: tuple[tuple[str, int], ...]
    values: str = "normal"      # "normal" or "extreme"
    variant: str = ""           # e.g. "no-bias", "in-place"
    seed: int = 0

    @property
    def size(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def id(self) -> str:
        parts = [f"{k}{v}" for k, v in self.sizes]
        parts += [p for p in (self.values if self.values != "normal" else "", self.variant) if p]
        return "-".join(parts + [f"seed{self.seed}"])


def case(kernel: str, values: str = "normal", variant: str = "", base_seed: int = 0, **sizes: int) -> Case:
    """A case whose seed mixes `base_seed` with everything else, so each case draws its own inputs."""
    key = f"{kernel}|{sorted(sizes.items())}|{values}|{variant}".encode()
    seed = (zlib.crc32(key) ^ (base_seed * 0x9E3779B1)) % 2**31
    return Case(kernel, tuple(sizes.items()), values, variant, seed)


def cases(kernel: str, base_seed: int = 0) -> list[Case]:
    """Every test case of `kernel`: odd sizes, GPT-2 sizes, and extreme values."""
    c = lambda values="normal", variant="", **sizes: case(kernel, values, variant, base_seed, **sizes)  # noqa: E731
    # N = 1, a size that is not a multiple of 4 (the vector width), one that is, a large odd one
    elementwise = lambda: [c(N=1), c(N=7), c(N=1000), c(N=2**20 + 3), c("extreme", N=4099)]  # noqa: E731
    return {
        "encoder": lambda: [
            c(B=1, T=1, C=8, V=50257, maxT=1024),
            c(B=2, T=7, C=37, V=1000, maxT=64),
            c(B=4, T=64, C=768, V=5000, maxT=1024),
            c(B=1, T=1024, C=48, V=300, maxT=1024),
        ],
        "layernorm": lambda: [
            c(B=1, T=1, C=768),
            c(B=2, T=7, C=37),
            c(B=3, T=5, C=1),
            c(B=4, T=64, C=768),
            c(B=1, T=1024, C=1600),
            c("extreme", B=2, T=7, C=768),
        ],
        "matmul": lambda: [
            c(B=1, T=1, C=768, OC=2304),
            c(B=8, T=1, C=768, OC=2304),
            c(B=2, T=3, C=37, OC=45, variant="no-bias"),
            c(B=1, T=9, C=130, OC=257),
            c(B=2, T=7, C=37, OC=45),
            c(B=1, T=33, C=130, OC=257, variant="no-bias"),
            c(B=1, T=5, C=768, OC=50257),
            c(B=4, T=64, C=768, OC=3072),
            c(B=1, T=1024, C=768, OC=768),
            c("extreme", B=2, T=7, C=64, OC=96),
        ],
        "attention": lambda: [
            c(B=1, T=1, C=64, NH=1),
            c(B=2, T=7, C=96, NH=2),
            c(B=1, T=33, C=16, NH=2),
            c(B=2, T=64, C=768, NH=12),
            c(B=1, T=1024, C=768, NH=12),
            c("extreme", B=1, T=100, C=128, NH=2),
        ],
        "softmax": lambda: [
            c(N=1, T=1),
            c(N=3, T=7),
            c(N=2, T=100, variant="in-place"),
            c(N=12, T=1024),
            c("extreme", N=4, T=100),
        ],
        "residual": lambda: elementwise(),
        "gelu": lambda: elementwise(),
        "encoder_at_positions": lambda: [
            c(B=1, T=1, C=768, V=50257, maxT=1024),
            c(B=3, T=2, C=37, V=100, maxT=20),
        ],
        "kv_cache_append": lambda: [
            c(B=1, T=1, C=768, NH=12, maxT=1024),
            c(B=3, T=5, C=96, NH=2, maxT=17),
            c(B=2, T=1, C=16, NH=2, maxT=8),
        ],
        "decode_attention": lambda: [
            c(B=1, C=768, NH=12, maxT=1024),
            c(B=3, C=96, NH=2, maxT=37),
            c(B=2, C=16, NH=2, maxT=5),
            c("extreme", B=3, C=128, NH=2, maxT=100),
        ],
    }[kernel]()


# --------------------------------------------------------------------------- problems


@dataclasses.dataclass
class Problem:
    """One call's arguments and what to check.

    args: name -> host array (inputs) or shape (outputs) or Python scalar, in call order.
    outputs: the outputs to compare; scratch: outputs nobody checks.
    same_array: output name -> input name for in-place calls.
    initial: output name -> starting content (a KV cache the call adds rows to); NaN
      marks the elements the call must write.
    error_bound: (float64 inputs, float64 expected outputs) -> allowed |error| per output.
    """

    function: str
    args: dict
    outputs: tuple[str, ...]
    error_bound: Callable[[dict, dict], dict]
    scratch: tuple[str, ...] = ()
    same_array: dict = dataclasses.field(default_factory=dict)
    initial: dict = dataclasses.field(default_factory=dict)  # outputs that start from this content, not NaN

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.outputs + self.scratch

    def inputs(self) -> dict:
        return {k: v for k, v in self.args.items() if isinstance(v, np.ndarray)}


def half_ulp(exact):
    """Half the float32 spacing at each value: the error of one correctly rounded operation."""
    return 0.5 * np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def _normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def build(case: Case) -> Problem:
    """Fresh inputs for `case`, drawn from its seed."""
    rng = np.random.default_rng(case.seed)
    return _BUILDERS[case.kernel](case, case.size, rng)


def _problem(case: Case, args: dict, outputs: tuple, error_bound: Callable, **extra) -> Problem:
    return Problem(ALL_FUNCTIONS[case.kernel], args, outputs, error_bound, **extra)


def _encoder(case, s, rng):
    B, T, C, V = s["B"], s["T"], s["C"], s["V"]
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int32)
    tokens.flat[0], tokens.flat[-1] = 0, V - 1  # both ends of the table
    args = dict(out=(B, T, C), inp=tokens, wte=_normal(rng, V, C), wpe=_normal(rng, s["maxT"], C),
                B=B, T=T, C=C)
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return _problem(case, args, ("out",), lambda x, e: {"out": half_ulp(e["out"])})


def _layernorm(case, s, rng):
    B, T, C = s["B"], s["T"], s["C"]
    if case.values == "extreme":  # mean 1e3, std 0.1: a naive variance loses everything
        x = (1e3 + 0.1 * rng.standard_normal((B, T, C))).astype(np.float32)
    else:
        x = (rng.standard_normal((B, T, 1)) + rng.uniform(0.5, 2, (B, T, 1)) * rng.standard_normal((B, T, C)))
        x = x.astype(np.float32)
    args = dict(out=(B, T, C), mean=(B, T), rstd=(B, T), inp=x,
                weight=_normal(rng, C), bias=_normal(rng, C), B=B, T=T, C=C)
    return _problem(case, args, ("out", "mean", "rstd"), _layernorm_bound)


def _layernorm_bound(x, e):
    # The mean and the variance are sums of C float32 terms of size about |mean| + std:
    # with errors that partly cancel they err by ~sqrt(C) * U of that; REL takes 4x.
    # An error d in the mean shifts every output by d * rstd * |w|; a relative error
    # in rstd (the sum's, plus rsqrtf's 2 ulp) scales the normalised value n.
    C = x["inp"].shape[-1]
    rel = 4 * math.sqrt(C) * U
    mean, rstd = e["mean"][..., None], e["rstd"][..., None]
    std = np.sqrt(((x["inp"] - mean) ** 2).mean(axis=-1, keepdims=True))
    mean_error = rel * (np.abs(mean) + std)
    n = (x["inp"] - mean) * rstd
    w = np.abs(x["weight"])
    out = w * (mean_error * rstd + np.abs(n) * (rel + 4 * U)) + 2 * U * np.abs(e["out"])
    return {"out": out, "mean": (mean_error + U * np.abs(mean))[..., 0], "rstd": (e["rstd"] * (rel + 4 * U))}


def _matmul(case, s, rng):
    B, T, C, OC = s["B"], s["T"], s["C"], s["OC"]
    scale = 1e4 if case.values == "extreme" else 1.0
    bias = None if case.variant == "no-bias" else _normal(rng, OC)
    args = dict(out=(B, T, OC), inp=_normal(rng, B, T, C, scale=scale), weight=_normal(rng, OC, C),
                bias=bias, B=B, T=T, C=C, OC=OC)
    return _problem(case, args, ("out",), _matmul_bound)


def _matmul_bound(x, e):
    # A dot product of K float32 terms errs by ~sqrt(K) * U * sum |a_k * w_k| when
    # rounding errors partly cancel; allow 4x that, plus the bias add.
    OC, C = x["weight"].shape
    magnitude = np.abs(x["inp"].reshape(-1, C)) @ np.abs(x["weight"]).T
    if x.get("bias") is not None:
        magnitude += np.abs(x["bias"])
    return {"out": (4 * math.sqrt(C) * U * magnitude + U * np.abs(e["out"].reshape(-1, OC))).reshape(e["out"].shape)}


def _softmax(case, s, rng):
    N, T = s["N"], s["T"]
    scale = 1e4 if case.values == "extreme" else 3.0
    scores = _normal(rng, N, T, T, scale=scale)
    scores[:, ~np.tril(np.ones((T, T), dtype=bool))] = np.nan  # never read: must not matter
    args = dict(out=(N, T, T), inp=scores, scale=0.125, N=N, T=T)
    same = {"out": "inp"} if case.variant == "in-place" else {}

    def bound(x, e):
        s_abs = np.abs(0.125 * np.nan_to_num(x["inp"], nan=0.0))
        return {"out": _probability_bound(e["out"], s_abs, np.tril(np.ones((T, T), dtype=bool)))}

    return _problem(case, args, ("out",), bound, same_array=same)


def _probability_bound(p, score_error_scale, visible):
    # p = exp(s - max) / sum. An absolute error d in the exponent gives p a relative
    # error d; rounding s and max errs by ~U * |s|, expf by 2 ulp, the sum of n terms
    # by ~sqrt(n) * U. score_error_scale is the row's largest |s| (or, for attention,
    # the magnitude its dot products were rounded at); visible marks the keys a row sees.
    row_scale = np.where(visible, score_error_scale, 0).max(axis=-1, keepdims=True)
    n = visible.sum(axis=-1, keepdims=True)
    return p * U * (8 * row_scale + 4 * np.sqrt(n) + 8) + TINY


def _attention_bounds(q_abs, k_abs, v_abs, p, visible):
    """Bounds on probabilities p (..., Tq, Tk) and outputs p @ v (..., Tq, HS).

    Scores are dot products of HS terms: they err by ~sqrt(HS) * U * scale * |q|.|k|,
    which enters the softmax like a rounding of the score itself. The output carries
    p's error times |v| plus its own sum of n terms."""
    HS = q_abs.shape[-1]
    score_scale = (q_abs @ np.swapaxes(k_abs, -1, -2)) * (math.sqrt(HS) + 1) / math.sqrt(HS)
    p_bound = _probability_bound(p, score_scale, visible)
    n = visible.sum(axis=-1, keepdims=True)
    return p_bound, p_bound @ v_abs + U * (4 * np.sqrt(n) + 4) * (p @ v_abs)


def _attention(case, s, rng):
    B, T, C, NH = s["B"], s["T"], s["C"], s["NH"]
    scale = 100.0 if case.values == "extreme" else 1.0  # extreme: scores of order 1e4
    args = dict(out=(B, T, C), qkvr=(3 * B * T * C,), att=(B, NH, T, T),
                inp=_normal(rng, B, T, 3 * C, scale=scale), B=B, T=T, C=C, NH=NH)
    return _problem(case, args, ("out", "att"), _attention_bound, scratch=("qkvr",))


def _attention_bound(x, e):
    B, T, C3 = x["inp"].shape
    NH = e["att"].shape[1]
    HS = C3 // 3 // NH
    q, k, v = np.abs(x["inp"]).reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    causal = np.tril(np.ones((T, T), dtype=bool))
    att, out = _attention_bounds(q, k, v, e["att"], causal)
    return {"att": att, "out": out.transpose(0, 2, 1, 3).reshape(B, T, C3 // 3)}


def _residual(case, s, rng):
    N = s["N"]
    if case.values == "extreme":  # magnitudes from 1e-30 to 1e30, both signs
        a, b = (np.sign(rng.standard_normal(N)) * 10.0 ** rng.uniform(-30, 30, N) for _ in range(2))
        a, b = a.astype(np.float32), b.astype(np.float32)
    else:
        a, b = _normal(rng, N), _normal(rng, N)
    args = dict(out=(N,), inp1=a, inp2=b, N=N)
    # One float32 addition per element, correctly rounded: off by at most half an ulp.
    return _problem(case, args, ("out",), lambda x, e: {"out": half_ulp(e["out"])})


def _gelu(case, s, rng):
    N = s["N"]
    if case.values == "extreme":  # |x| from 1e-30 to 1e6, both signs
        x = (np.sign(rng.standard_normal(N)) * 10.0 ** rng.uniform(-30, 6, N)).astype(np.float32)
    else:
        x = _normal(rng, N, scale=3.0)
    # A handful of roundings and tanhf's few ulp: the inner argument's error reaches
    # the output damped by tanh' <= 1, times 0.5|x|; 8U(|x| + |gelu|) covers both.
    return _problem(case, dict(out=(N,), inp=x, N=N), ("out",),
                   lambda x, e: {"out": 8 * U * (np.abs(x["inp"]) + np.abs(e["out"]))})


def _lengths(rng, B, max_T, T=1):
    """Cache lengths for B rows, leaving room for T new tokens; the first row empty, the last full."""
    lengths = rng.integers(0, max_T - T + 1, size=B).astype(np.int32)
    lengths[0], lengths[-1] = 0, max_T - T
    return lengths


def _encoder_at_positions(case, s, rng):
    B, T, C, V, max_T = s["B"], s["T"], s["C"], s["V"], s["maxT"]
    args = dict(out=(B, T, C), inp=rng.integers(0, V, (B, T), dtype=np.int32), positions=_lengths(rng, B, max_T, T),
                wte=_normal(rng, V, C), wpe=_normal(rng, max_T, C), B=B, T=T, C=C)
    return _problem(case, args, ("out",), lambda x, e: {"out": half_ulp(e["out"])})


def _kv_cache_append(case, s, rng):
    B, T, C, NH, max_T = s["B"], s["T"], s["C"], s["NH"], s["maxT"]
    lengths = _lengths(rng, B, max_T, T)
    caches = {}
    for name in ("k_cache", "v_cache"):
        cache = _normal(rng, B, NH, max_T, C // NH)  # earlier tokens' entries: must survive
        for b, start in enumerate(lengths):
            cache[b, :, start:start + T] = np.nan   # the rows the call must write
        caches[name] = cache
    args = dict(k_cache=caches["k_cache"].shape, v_cache=caches["v_cache"].shape, qkv=_normal(rng, B, T, 3 * C),
                lengths=lengths, B=B, T=T, C=C, NH=NH, max_T=max_T)
    # A copy: exact.
    return _problem(case, args, ("k_cache", "v_cache"), lambda x, e: {k: np.zeros_like(v) for k, v in e.items()},
                    initial=caches)


def _decode_attention(case, s, rng):
    B, C, NH, max_T = s["B"], s["C"], s["NH"], s["maxT"]
    scale = 100.0 if case.values == "extreme" else 1.0
    lengths = _lengths(rng, B, max_T)
    k_cache, v_cache = (_normal(rng, B, NH, max_T, C // NH, scale=scale) for _ in range(2))
    for b, length in enumerate(lengths):
        k_cache[b, :, length + 1:] = v_cache[b, :, length + 1:] = np.nan  # beyond the cache: never read
    args = dict(out=(B, 1, C), qkv=_normal(rng, B, 1, 3 * C, scale=scale), k_cache=k_cache, v_cache=v_cache,
                lengths=lengths, B=B, C=C, NH=NH, max_T=max_T)
    return _problem(case, args, ("out",), _decode_attention_bound)


def _decode_attention_bound(x, e):
    B, _, C = e["out"].shape
    NH, max_T, HS = x["k_cache"].shape[1:]
    out = np.empty((B, NH, HS))
    for b, length in enumerate(x["lengths"].astype(int)):
        q = x["qkv"][b].reshape(3, NH, 1, HS)[0]
        k, v = x["k_cache"][b, :, :length + 1], x["v_cache"][b, :, :length + 1]
        p = cpu.softmax_rows(q @ np.swapaxes(k, -1, -2) / math.sqrt(HS))
        out[b] = _attention_bounds(np.abs(q), np.abs(k), np.abs(v), p, np.ones(p.shape, dtype=bool))[1][:, 0]
    return {"out": out.reshape(B, 1, C)}


_BUILDERS = {
    "encoder": _encoder, "layernorm": _layernorm, "matmul": _matmul, "attention": _attention,
    "softmax": _softmax, "residual": _residual, "gelu": _gelu,
    "encoder_at_positions": _encoder_at_positions, "kv_cache_append": _kv_cache_append,
    "decode_attention": _decode_attention,
}


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class Result:
    case: Case
    passed: bool
    message: str
    max_abs_error: float = math.nan
    max_rel_error: float = math.nan
    worst_ratio: float = math.nan   # largest |error| / allowed; <= 1 passes


def expected_outputs(problem: Problem, against: str = "numpy") -> dict:
    """The reference answer as float64 host arrays: reference.cpu's, or gold's on the GPU."""
    if against == "numpy":
        args = {k: (_starting_output(problem, k, v, np.float64, np) if k in problem.output_names else v)
                for k, v in problem.args.items()}
        getattr(cpu, problem.function)(*args.values())
        return {k: args[k] for k in problem.outputs}
    import cupy

    from reference import gold

    args = _device_args(problem)
    getattr(gold, problem.function)(*args.values())
    return {k: cupy.asnumpy(args[k]).astype(np.float64) for k in problem.outputs}


def _device_args(problem: Problem, device: str = "gpu") -> dict:
    """Inputs copied (to the GPU, or on the host), outputs filled with NaN, in call order."""
    if device == "gpu":
        import cupy as xp
    else:
        xp = np
    args = {}
    for name, value in problem.args.items():
        if name in problem.output_names:
            args[name] = _starting_output(problem, name, value, np.float32, xp)
        elif isinstance(value, np.ndarray):
            args[name] = xp.array(value)
        else:
            args[name] = value
    for output, source in problem.same_array.items():
        args[output] = args[source]
    return args


def _starting_output(problem: Problem, name: str, shape, dtype, xp):
    if name in problem.initial:
        return xp.array(problem.initial[name], dtype=dtype)
    return xp.full(shape, np.nan, dtype=dtype)


@dataclasses.dataclass
class Execution:
    """What a call left behind: its outputs and its inputs afterwards, or why it failed."""

    outputs: dict | None
    inputs_after: dict | None
    error: str | None = None


def execute(function: Callable, problem: Problem, device: str = "gpu") -> Execution:
    """Call `function` on the problem's inputs (outputs poisoned with NaN) and collect everything as host arrays."""
    args = _device_args(problem, device)
    to_host = _to_host(device)
    try:
        function(*args.values())
        if device == "gpu":
            import cupy

            cupy.cuda.runtime.deviceSynchronize()
    except Exception as err:  # a failing submission must produce a verdict, not a crash
        return Execution(None, None, f"{type(err).__name__}: {_one_line(err)}")
    return Execution({k: to_host(args[k]) for k in problem.outputs},
                     {k: to_host(args[k]) for k in problem.inputs()})


def judge(case: Case, problem: Problem, execution: Execution, against: str = "numpy") -> Result:
    """Compare an execution with the reference, within the case's bounds."""
    if execution.error is not None:
        return Result(case, False, execution.error)
    in_place = set(problem.same_array.values())
    for name, original in problem.inputs().items():
        if name not in in_place and not np.array_equal(execution.inputs_after[name], original, equal_nan=True):
            return Result(case, False, f"input {name} was modified by the call")
    reference = expected_outputs(problem, "numpy")
    bounds = problem.error_bound({k: v.astype(np.float64) for k, v in problem.inputs().items()}, reference)
    if against == "gold":
        reference = expected_outputs(problem, "gold")
        bounds = {k: 2 * v for k, v in bounds.items()}
    return _compare(case, execution.outputs, reference, bounds)


def run_case(function: Callable, case: Case, against: str = "numpy", device: str = "gpu") -> Result:
    """Call `function` (a host function with the kit's signature) on `case` and judge it.

    device="cpu" passes NumPy arrays instead of CuPy ones: for checking the checks
    themselves with NumPy implementations on a machine without a GPU.
    """
    problem = build(case)
    return judge(case, problem, execute(function, problem, device), against)


def _to_host(device: str) -> Callable:
    if device == "gpu":
        import cupy

        return cupy.asnumpy
    return np.asarray


def _compare(case: Case, actual: dict, expected: dict, bounds: dict) -> Result:
    failures, max_abs, max_rel, worst_ratio = [], 0.0, 0.0, 0.0
    for name in expected:
        got = actual[name].astype(np.float64)
        want, allowed = expected[name], np.broadcast_to(bounds[name], expected[name].shape)
        error = np.abs(got - want)
        error[np.isnan(got) | np.isinf(got)] = np.inf
        bad = ~(error <= allowed)
        max_abs = max(max_abs, float(error.max()))
        significant = np.abs(want) >= 1e-3 * max(float(np.abs(want).max()), TINY)
        max_rel = max(max_rel, float((error[significant] / np.abs(want[significant])).max(initial=0.0)))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(error == 0, 0.0, error / allowed)  # exact answers under a zero bound: 0
        worst_ratio = max(worst_ratio, float(np.nan_to_num(ratio, nan=np.inf).max()))
        if bad.any():
            where = np.unravel_index(int(np.argmax(np.where(bad, error / np.maximum(allowed, TINY), -1))), want.shape)
            unwritten = int(np.isnan(got).sum())
            failures.append(
                f"{name}: {int(bad.sum())} of {want.size} elements wrong; worst at {tuple(int(i) for i in where)}: "
                f"got {got[where]:.7g}, expected {want[where]:.7g} (allowed error {allowed[where]:.2g})"
                + (f"; {unwritten} NaN (never written, or computed as NaN)" if unwritten else ""))
    message = "; ".join(failures) if failures else "ok"
    return Result(case, not failures, message, max_abs, max_rel, worst_ratio)


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return " | ".join(lines[:3]) if lines else type(err).__name__
