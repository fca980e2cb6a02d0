"""Evidence that a variant uses the technique it claims: in the compiled code of exactly the kernels its
calls launched, in what those kernels execute on the graded cases, or in the calls themselves.

The kernels looked at are those on the calls' tapes (kernel_runtime.tape): each
launched kernel's program, its source compiled with the options it was launched
with, however it was made (a CudaKernel, a cupy.RawKernel or cupy.RawModule, at
import, lazily, kept in a dict). A kernel that is defined but never launched shows
nothing. Each is looked at twice:

1. its PTX: the technique's instructions must be in a launched kernel (its entry, or a
   device function it calls that was not inlined). The PTX is the trusted build's
   (kernel_runtime.hermetic), for the GPU that replays it when there is one, for the
   course's sm_86 without one;
2. what it executes: the tapes are replayed with every program instrumented
   (kernel_runtime.replay.count_instructions: the same PTX, a counter after each
   executed instruction of the classes below, per kernel), and that replay's outputs
   are the ones judged; code that never runs on the graded cases counts nothing.

    technique      in the PTX, and executed in one launched kernel
    tensor_cores   mma.sync, wmma.mma or wgmma; executed, they must do at least half of
                   the multiply-adds of the graded cases (spec.flops)
    3xtf32         the same instructions, doing at least 1.5 times those multiply-adds:
                   half of three passes (low x high, high x low, high x high). That each
                   pass counts is the fp32 profile's to judge: one TF32 pass fails it
    shared_memory  stores to shared memory (st.shared, cp.async into it) and loads back
                   (ld.shared, ldmatrix)
    reduction      warp shuffles (shfl.sync), or shared memory stored, a barrier, and
                   shared memory loaded
    flash          exponentials (ex2) with shared memory stored and loaded, in one kernel:
                   the softmax happens where the tiles are
    flash_3xtf32   flash's evidence and 3xtf32's tensor-core instructions in one kernel,
                   doing at least 1.5 times the multiply-adds of both products
    split_k        float atomic adds to global memory (red or atom .global.add.f32)

    cublas         a cuBLAS call (through cupy.cublas) on every case's tape
    fused          exactly one kernel launched by every call, and no library step: the
                   work of several in one

What would still fool it is in grading/README.md: instructions that execute but do
no useful work, such as a tensor-core product of the right size whose result is
thrown away while plain float32 code computes the answer.
"""

from __future__ import annotations

import dataclasses
import re

from gpt2kit.kernel_runtime.compiler import ARCH_SPECIFIC_TARGETS, compile_ptx
from gpt2kit.kernel_runtime.replay import (InstructionClass, calls_of, device_arch, functions_of, instructions_of,
                                           multiply_adds, reachable)
from gpt2kit.reference.execution import replay_on
from gpt2kit.reference.registry import spec

ARCH = "sm_86"  # the course's GPU (A40); every technique here exists there
COVERAGE = 0.5  # the share of a case's multiply-adds its tensor-core instructions must do

INSTRUCTION_CLASSES = (
    InstructionClass("tensor_core", r"^(?:mma\.sync|wmma\.mma|wgmma\.mma_async)\b", multiply_adds),
    InstructionClass("shared_store", r"^(?:st\.shared|st\.volatile\.shared|cp\.async[.\w]*\.shared|stmatrix)"),
    InstructionClass("shared_load", r"^(?:ld\.shared|ld\.volatile\.shared|ldmatrix)"),
    InstructionClass("shuffle", r"^shfl\.sync"),
    InstructionClass("barrier", r"^(?:bar\.sync|barrier\.sync|bar\.red)"),
    InstructionClass("exponential", r"^ex2\.approx"),
    InstructionClass("float_atomic_add", r"^(?:red|atom)\.(?:\w+\.)*?global\.add(?:\.noftz)?\.f32\b"),
)
CLASSES = {c.name: c for c in INSTRUCTION_CLASSES}


@dataclasses.dataclass(frozen=True)
class Technique:
    name: str
    shows_as: str                                   # what the evidence is, in words
    groups: tuple[tuple[str, ...], ...] = ()        # instruction classes that must all be in one kernel (any group)
    library: str | None = None                      # shown by calls to this library instead
    one_launch: bool = False                        # shown by every call launching exactly one kernel instead
    passes: int = 0                                 # its tensor-core instructions must do the products this
                                                    # many times over (times COVERAGE); 0: not counted

    @property
    def in_ptx(self) -> bool:
        """Whether the evidence is in the compiled code (else in the calls the tapes hold)."""
        return not (self.library or self.one_launch)

    def shown_by(self, present) -> bool:
        """Whether one kernel whose instruction classes `present` (a set, or counts) shows it."""
        return any(all(present.get(c, 0) if isinstance(present, dict) else c in present for c in group)
                   for group in self.groups)

    @property
    def permit(self) -> tuple[str, ...]:
        """The libraries a recording of this technique's variant must permit."""
        return (self.library,) if self.library else ()


TECHNIQUES = {t.name: t for t in (
    Technique("tensor_cores", "tensor-core instructions (mma.sync, wmma.mma or wgmma)", (("tensor_core",),),
              passes=1),
    Technique("3xtf32", "tensor-core instructions (mma.sync, wmma.mma or wgmma) doing every product three times "
                        "(split TF32 operands: low x high, high x low, high x high)", (("tensor_core",),), passes=3),
    Technique("shared_memory", "shared memory written and read back (st.shared or cp.async, then ld.shared or "
                               "ldmatrix)", (("shared_store", "shared_load"),)),
    Technique("reduction", "warp shuffles (shfl.sync), or shared memory read back after a barrier",
              (("shuffle",), ("shared_store", "barrier", "shared_load"))),
    Technique("flash", "exponentials in a kernel that writes and reads shared memory (ex2 with st.shared and "
                       "ld.shared in one kernel): the softmax happens where the tiles are, so no probabilities "
                       "leave the kernel", (("exponential", "shared_store", "shared_load"),)),
    Technique("flash_3xtf32", "exponentials and tensor-core instructions in a kernel that writes and reads shared "
                              "memory, the tensor cores doing every product three times (split TF32 operands)",
              (("exponential", "shared_store", "shared_load", "tensor_core"),), passes=3),
    Technique("split_k", "float atomic adds to global memory (red or atom .global.add.f32): blocks that each "
                         "summed a slice of K adding into out", (("float_atomic_add",),)),
    Technique("cublas", "cuBLAS call (through cupy.cublas)", library="cublas"),
    Technique("fused", "one kernel launched per call and no library step (the layernorm, GELU or residual add "
                       "inside the matmul's kernel)", one_launch=True),
)}


def classes_in_ptx(ptx: str, entry: str) -> set[str]:
    """The instruction classes in `entry`'s PTX, with the device functions it calls."""
    spans = functions_of(ptx)
    if entry not in spans:
        return set()
    functions = (entry, *reachable(entry, calls_of(ptx, spans)))
    instructions = [i for f in functions if f in spans for i in instructions_of(ptx[slice(*spans[f])]) if i]
    return {c.name for c in INSTRUCTION_CLASSES if any(re.search(c.pattern, i) for i in instructions)}


def static_classes(launched, arch: str = ARCH) -> dict[str, set[str]]:
    """kernel name -> instruction classes in its compiled code, for each (program, kernel) of `launched`
    (compiled for `arch`; kernel None: every kernel of the program; a kernel launched from several programs
    shows a class only if all of them have it)."""
    found = {}
    for program, kernel in launched:
        # an arch-specific program has one build, for its own target (sm_90a): its code is what it shows
        built_for = ARCH_SPECIFIC_TARGETS[0] if program.arch_specific and arch not in ARCH_SPECIFIC_TARGETS else arch
        ptx, lowered = compile_ptx(program, built_for)
        for name in ([kernel] if kernel is not None else re.findall(r"\.entry\s+(\w+)", ptx)):
            classes = classes_in_ptx(ptx, lowered.get(name, name))
            found[name] = found[name] & classes if name in found else classes
    return found


def launched_kernels(executions) -> list:
    """(program, kernel) of every kernel the executions' tapes launched, each once."""
    return list(dict.fromkeys(pair for e in executions if e.tape is not None for pair in e.tape.kernels_launched()))


def missing_technique(technique: str, executions, counts: dict | None = None, products: int = 0,
                      static: dict | None = None) -> str | None:
    """None when the calls recorded in `executions` (reference.execution, one per case, with their tapes) show
    `technique`, else why not. `counts` is what their replays executed (kernel -> class -> count, summed over
    the cases; None: not counted, the compiled code alone is judged), `products` the multiply-adds of the cases,
    `static` the launched kernels' instruction classes as the replay's build has them (static_classes; None:
    the course's sm_86 build)."""
    shows = TECHNIQUES[technique]
    if shows.one_launch:
        apart = [e for e in executions if e.launches != 1 or e.library_calls]
        if not apart:
            return None
        first = apart[0]
        did = (f"launched {first.launches} kernels" if first.launches != 1 else
               f"made {first.library_calls} library call{'s' if first.library_calls > 1 else ''} beside its kernel")
        return (f"no evidence of {technique}: {len(apart)} of {len(executions)} cases {did} in one call, not "
                f"{shows.shows_as}; first {first.case_id}")
    if shows.library:
        without = [e.case_id for e in executions if not e.library_calls]
        return (f"no evidence of {technique}: {len(without)} of {len(executions)} cases made no {shows.shows_as}, "
                f"first {without[0]}") if without else None
    static = static_classes(launched_kernels(executions)) if static is None else static
    if not any(shows.shown_by(classes) for classes in static.values()):
        return (f"no evidence of {technique.replace('_', ' ')}: none of {', '.join(static) or 'no kernels'} "
                f"has {shows.shows_as} in its compiled code")
    if counts is None:
        return None
    if not any(shows.shown_by(kernel_counts) for kernel_counts in counts.values()):
        return (f"no evidence of {technique.replace('_', ' ')}: {shows.shows_as} are in the compiled code, but "
                f"the graded cases never executed them in one kernel (code that does not run shows nothing)")
    done = sum(kernel_counts.get("tensor_core", 0) for kernel_counts in counts.values())
    needed = COVERAGE * shows.passes * products
    if needed and done < needed:
        need = f"at least {100 * COVERAGE:.0f}% of them" + (
            f", {shows.passes} times each: {100 * COVERAGE * shows.passes:.0f}%" if shows.passes > 1 else "")
        return (f"no evidence of {technique.replace('_', ' ')}: its tensor-core instructions did {done:,} "
                f"multiply-adds, {100 * done / products:.1f}% of the graded cases' {products:,} (they must do "
                f"{need})")
    return None


def add_counts(total: dict, counts: dict) -> dict:
    """`total` (kernel -> class -> count) with `counts` added in."""
    for kernel, by_class in counts.items():
        into = total.setdefault(kernel, {})
        for name, value in by_class.items():
            into[name] = into.get(name, 0) + value
    return total


def products_of(function: str, cases) -> int:
    """The multiply-adds of `function`'s spec (half its flops) over `cases`; 0 when the spec counts none."""
    flops = spec(function).flops
    return sum(flops(case.size) // 2 for case in cases) if flops else 0


def missing_technique_here(technique: str, executions, problems) -> str | None:
    """missing_technique for calls recorded in this process (reference.execution.execute, one per problem):
    their tapes replayed here with their programs instrumented, on their own problems' inputs, counted and
    looked at in this GPU's build, as the grader's replayer does."""
    shows, counts, static = TECHNIQUES[technique], None, None
    if shows.in_ptx:
        counts = {}
        for execution, problem in zip(executions, problems):
            if execution.tape is not None and execution.error is None:
                add_counts(counts, replay_on(execution.tape, problem, shows.permit, INSTRUCTION_CLASSES)[2])
        static = static_classes(launched_kernels(executions), device_arch())
    products = products_of(problems[0].spec.function, [p.case for p in problems]) if problems else 0
    return missing_technique(technique, executions, counts, products, static)
