"""How far a whole model's logits may be from the float64 reference, per precision profile.

    fp32  LOGITS_TOLERANCE of the logits' scale (max |logit|). After ~15 kernels per
          layer, each with float32 errors of ~sqrt(C) * U ~ 2e-6 relative, GPT-2 124M's
          logits differ from the reference by ~1e-5 of their scale; 2e-4 is 10x over
          that and far below what a wrong kernel gives (1e-2 and more).
    tf32  fp32's allowance plus 4x what TF32's input rounding alone moves the logits,
          measured on an emulation independent of any kernel: the float64 reference
          with every matmul's inputs rounded to TF32 first (reference.precision.to_tf32).

The tests and the leaderboard's correctness gate both judge whole-model logits this way.
"""

from __future__ import annotations

import types

import numpy as np

from gpt2kit.model_runtime.backends import Backend, make_backend
from gpt2kit.gpt2.model import GPT2
from gpt2kit.reference.precision import Profile, to_tf32

LOGITS_TOLERANCE = 2e-4  # of max |logit|, under fp32
TF32_MARGIN = 4          # times the emulated TF32 error


def tf32_reference_backend() -> Backend:
    """gpt2kit.reference.cpu in float64, every matmul's inputs first rounded to TF32 (to nearest)."""
    reference = make_backend("reference")

    def matmul_forward(out, inp, weight, bias, B, T, C, OC):
        reference.ops.matmul_forward(out, to_tf32(inp).astype(np.float64), to_tf32(weight).astype(np.float64), bias,
                                     B, T, C, OC)

    ops = types.SimpleNamespace(**vars(reference.ops) | {"matmul_forward": matmul_forward})
    return Backend("reference, TF32 matmul inputs", np, np.float64, ops)


def allowed_logit_error(model_args: tuple, tokens: np.ndarray, reference_logits: np.ndarray, profile: Profile) -> float:
    """The largest |logit - reference| a correct model under `profile` may show on `tokens`;
    model_args = (config, params), reference_logits the float64 reference's on the same tokens."""
    allowed = LOGITS_TOLERANCE * float(np.abs(reference_logits).max())
    if profile.product_input_rounding:
        emulated = GPT2(*model_args, backend=tf32_reference_backend())(tokens)
        allowed += TF32_MARGIN * float(np.abs(emulated - reference_logits).max())
    return allowed
