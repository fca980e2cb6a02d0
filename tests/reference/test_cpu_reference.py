"""The NumPy reference against independent formulations: scalar loops, known identities.

These run on any machine. The reference is what every kernel is judged by, so it is
itself checked against code written a different way, on small seeded inputs.
"""

import math

import numpy as np
import pytest

from gpt2kit.reference import cpu

SEEDS = [1, 2, 3]


@pytest.fixture(params=SEEDS, ids=lambda s: f"seed{s}")
def rng(request):
    return np.random.default_rng(request.param)


def test_encoder_matches_loops(rng):
    B, T, C, V = 2, 3, 5, 7
    tokens = rng.integers(0, V, (B, T)).astype(np.int32)
    wte, wpe = rng.standard_normal((V, C)), rng.standard_normal((4, C))
    out = np.empty((B, T, C))
    cpu.encoder_forward(out, tokens, wte, wpe, B, T, C)
    for b in range(B):
        for t in range(T):
            for c in range(C):
                assert out[b, t, c] == wte[tokens[b, t], c] + wpe[t, c]


def test_encoder_rejects_out_of_range_token():
    tokens = np.array([[0, 9]], dtype=np.int32)
    with pytest.raises(ValueError, match=r"token id 9 at \(b=0, t=1\) is outside \[0, 5\)"):
        cpu.encoder_forward(np.empty((1, 2, 3)), tokens, np.zeros((5, 3)), np.zeros((2, 3)), 1, 2, 3)


def test_layernorm_matches_loops(rng):
    B, T, C = 2, 3, 6
    x, w, b = rng.standard_normal((B, T, C)), rng.standard_normal(C), rng.standard_normal(C)
    out, mean, rstd = np.empty((B, T, C)), np.empty((B, T)), np.empty((B, T))
    cpu.layernorm_forward(out, mean, rstd, x, w, b, B, T, C)
    for i in range(B):
        for j in range(T):
            row = list(x[i, j])
            m = sum(row) / C
            v = sum((r - m) ** 2 for r in row) / C
            s = 1 / math.sqrt(v + 1e-5)
            assert mean[i, j] == pytest.approx(m, rel=1e-12, abs=1e-15)
            assert rstd[i, j] == pytest.approx(s, rel=1e-12)
            for c in range(C):
                assert out[i, j, c] == pytest.approx((row[c] - m) * s * w[c] + b[c], rel=1e-12, abs=1e-12)


def test_layernorm_unit_weight_gives_zero_mean_unit_variance(rng):
    B, T, C = 3, 4, 256
    x = 5.0 + 3.0 * rng.standard_normal((B, T, C))
    out, mean, rstd = np.empty((B, T, C)), np.empty((B, T)), np.empty((B, T))
    cpu.layernorm_forward(out, mean, rstd, x, np.ones(C), np.zeros(C), B, T, C)
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(out.var(-1), x.var(-1) / (x.var(-1) + 1e-5), rtol=1e-12)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_matmul_matches_loops(rng, with_bias):
    B, T, C, OC = 2, 3, 4, 5
    x, w = rng.standard_normal((B, T, C)), rng.standard_normal((OC, C))
    bias = rng.standard_normal(OC) if with_bias else None
    out = np.empty((B, T, OC))
    cpu.matmul_forward(out, x, w, bias, B, T, C, OC)
    for i in range(B):
        for j in range(T):
            for o in range(OC):
                want = sum(x[i, j, c] * w[o, c] for c in range(C)) + (bias[o] if with_bias else 0.0)
                assert out[i, j, o] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_softmax_rows_are_causal_distributions(rng):
    N, T, scale = 3, 9, 0.5
    x = 10 * rng.standard_normal((N, T, T))
    x[:, ~np.tril(np.ones((T, T), dtype=bool))] = np.nan  # above the diagonal: ignored
    out = np.empty((N, T, T))
    cpu.softmax_forward(out, x, scale, N, T)
    for n in range(N):
        for t in range(T):
            exps = [math.exp(scale * x[n, t, j] - max(scale * x[n, t, : t + 1])) for j in range(t + 1)]
            np.testing.assert_allclose(out[n, t, : t + 1], np.array(exps) / sum(exps), rtol=1e-12)
            assert (out[n, t, t + 1:] == 0).all()


def test_softmax_survives_huge_scores():
    x = np.array([[[1e4, 0.0], [1e4, 1e4 - 1.0]]])
    out = np.empty_like(x)
    cpu.softmax_forward(out, x, 1.0, 1, 2)
    np.testing.assert_allclose(out[0, 1], [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))])


def test_attention_matches_loops(rng):
    B, T, C, NH = 2, 5, 6, 2
    HS = C // NH
    x = rng.standard_normal((B, T, 3 * C))
    out, att = np.empty((B, T, C)), np.empty((B, NH, T, T))
    cpu.attention_forward(out, np.empty(3 * B * T * C), att, x, B, T, C, NH)
    for b in range(B):
        for h in range(NH):
            q = x[b, :, h * HS:(h + 1) * HS]
            k = x[b, :, C + h * HS:C + (h + 1) * HS]
            v = x[b, :, 2 * C + h * HS:2 * C + (h + 1) * HS]
            for t in range(T):
                scores = [sum(q[t, d] * k[j, d] for d in range(HS)) / math.sqrt(HS) for j in range(t + 1)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                probs = [w / sum(weights) for w in weights]
                np.testing.assert_allclose(att[b, h, t, : t + 1], probs, rtol=1e-12)
                assert (att[b, h, t, t + 1:] == 0).all()
                for d in range(HS):
                    want = sum(probs[j] * v[j, d] for j in range(t + 1))
                    assert out[b, t, h * HS + d] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_residual_adds(rng):
    a, b = rng.standard_normal(11), rng.standard_normal(11)
    out = np.empty(11)
    cpu.residual_forward(out, a, b, 11)
    assert (out == a + b).all()


def test_gelu_is_the_tanh_form():
    xs = np.array([-10.0, -3.0, -1.0, -1e-3, 0.0, 0.5, 1.0, 2.0, 8.0])
    out = np.empty_like(xs)
    cpu.gelu_forward(out, xs, xs.size)
    for x, y in zip(xs, out):
        want = 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        assert y == pytest.approx(want, rel=1e-14, abs=1e-300)
    erf_form = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs]
    assert np.abs(out - erf_form).max() > 1e-4  # the forms really differ


def test_outputs_keep_their_dtype(rng):
    x = rng.standard_normal(5).astype(np.float32)
    out = np.empty(5, np.float32)
    cpu.gelu_forward(out, x, 5)
    assert out.dtype == np.float32
