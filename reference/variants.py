"""Milestone variants: implementations of a host function's contract that must use a
named technique, each judged under its own precision profile.

    variant              host function            module           profile  technique      milestone
    matmul_tiled         matmul_forward           matmul           fp32     shared_memory  2
    matmul_tf32          matmul_forward           matmul_tf32      tf32     tensor_cores   2
    matmul_cublas        matmul_forward           matmul_cublas    fp32     cublas         2
    layernorm_reduction  layernorm_forward        layernorm        fp32     reduction      2
    softmax_reduction    softmax_forward          attention        fp32     reduction      2
    attention_flash      flash_attention_forward  flash_attention  fp32     flash          3
    attention_local      local_attention_forward  flash_attention  fp32     flash          3
    matmul_split_k       matmul_forward           matmul_split_k   fp32     split_k        3
    matmul_3xtf32        matmul_forward           matmul_3xtf32    fp32     3xtf32         3
    attention_flash_3xtf32
                         flash_attention_forward  flash_attention_3xtf32
                                                                   fp32     flash_3xtf32   3
    rotary               rotary_forward           rotary           fp32     -              3
    kv_cache_append, decode_attention, encoder_at_positions: the decoding host
                         functions, in decode.py, fp32, no technique (milestone 3's KV cache)
    cross_entropy, matmul_backward, layernorm_backward, attention_backward,
    gelu_backward, residual_backward, encoder_backward, adamw: training's host
                         functions, each in its spec's module, fp32, no technique (milestone 4)
    layernorm_matmul, layernorm_matmul_gelu, matmul_residual: the fused matmuls of
                         fused_gemv.py, fp32, technique fused: one kernel a call (milestone
                         3's menu); together (FUSED_DECODE_VARIANTS) they make the model's
                         decode step fused

A variant passes when every case of its host function's spec passes under its profile
and its calls show its technique (reference.techniques): the kernels it launched, in
their compiled code, or its cuBLAS calls. Only the cuBLAS variant may call cuBLAS.
The milestone-1 modules are milestone 2's tiled and reduction variants as well: the
course asks for each technique in the kernels where it applies.

A kit handed out for an earlier milestone lacks a later milestone's specs and variant
modules (grading.handout): its variants are left out of VARIANTS there.

A milestone-1 host function is a variant too, `plain(function)`: its spec's module,
fp32, no technique; so the grader runs every item of every milestone one way.

Every command that judges kernels gets its precision profile from resolve_profile:
an explicit --profile, else $KIT_PROFILE, else the variants' own profile, else fp32.
The grader and the leaderboard name no profile and read no environment: a grade is
judged under the variants' own profiles, whatever the TA's shell holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping

from gpt2kit.kernel_runtime import KitError
from gpt2kit.kernel_runtime.loader import KIT_KERNELS
from gpt2kit.reference.precision import PROFILES, Profile, ProfileError, profile_named
from gpt2kit.reference.registry import SPECS, not_written_yet
from gpt2kit.reference.techniques import TECHNIQUES


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    function: str     # the host function whose contract and cases it takes
    module: str       # kernels/<module>.py defines it
    profile_name: str
    technique: str | None  # what its calls must show (reference.techniques); None: nothing
    milestone: int

    @property
    def profile(self) -> Profile:
        return profile_named(self.profile_name)

    @property
    def permit(self) -> tuple[str, ...]:
        """The libraries its calls may use (cuBLAS, for the cuBLAS variant only)."""
        return TECHNIQUES[self.technique].permit if self.technique else ()


def plain(function: str) -> Variant:
    """A host function as milestone 1 asks for it: in its spec's module, judged under fp32."""
    return Variant(function, function, SPECS[function].module, "fp32", None, milestone=1)


DECLARED = (
    Variant("matmul_tiled", "matmul_forward", "matmul", "fp32", "shared_memory", milestone=2),
    Variant("matmul_tf32", "matmul_forward", "matmul_tf32", "tf32", "tensor_cores", milestone=2),
    Variant("matmul_cublas", "matmul_forward", "matmul_cublas", "fp32", "cublas", milestone=2),
    Variant("layernorm_reduction", "layernorm_forward", "layernorm", "fp32", "reduction", milestone=2),
    Variant("softmax_reduction", "softmax_forward", "attention", "fp32", "reduction", milestone=2),
    Variant("attention_flash", "flash_attention_forward", "flash_attention", "fp32", "flash", milestone=3),
    Variant("attention_local", "local_attention_forward", "flash_attention", "fp32", "flash", milestone=3),
    # the KV cache: the decoding host functions, which the milestone-1 kit already holds and the model uses
    Variant("kv_cache_append", "kv_cache_append_forward", "decode", "fp32", None, milestone=3),
    Variant("decode_attention", "decode_attention_forward", "decode", "fp32", None, milestone=3),
    Variant("encoder_at_positions", "encoder_at_positions_forward", "decode", "fp32", None, milestone=3),
    # the menu: a decode step's layernorms, GELU and residual adds folded into its matmuls
    Variant("layernorm_matmul", "layernorm_matmul_forward", "fused_gemv", "fp32", "fused", milestone=3),
    Variant("layernorm_matmul_gelu", "layernorm_matmul_gelu_forward", "fused_gemv", "fp32", "fused", milestone=3),
    Variant("matmul_residual", "matmul_residual_forward", "fused_gemv", "fp32", "fused", milestone=3),
    # the menu: split-K for the prefill's matmuls whose tiles are too few to fill the GPU
    Variant("matmul_split_k", "matmul_forward", "matmul_split_k", "fp32", "split_k", milestone=3),
    # the menu: float32 accuracy on the tensor cores, from three TF32 products per product
    Variant("matmul_3xtf32", "matmul_forward", "matmul_3xtf32", "fp32", "3xtf32", milestone=3),
    Variant("attention_flash_3xtf32", "flash_attention_forward", "flash_attention_3xtf32", "fp32", "flash_3xtf32",
            milestone=3),
    # the menu: GPT-J's rotary embedding, the one host function GPT-J adds to GPT-2's
    Variant("rotary", "rotary_forward", "rotary", "fp32", None, milestone=3),
    # training: the loss, a backward pass for every forward host function, and the optimizer step
    Variant("cross_entropy", "cross_entropy_forward_backward", "cross_entropy", "fp32", None, milestone=4),
    Variant("matmul_backward", "matmul_backward", "matmul_backward", "fp32", None, milestone=4),
    Variant("layernorm_backward", "layernorm_backward", "layernorm_backward", "fp32", None, milestone=4),
    Variant("attention_backward", "attention_backward", "attention_backward", "fp32", None, milestone=4),
    Variant("gelu_backward", "gelu_backward", "gelu_backward", "fp32", None, milestone=4),
    Variant("residual_backward", "residual_backward", "residual_backward", "fp32", None, milestone=4),
    Variant("encoder_backward", "encoder_backward", "encoder_backward", "fp32", None, milestone=4),
    Variant("adamw", "adamw_update", "adamw", "fp32", None, milestone=4),
)
FUSED_DECODE_VARIANTS = ("layernorm_matmul", "layernorm_matmul_gelu", "matmul_residual")  # together: the fused step
VARIANTS = {v.name: v for v in DECLARED if v.function in SPECS and (KIT_KERNELS / f"{v.module}.py").exists()}


def _check(variants) -> None:
    """A variant naming a host function, technique or profile that does not exist fails at import."""
    for variant in variants:
        if variant.function not in SPECS or variant.technique not in (*TECHNIQUES, None):
            raise TypeError(f"variant {variant.name}: no host function {variant.function!r} or technique "
                            f"{variant.technique!r}")
        profile_named(variant.profile_name)


_check(VARIANTS.values())


class VariantError(KitError):
    """A variant that does not exist, or variants that cannot go together."""


def variant_named(name: str) -> Variant:
    if name not in VARIANTS:
        raise VariantError(f"no variant {name!r}; the variants are {', '.join(VARIANTS)}")
    return VARIANTS[name]


def variant_argument(name: str) -> str:
    """A command line's --variant (an argparse type): a name variant_named knows, else its line, at parsing, so
    that a command names an unknown variant before anything else (a missing GPU)."""
    try:
        return variant_named(name).name
    except VariantError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


PROFILE_VARIABLE = "KIT_PROFILE"


def add_profile_option(add_option: Callable, judged: str, fallback: str = "the variants' own, else fp32") -> None:
    """Declare --profile, the precision profile resolve_profile reads, with `add_option` (argparse's add_argument or
    pytest's addoption); `judged`: what the profile decides in this command, `fallback`: its default after
    $KIT_PROFILE."""
    add_option("--profile", default=None, metavar="NAME",
               help=f"the precision profile {judged}: {', '.join(PROFILES)} (default: ${PROFILE_VARIABLE}, else "
                    f"{fallback})")


def resolve_profile(name: str | None, variants: Iterable[Variant] = (),
                    environ: Mapping[str, str] = os.environ) -> Profile:
    """The precision profile a check runs under: `name` (a --profile flag) when given, else
    $KIT_PROFILE in `environ` when set, else the variants' own (tf32 if any of them is judged under
    it), else fp32. A name that is no profile is a ProfileError saying where it came from."""
    for given, source in ((name, "--profile"), (environ.get(PROFILE_VARIABLE) or None, f"${PROFILE_VARIABLE}")):
        if given is not None:
            try:
                return profile_named(given)
            except ProfileError as err:
                raise ProfileError(f"{source}: {err}") from None
    own = {variant.profile_name for variant in variants}
    return profile_named("tf32" if "tf32" in own else "fp32")


def first_unwritten(variants: Iterable[Variant], directory: Path | None = None) -> str | None:
    """The line naming the first of `variants` whose host function is still a starter kit's stub in the variant's
    module (reference.registry.not_written_yet, in `directory` as it reads it), or None."""
    return next(filter(None, (not_written_yet([v.function], v.module, directory) for v in variants)), None)


def milestone_variants(milestone: int) -> list[Variant]:
    """What a milestone's grading scheme must score: milestone 1's host functions, or a later one's variants."""
    if milestone == 1:
        return [plain(s.function) for s in SPECS.values() if s.graded]
    return [v for v in VARIANTS.values() if v.milestone == milestone]


def new_modules(milestone: int) -> list[str]:
    """The kernel modules that only variants of `milestone` define (no spec's module)."""
    spec_modules = {s.module for s in SPECS.values()}
    return sorted({v.module for v in VARIANTS.values() if v.milestone == milestone} - spec_modules)
