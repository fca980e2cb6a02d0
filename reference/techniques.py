"""Evidence that a kernel uses the technique it claims: read from its compiled code, or
from the calls it made.

A kernel is compiled to PTX through NVRTC (no GPU needed) and its instructions are
searched:

    tensor_cores   mma.sync, wmma.mma or wgmma instructions: the tensor cores do the products
    shared_memory  stores to shared memory (st.shared, or cp.async into it) and loads back
                   (ld.shared or ldmatrix): data is staged in tiles
    reduction      warp shuffles (shfl.sync), or shared memory read back after a barrier
                   (st.shared, bar.sync, ld.shared): partial results are combined in parallel
    split_k        float atomic adds to global memory (red or atom .global.add.f32): blocks
                   that each summed a slice of K add their partial sums into out

A kernel's own instructions are its entry's and those of the device functions it
calls that were not inlined (a device function nothing calls shows nothing). The
kernels looked at are the ones a variant launched on its cases (the recording names
them), found among the CudaKernels that loaded modules define at their top level
(where two share a name, both must show it); with no launches to go by (no GPU),
every kernel of its module.

    cublas         a cuBLAS call (through cupy.cublas) in every case's recording
    fused          one kernel launched by every call (the recording counts them): the work of
                   several kernels done in one

A variant that passes its cases without its technique's evidence scores 0, with the
reason (the course's milestone-2 items).
"""

from __future__ import annotations

import dataclasses
import re
import sys

from kernel_runtime.compiler import CudaKernel, by_compilation, compile_ptx, kernels_in

ARCH = "sm_86"  # the course's GPU (A40); every technique here exists there


@dataclasses.dataclass(frozen=True)
class Technique:
    name: str
    shows_as: str                  # what the evidence is, in words
    all_of: tuple[str, ...] = ()   # PTX patterns that must all appear
    any_of: tuple[tuple[str, ...], ...] = ()  # or: one of these groups, each all present
    library: str | None = None     # shown by calls to this library instead (kernel_runtime.recording.LIBRARIES)
    one_launch: bool = False       # shown by every call launching exactly one kernel instead

    @property
    def in_ptx(self) -> bool:
        """Whether the evidence is in the compiled code (else in the calls the recording saw)."""
        return not (self.library or self.one_launch)

    def shown_by(self, ptx: str) -> bool:
        groups = ((self.all_of,) if self.all_of else ()) + self.any_of
        return any(all(re.search(pattern, ptx) for pattern in group) for group in groups)

    @property
    def permit(self) -> tuple[str, ...]:
        """The libraries a recording of this technique's variant must permit."""
        return (self.library,) if self.library else ()


TECHNIQUES = {t.name: t for t in (
    Technique("tensor_cores", "tensor-core instructions (mma.sync, wmma.mma or wgmma) in its PTX",
              all_of=(r"\b(?:mma\.sync|wmma\.mma|wgmma\.mma_async)\b",)),
    Technique("shared_memory", "shared memory written and read back (st.shared or cp.async, then ld.shared or "
                               "ldmatrix) in its PTX",
              all_of=(r"\b(?:st\.shared|cp\.async[.\w]*\.shared)", r"\b(?:ld\.shared|ldmatrix)")),
    Technique("reduction", "warp shuffles (shfl.sync), or shared memory read back after a barrier, in its PTX",
              any_of=((r"\bshfl\.sync",), (r"\bst\.shared", r"\bbar\.sync", r"\bld\.shared"))),
    Technique("flash", "exponentials in a kernel that writes and reads shared memory (ex2 with st.shared and "
                       "ld.shared in one kernel's PTX): the softmax happens where the tiles are, so no "
                       "probabilities leave the kernel",
              all_of=(r"\bex2\.approx", r"\bst\.shared", r"\bld\.shared")),
    Technique("split_k", "float atomic adds to global memory (red or atom .global.add.f32) in its PTX: blocks "
                         "that each summed a slice of K adding into out",
              all_of=(r"\b(?:red|atom)\.global\.add\.f32\b",)),
    Technique("cublas", "cuBLAS call (through cupy.cublas)", library="cublas"),
    Technique("fused", "one kernel launched per call (the layernorm, GELU or residual add inside the matmul's "
                       "kernel)", one_launch=True),
)}


def kernel_instructions(kernels: list[CudaKernel]) -> list[tuple[str, str]]:
    """(name, PTX instructions) of each of `kernels` (one compilation per distinct source and options)."""
    found = []
    for named in by_compilation(kernels).values():
        ptx = compile_ptx(named[0], ARCH)
        functions = dict(re.findall(r"\.func\s+(?:\([^)]*\)\s*)?(\w+)\s*\((.*?\n}\n)", ptx, flags=re.S))
        wanted = {k.name for k in named}
        for name, body in re.findall(r"\.entry\s+(\w+)\s*\((.*?\n}\n)", ptx, flags=re.S):
            if name in wanted:
                found.append((name, body + "".join(functions[f] for f in _called(body, functions))))
    return found


_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?(\w+)")


def _called(body: str, functions: dict[str, str]) -> list[str]:
    """The device functions (not inlined) that `body` calls, directly or through each other."""
    called, pending = [], _CALL.findall(body)
    while pending:
        name = pending.pop()
        if name in functions and name not in called:
            called.append(name)
            pending += _CALL.findall(functions[name])
    return called


def evidence(kernels: list[CudaKernel], technique: str) -> dict[str, bool]:
    """Each of `kernels` by name -> whether its compiled code shows `technique` (a PTX one of TECHNIQUES).
    Where kernels of different sources share a name, the name shows it only if all of them do: a
    launch names its kernel, not which of them it was."""
    shown_by, shown = TECHNIQUES[technique].shown_by, {}
    for name, ptx in kernel_instructions(kernels):
        shown[name] = shown.get(name, True) and shown_by(ptx)
    return shown


def missing_evidence(kernels: list[CudaKernel], technique: str) -> str | None:
    """None when one of `kernels` shows `technique` in its compiled code, else why not."""
    shown = evidence(kernels, technique)
    if any(shown.values()):
        return None
    return (f"no evidence of {technique.replace('_', ' ')}: none of {', '.join(shown) or 'no kernels'} "
            f"has {TECHNIQUES[technique].shows_as}")


def launched_kernels(names) -> tuple[list[CudaKernel], list[str]]:
    """Every CudaKernel named one of `names` that a loaded module defines at its top level (each distinct
    compilation once), and the names not found."""
    found = {}
    for module in list(sys.modules.values()):
        for kernel in kernels_in(module):
            if kernel.name in names:
                found.setdefault((kernel.name, kernel.source, kernel.options), kernel)
    seen = {kernel.name for kernel in found.values()}
    return list(found.values()), [name for name in names if name not in seen]


def missing_technique(technique: str, executions) -> str | None:
    """None when the calls recorded in `executions` (reference.execution, one per case) show
    `technique`, else why not. Run where those calls ran: the kernels must be loaded."""
    shows = TECHNIQUES[technique]
    if shows.one_launch:
        apart = [e for e in executions if e.launches != 1]
        return (f"no evidence of {technique}: {len(apart)} of {len(executions)} cases launched "
                f"{apart[0].launches} kernels in one call, not {shows.shows_as}; first {apart[0].case_id}"
                ) if apart else None
    if shows.library:
        without = [e.case_id for e in executions if not e.library_calls]
        return (f"no evidence of {technique}: {len(without)} of {len(executions)} cases made no {shows.shows_as}, "
                f"first {without[0]}") if without else None
    names = list(dict.fromkeys(name for e in executions for name in (e.kernels_launched or [])))
    kernels, unknown = launched_kernels(names)
    if unknown:
        return (f"cannot inspect the compiled code of {', '.join(unknown)}: write each kernel as a "
                f"kernel_runtime.CudaKernel at the top level of its module")
    return missing_evidence(kernels, technique)
