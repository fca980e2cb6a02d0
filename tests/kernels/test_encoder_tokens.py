"""Out-of-range token ids must not pass silently: the encoder fills their rows with NaN."""

import numpy as np
import pytest

from gpt2kit.reference.registry import host_function

pytestmark = [pytest.mark.gpu, pytest.mark.calls("encoder_forward")]


def test_out_of_range_token_rows_are_nan():
    import cupy

    rng = np.random.default_rng(11)
    B, T, C, V = 2, 5, 40, 30
    wte = rng.standard_normal((V, C)).astype(np.float32)
    wpe = rng.standard_normal((T, C)).astype(np.float32)
    tokens = rng.integers(0, V, (B, T)).astype(np.int32)
    tokens[0, 1], tokens[1, 4] = -1, V
    out = cupy.full((B, T, C), 123.0, np.float32)  # not NaN: the NaN must come from the kernel
    host_function("encoder_forward")(out, cupy.asarray(tokens), cupy.asarray(wte), cupy.asarray(wpe), B, T, C)
    got = cupy.asnumpy(out)
    bad = np.zeros((B, T), dtype=bool)
    bad[0, 1] = bad[1, 4] = True
    assert np.isnan(got[bad]).all()
    good_tokens = np.where(bad, 0, tokens)
    np.testing.assert_array_equal(got[~bad], (wte[good_tokens] + wpe[None, :T])[~bad])
