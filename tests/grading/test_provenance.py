"""Naming the taped kernels that are the staff's own solutions (grading.provenance), on the CPU."""

import re

from gpt2kit.grading.provenance import definitions, staff_kernels_taped, staff_solutions
from gpt2kit.kernel_runtime.tape import Launch, Program, Tape
from gpt2kit.kernels.decode import decode_attention_kernel
from gpt2kit.kernels.gelu import GELU_SOURCE
from gpt2kit.kernels.matmul import MATMUL_SOURCE, matmul_forward_kernel
from tests.kernels.wrong import COPY_SOURCE, mutate
from tests.kernels.wrong.gelu_erf_form import kernel as erf_gelu_kernel

MATMUL_LINE = "matmul_forward: taped kernel matmul_forward_kernel is the staff solution's (kernels/matmul.py)"


def launching(source: str, *kernels: str, options=()) -> Tape:
    """A tape whose one program, `source`, launches each of `kernels` once."""
    return Tape(programs=[Program(source, tuple(options))],
                steps=[Launch(0, kernel, (1, 1, 1), (32, 1, 1), 0, ()) for kernel in kernels])


def reformatted(source: str) -> str:
    """`source` as another hand would write it: its comments gone, new ones added, each statement on a line of its
    own, indented with tabs, spaces around its operators and parentheses changed."""
    source = re.sub(r"//[^\n]*", "", source)
    source = re.sub(r";[ \t]*", ";  // next\n\t\t", source)
    source = re.sub(r"\(\s*", "( ", source).replace(" = ", "=").replace("\n    ", "\n\t")
    return source.replace('extern "C"', '/* the\n staff\'s? */ extern "C"')


def test_a_tape_of_a_kit_kernel_names_it_and_its_file():
    tape = launching(matmul_forward_kernel.program.source, "matmul_forward_kernel",
                     options=matmul_forward_kernel.options)
    assert staff_kernels_taped("matmul_forward", [tape, tape]) == [MATMUL_LINE]  # once, however many calls


def test_the_device_functions_a_launched_kernel_calls_count_and_its_neighbours_do_not():
    tape = launching(decode_attention_kernel.program.source, "decode_attention_kernel")
    assert staff_kernels_taped("decode_attention", [tape]) == [
        "decode_attention: taped kernel decode_attention_kernel is the staff solution's (kernels/decode.py)",
        "decode_attention: taped device function block_reduce is the staff solution's (kernels/decode.py)"]
    # kv_cache_append_kernel and encoder_at_positions_kernel, defined beside it but not launched, are not named


def test_a_reformatted_or_renamed_copy_is_still_the_staff_solution_s():
    copy = reformatted(MATMUL_SOURCE)
    assert copy.split() != MATMUL_SOURCE.split() and "BEGIN SOLUTION" not in copy
    assert staff_kernels_taped("matmul_forward", [launching(copy, "matmul_forward_kernel")]) == [MATMUL_LINE]
    renamed = copy.replace("matmul_forward_kernel", "my_matmul")
    assert staff_kernels_taped("matmul_forward", [launching(renamed, "my_matmul")]) == [
        "matmul_forward: taped kernel my_matmul is the staff solution's matmul_forward_kernel (kernels/matmul.py)"]


def test_a_changed_kernel_or_one_only_defined_is_not_named():
    edited = mutate(MATMUL_SOURCE, "acc[i][j] += a[i] * b[j];", "acc[i][j] += b[j] * a[i];")
    assert staff_kernels_taped("matmul_forward", [launching(edited, "matmul_forward_kernel")]) == []
    beside = COPY_SOURCE + GELU_SOURCE  # the staff's GELU kernel defined, a copy launched
    assert staff_kernels_taped("gelu_forward", [launching(beside, "copy_floats")]) == []


def test_a_kit_kernel_over_a_changed_helper_is_still_named():
    """The known-wrong erf GELU changes the device function gelu, which the kit hands out whole; its kernel is
    the staff's own."""
    tape = launching(erf_gelu_kernel.program.source, "gelu_forward_kernel")
    assert staff_kernels_taped("gelu_forward", [tape]) == [
        "gelu_forward: taped kernel gelu_forward_kernel is the staff solution's (kernels/gelu.py)"]


def test_the_staff_s_solutions_are_read_from_string_constants_and_f_strings(tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "scale.py").write_text('BLOCK = 128\nPRELUDE = "#define TWO 2\\n"\nSOURCE = PRELUDE + f"""\n'
                                      '#define BLOCK {BLOCK}\n'
                                      'extern "C" __global__ void scale_kernel(float* x, int n) {{\n'
                                      '    // BEGIN SOLUTION\n'
                                      '    int i = blockIdx.x * BLOCK + threadIdx.x;  // one each\n'
                                      '    if (i < n) {{ x[i] *= TWO; }}\n'
                                      '    // END SOLUTION\n'
                                      '}}\n'
                                      '__device__ float handed_out(float v) {{ return v; }}\n"""\n')
    solutions = staff_solutions(kernels)
    assert [(d.name, path) for d, path in solutions.values()] == [("scale_kernel", "kernels/scale.py")]
    compiled = ('#define TWO 2\n#define BLOCK 128\nextern "C" __global__ void scale_kernel(float *x, int n)\n{\n'
                '  int i = blockIdx.x*BLOCK + threadIdx.x;\n  if (i < n) { x[i] *= TWO; }\n}\n')
    taped, = definitions(compiled)
    assert taped.normalised in solutions
