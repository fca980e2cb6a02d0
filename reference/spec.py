"""What the kit knows about one host function, in one place: its Spec.

A spec names the host function and the kernel module that defines it, the arguments
it writes, how to draw inputs for a case, how large an error each output element may
carry, the cases the tests and the grader run, the quick check's case and the
benchmark's sizes. reference/specs/ holds one spec per host function, and everything
else is derived from them (reference.registry): the tests' parametrization, the
quick check's rows, the step check's outputs, the benchmark's rows, the grader's
coverage of weights.toml.

Adding a host function takes three things: its kernel module in kernels/, its
references in reference/cpu.py and reference/gold.py, and a spec module in
reference/specs/.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    """One test case of a host function: its sizes, the kind of values, a variant and a seed."""

    function: str
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

    @property
    def shape_id(self) -> str:
        """The case without its seed: a tape recorded on one seed's inputs is replayed on another's."""
        return self.id.rsplit("-seed", 1)[0]

    def other_inputs(self) -> Case:
        """The same case with inputs from another seed: what a recorded call is replayed on."""
        return dataclasses.replace(self, seed=(self.seed * 0x9E3779B1 + 0x7F4A7C15) % 2**31)


def make_case(function: str, base_seed: int = 0, values: str = "normal", variant: str = "", **sizes: int) -> Case:
    """A case whose seed mixes `base_seed` with everything else, so each case draws its own inputs."""
    key = f"{function}|{sorted(sizes.items())}|{values}|{variant}".encode()
    seed = (zlib.crc32(key) ^ (base_seed * 0x9E3779B1)) % 2**31
    return Case(function, tuple(sizes.items()), values, variant, seed)


@dataclasses.dataclass
class Arguments:
    """One call's arguments for a case, in call order: a host array for each input, a
    shape for each output (None for an optional one the case leaves out), Python scalars
    for the sizes."""

    values: dict
    same_array: dict = dataclasses.field(default_factory=dict)  # output -> the input it is (an in-place call)
    initial: dict = dataclasses.field(default_factory=dict)     # output -> its content before the call;
                                                                # NaN marks the elements the call must write


@dataclasses.dataclass(frozen=True)
class Spec:
    function: str                       # the host function, e.g. "layernorm_forward"
    module: str                         # kernels/<module>.py defines it
    outputs: tuple[str, ...]            # the arguments it writes that the checks compare
    build: Callable[[Case, np.random.Generator], Arguments]  # fresh inputs for a case
    error_bound: Callable[[dict, dict], dict]  # (float64 inputs, the `updates` outputs' content before the
                                               # call, integer sizes; float64 expected outputs) -> allowed |error|
    cases: tuple[dict, ...]             # sizes, and values= or variant= where they differ from the default
    quick: dict | None = None           # the quick check's case (python -m gpt2kit.reference.verify)
    scratch: tuple[str, ...] = ()       # arguments it may write that nobody checks
    updates: tuple[str, ...] = ()       # outputs whose content before the call it reads (gradients added to, the
                                        # optimizer's moments): every case gives their `initial` content
    benchmark: tuple[dict, ...] = ()    # the sizes python -m gpt2kit.benchmarks.kernels times
    traffic: Callable[[dict], int] | None = None  # the fewest bytes a call must move (each input read
                                                  # once, each output written once), for GB/s
    flops: Callable[[dict], int] | None = None    # useful floating-point operations, for TFLOP/s
    graded: bool = True                 # students write it, and grading/weights.toml must score it
    provided: bool = False              # the kit gives it whole: no solution block, so never a stub (the study's
                                        # choosing and reordering kernels, Wav2Vec2's layers); never graded
    handed_out: bool = True             # in the starter kits; False: the staff's alone, spec and kernel module (a
                                        # provided module holding what a milestone grades: a tiled product, a
                                        # reduction, a backward pass; grading.handout)
    milestone: int = 1                  # the course milestone that asks for it: earlier milestones' kits leave
                                        # out its spec and kernel module (grading.handout)
    products: Callable[[dict], dict] | None = None  # (float64 inputs) -> per output, the sum of |a * b| over
                                                     # the products behind each element (reference.precision)

    def __post_init__(self):
        if self.provided and self.graded:
            raise TypeError(f"{self.function}: a spec the kit provides whole is not graded (graded=False)")
        if not (self.handed_out or self.provided):
            raise TypeError(f"{self.function}: a host function students write is handed out (handed_out=True)")
        if not set(self.updates) <= set(self.outputs):
            raise TypeError(f"{self.function}: updates {self.updates} must be among its outputs {self.outputs}")

    @property
    def written(self) -> tuple[str, ...]:
        return self.outputs + self.scratch

    def test_cases(self, base_seed: int = 0) -> list[Case]:
        return [make_case(self.function, base_seed, **entry) for entry in self.cases]

    def quick_case(self, base_seed: int = 0) -> Case:
        return make_case(self.function, base_seed, **self.quick)

    def benchmark_cases(self) -> list[Case]:
        return [make_case(self.function, **sizes) for sizes in self.benchmark]


@dataclasses.dataclass
class Problem:
    """A case with its inputs drawn: what a call gets, and what is checked afterwards."""

    spec: Spec
    case: Case
    arguments: Arguments
    references: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # computed so far:
    # what they were computed against (reference.judging.expected_outputs) -> the float64 outputs
    fp32_bounds: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # likewise, the fp32
    # rounding bounds of the outputs against each reference (reference.judging.allowed_errors)

    @property
    def args(self) -> dict:
        return self.arguments.values

    @property
    def outputs(self) -> tuple[str, ...]:
        """The spec's outputs this case has: one it passes as None (an optional output left out, as matmul_backward's
        dbias without a bias) is neither written nor checked."""
        return tuple(name for name in self.spec.outputs if self.args[name] is not None)

    def inputs(self) -> dict:
        return {k: v for k, v in self.args.items() if isinstance(v, np.ndarray)}


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """float32 samples of a normal distribution with standard deviation `scale`."""
    samples = rng.standard_normal(shape)
    return (samples if scale == 1.0 else samples * scale).astype(np.float32)


def cache_lengths(rng: np.random.Generator, B: int, max_T: int, T: int = 1) -> np.ndarray:
    """KV-cache lengths for B rows, leaving room for T new tokens; the first row empty, the last full."""
    lengths = rng.integers(0, max_T - T + 1, size=B).astype(np.int32)
    lengths[0], lengths[-1] = 0, max_T - T
    return lengths


def exact(inputs: dict, expected: dict) -> dict:
    """The error bound of a host function that only copies values or makes decisions (token ids, beams): zero for
    every element of every output."""
    return {name: np.zeros(np.shape(values)) for name, values in expected.items()}
