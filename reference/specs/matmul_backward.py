"""matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC): the gradients of
out = inp @ weight^T + bias: dinp = dout @ weight (written), dweight += dout^T @ inp, dbias += the sum of dout's
B*T rows; dbias None: no bias."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs import matmul


def build(case, rng):
    B, T, C, OC = (case.size[k] for k in ("B", "T", "C", "OC"))
    scale = 1e4 if case.values == "extreme" else 1.0
    dout, inp, weight = normal(rng, B, T, OC, scale=scale), normal(rng, B, T, C, scale=scale), normal(rng, OC, C)
    if case.variant == "softmax":  # the LM head's: each row the softmax of its logits less a one-hot, over B*T
        logits = 2 * rng.standard_normal((B * T, OC))
        rows = np.exp(logits - logits.max(axis=1, keepdims=True))
        rows /= rows.sum(axis=1, keepdims=True)
        rows[np.arange(B * T), rng.integers(0, OC, B * T)] -= 1
        dout = (rows / (B * T)).astype(np.float32).reshape(B, T, OC)
    no_bias = case.variant == "no-bias"
    # the gradients gathered so far: what the call adds to
    initial = dict(dweight=normal(rng, OC, C)) | ({} if no_bias else dict(dbias=normal(rng, OC)))
    return Arguments(dict(dinp=(B, T, C), dweight=(OC, C), dbias=None if no_bias else (OC,), dout=dout, inp=inp,
                          weight=weight, B=B, T=T, C=C, OC=OC), initial=initial)


def as_forward(x):
    """Each output's sum as the forward's inp @ weight^T (reference/specs/matmul.py), a pair per output:
    dinp = dout @ weight sums OC products; dweight = dout^T @ inp and dbias = dout^T @ ones sum the B*T rows."""
    OC, C = x["weight"].shape
    dout = x["dout"].reshape(-1, OC)
    return {"dinp": (x["dout"], x["weight"].T), "dweight": (dout.T, x["inp"].reshape(-1, C).T),
            "dbias": (dout.T, np.ones((1, dout.shape[0])))}


def products(x):
    """sum |a * b| over the products behind each element of dinp and dweight (dbias sums without multiplying)."""
    return {name: matmul.products(dict(inp=a, weight=b))["out"] for name, (a, b) in as_forward(x).items()
            if name != "dbias"}


def error_bound(x, e):
    # Each output is a sum of K float32 terms, bounded as the forward's is: 4 sqrt(K) U times the sum of the
    # terms' magnitudes (rounding errors partly cancel), plus U |e| for the last rounding, which for dweight and
    # dbias is the addition onto the gradient they held. dinp sums K = OC products. dweight and dbias sum over
    # the K = B*T rows, so their bound grows as sqrt(B*T) times a magnitude sum that itself grows as B*T: as
    # (B*T)^1.5 U times a typical term, ahead of the ~B*T U of a fixed-order float32 sum of random-signed terms.
    return {name: matmul.rounding_error(a, b, None).reshape(e[name].shape) + U * np.abs(e[name])
            for name, (a, b) in as_forward(x).items() if name in e}  # no dbias without a bias


def flops(s: dict) -> int:
    rows = s["B"] * s["T"]
    return 2 * 2 * rows * s["C"] * s["OC"] + rows * s["OC"]  # two products the forward's size, and dbias's sum


def traffic(s: dict) -> int:
    """dout, inp and weight read, dinp written, dweight and dbias read and written."""
    rows, C, OC = s["B"] * s["T"], s["C"], s["OC"]
    return 4 * (rows * OC + 2 * rows * C + 3 * OC * C + 2 * OC)


SPEC = Spec(
    function="matmul_backward", module="matmul_backward", outputs=("dinp", "dweight", "dbias"), build=build,
    error_bound=error_bound, products=products, updates=("dweight", "dbias"),
    cases=(
        dict(B=1, T=1, C=5, OC=3),                          # one row, every size under a tile
        dict(B=1, T=1, C=768, OC=2304),                     # one row at GPT-2's qkv size: dweight an outer product
        dict(B=2, T=7, C=33, OC=65),                        # no size a multiple of 4: scalar loads throughout
        dict(B=2, T=7, C=33, OC=65, variant="no-bias"),
        dict(B=3, T=11, C=36, OC=20),                       # float4 loads, tiles and slices cut at every edge
        dict(B=2, T=9, C=33, OC=64),                        # dout's rows float4s, inp's and weight's not
        dict(B=1, T=70, C=68, OC=45, variant="no-bias"),    # and the other way round
        dict(B=4, T=64, C=768, OC=2304),                    # GPT-2's qkv projection
        dict(B=4, T=64, C=3072, OC=768),                    # GPT-2's MLP projection
        dict(B=2, T=7, C=64, OC=96, values="extreme"),
        dict(B=1, T=16, C=40, OC=24),                       # products too short for the tensor cores
        dict(B=2, T=17, C=40, OC=33),                       # just long enough, dout^T's columns not float4s
        dict(B=1, T=33, C=130, OC=132),                     # past one tile of 128; inp's and weight's rows odd
        dict(B=2, T=9, C=16900, OC=20),                     # 133 tiles of 128 x 128 in each product: the large
                                                            # kernels, on 132 SMs too, with rows past every edge
        dict(B=4, T=130, C=200, OC=72),                     # dweight's K split in two slices of scratch, the
                                                            # second short; the slices added as float4s
        dict(B=2, T=400, C=201, OC=73, variant="no-bias"),  # in three, added one float at a time (OC * C odd)
        dict(B=3, T=40, C=72, OC=36, values="extreme"),
        dict(B=1, T=20, C=64, OC=8192, variant="softmax"),  # the LM head's gradient: long sums of one-signed terms
    ),
    quick=dict(B=4, T=64, C=768, OC=2304),
    # GPT-2 124M's matmuls at B=8, T=1024: qkv, attention projection, MLP up and down
    benchmark=tuple(dict(B=8, T=1024, C=C, OC=OC) for C, OC in ((768, 2304), (768, 768), (768, 3072), (3072, 768))),
    traffic=traffic, flops=flops,
    graded=False, milestone=4,
)
