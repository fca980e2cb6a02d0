"""A "TF32" matmul that computes in plain float32 and has one warp run one tensor-core product of zeros per
call: the mma instruction executes, but does a few hundred of the cases' millions of multiply-adds."""

from tests.kernels.wrong_technique.tf32_in_dead_code import launch

VARIANT = "matmul_tf32"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    launch(out, inp, weight, bias, B, T, C, OC, idle=1)
