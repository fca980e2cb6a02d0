"""The whole-model logit allowance per profile, on the CPU with a small model: fp32's is a
share of the logits' scale; tf32's adds what the TF32 emulation moves the logits, which
is more than fp32 allows (so the profile matters) and which a float32 model stays inside."""

import numpy as np

from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.logits_check import LOGITS_TOLERANCE, TF32_MARGIN, allowed_logit_error, tf32_reference_backend
from gpt2kit.gpt2.model import GPT2
from gpt2kit.reference.precision import FP32, TF32
from tests.model.helpers import TINY

WEIGHTS = (TINY, perturbed_parameters(TINY, seed=11))
TOKENS = np.random.default_rng(11).integers(0, TINY.vocab_size, (2, 9)).astype(np.int32)


def test_fp32_allows_a_share_of_the_scale_and_tf32_adds_the_emulated_error():
    reference = GPT2(*WEIGHTS, backend="reference")(TOKENS)
    emulated = GPT2(*WEIGHTS, backend=tf32_reference_backend())(TOKENS)
    scale, tf32_error = np.abs(reference).max(), np.abs(emulated - reference).max()
    assert allowed_logit_error(WEIGHTS, TOKENS, reference, FP32) == LOGITS_TOLERANCE * scale
    assert tf32_error > LOGITS_TOLERANCE * scale
    assert allowed_logit_error(WEIGHTS, TOKENS, reference, TF32) == LOGITS_TOLERANCE * scale + TF32_MARGIN * tf32_error
