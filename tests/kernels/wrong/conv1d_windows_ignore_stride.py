"""Conv1d whose windows, read in place as rows of a matrix, are taken one frame apart whatever the stride: with
stride > 1 every output frame after the first reads the wrong window."""

from gpt2kit.kernels.conv1d import launch_forward, launch_windows, windows_are_rows

FUNCTION = "conv1d_forward"


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    if windows_are_rows(C, K, padding, groups):
        launch_windows(out, inp, weight, bias, B, T, C, OC, K, 1, T_out)
    else:
        launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out)
