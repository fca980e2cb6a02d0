"""Milestone variants: implementations of a host function's contract that must use a
named technique, each judged under its own precision profile.

    variant              host function       module            profile  technique
    matmul_tiled         matmul_forward      matmul            fp32     shared_memory
    matmul_tf32          matmul_forward      matmul_tf32       tf32     tensor_cores
    layernorm_reduction  layernorm_forward   layernorm         fp32     reduction
    softmax_reduction    softmax_forward     attention         fp32     reduction

A variant passes when every case of its host function's spec passes under its profile
and its module's compiled code shows its technique (reference.techniques). The
milestone-1 modules are milestone 2's tiled and reduction variants as well: the
course asks for each technique in the kernels where it applies.
"""

from __future__ import annotations

import dataclasses

from reference.precision import Profile, profile_named
from reference.registry import SPECS
from reference.techniques import TECHNIQUES


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    function: str     # the host function whose contract and cases it takes
    module: str       # kernels/<module>.py defines it
    profile_name: str
    technique: str    # what its compiled code must show (reference.techniques)
    milestone: int

    @property
    def profile(self) -> Profile:
        return profile_named(self.profile_name)


VARIANTS = {v.name: v for v in (
    Variant("matmul_tiled", "matmul_forward", "matmul", "fp32", "shared_memory", milestone=2),
    Variant("matmul_tf32", "matmul_forward", "matmul_tf32", "tf32", "tensor_cores", milestone=2),
    Variant("layernorm_reduction", "layernorm_forward", "layernorm", "fp32", "reduction", milestone=2),
    Variant("softmax_reduction", "softmax_forward", "attention", "fp32", "reduction", milestone=2),
)}



def _check(variants) -> None:
    """A variant naming a host function, technique or profile that does not exist fails at import."""
    for variant in variants:
        if variant.function not in SPECS or variant.technique not in TECHNIQUES:
            raise TypeError(f"variant {variant.name}: no host function {variant.function!r} or technique "
                            f"{variant.technique!r}")
        profile_named(variant.profile_name)


_check(VARIANTS.values())


def new_modules(milestone: int) -> list[str]:
    """The kernel modules that only variants of `milestone` define (no spec's module)."""
    spec_modules = {s.module for s in SPECS.values()}
    return sorted({v.module for v in VARIANTS.values() if v.milestone == milestone} - spec_modules)
