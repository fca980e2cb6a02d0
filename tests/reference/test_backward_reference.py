"""The backward passes' NumPy references (reference.cpu) against PyTorch autograd, in float64 on the CPU.

Each case draws fresh inputs and an upstream gradient dout from a seed in its test id,
runs the forward pass in torch, and compares torch's gradients with the reference's:
both are float64, so they agree to rounding (1e-10 relative to the largest gradient).
Parameter gradients are added to (the arrays start random, and must keep that start),
activation gradients written, as the references' section of reference/cpu.py says."""

import numpy as np
import pytest

from gpt2kit.reference import cpu

torch = pytest.importorskip("torch", reason="needs PyTorch: the README's Setup says how to add it")

SEEDS = [0, 1]
TOLERANCE = 1e-10  # float64 on both sides: rounding only, relative to the largest element


def close(ours, theirs):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
    scale = max(float(np.abs(theirs).max()), 1e-300)
    assert np.abs(ours - theirs).max() <= TOLERANCE * scale, float(np.abs(ours - theirs).max() / scale)


def tensor(array):
    return torch.tensor(array, dtype=torch.float64, requires_grad=True)


def seeded(seed, name):
    return np.random.default_rng([seed, sum(map(ord, name))])


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, V", [(2, 5, 12, 7), (3, 1, 8, 50), (1, 9, 3, 4)])
def test_encoder_backward_gathers_repeated_tokens(seed, B, T, C, V):
    rng = seeded(seed, "encoder")
    tokens = rng.integers(0, V, size=(B, T))
    tokens[0, 0] = tokens[-1, -1]  # a repeated token: both rows' gradients land in one row of dwte
    wte, wpe, dout = rng.normal(size=(V, C)), rng.normal(size=(T + 2, C)), rng.normal(size=(B, T, C))
    start_wte, start_wpe = rng.normal(size=(V, C)), rng.normal(size=(T + 2, C))
    dwte, dwpe = start_wte.copy(), start_wpe.copy()
    cpu.encoder_backward(dwte, dwpe, dout, tokens.astype(np.int32), B, T, C)
    wte_t, wpe_t = tensor(wte), tensor(wpe)
    (wte_t[torch.tensor(tokens)] + wpe_t[:T]).backward(torch.tensor(dout))
    close(dwte - start_wte, wte_t.grad)
    close(dwpe - start_wpe, wpe_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C", [(2, 3, 16), (1, 1, 5), (3, 7, 33)])
def test_layernorm_backward_from_saved_statistics(seed, B, T, C):
    rng = seeded(seed, "layernorm")
    x = rng.normal(size=(B, T, C)) * 3 + 10  # a large mean: the centred form matters
    weight, bias, dout = rng.normal(size=C), rng.normal(size=C), rng.normal(size=(B, T, C))
    out, mean, rstd = np.empty((B, T, C)), np.empty((B, T)), np.empty((B, T))
    cpu.layernorm_forward(out, mean, rstd, x, weight, bias, B, T, C)
    starts = [rng.normal(size=shape) for shape in ((B, T, C), C, C)]
    dinp, dweight, dbias = (s.copy() for s in starts)
    cpu.layernorm_backward(dinp, dweight, dbias, None, dout, x, weight, mean, rstd, B, T, C)
    x_t, weight_t, bias_t = tensor(x), tensor(weight), tensor(bias)
    torch.nn.functional.layer_norm(x_t, (C,), weight_t, bias_t, eps=cpu.LAYERNORM_EPS).backward(torch.tensor(dout))
    for ours, start, theirs in zip((dinp, dweight, dbias), starts, (x_t, weight_t, bias_t)):
        close(ours - start, theirs.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("B, T, C, OC", [(2, 3, 16, 24), (1, 1, 7, 5), (3, 5, 9, 13)])
def test_matmul_backward(seed, with_bias, B, T, C, OC):
    rng = seeded(seed, "matmul")
    x, weight, bias, dout = (rng.normal(size=s) for s in ((B, T, C), (OC, C), OC, (B, T, OC)))
    dinp = np.full((B, T, C), np.nan)  # written: nothing of it may be read
    start_weight, start_bias = rng.normal(size=(OC, C)), rng.normal(size=OC)
    dweight, dbias = start_weight.copy(), start_bias.copy() if with_bias else None
    cpu.matmul_backward(dinp, dweight, dbias, dout, x, weight, B, T, C, OC)
    x_t, weight_t, bias_t = tensor(x), tensor(weight), tensor(bias)
    out = x_t @ weight_t.T + (bias_t if with_bias else 0)
    out.backward(torch.tensor(dout))
    close(dinp, x_t.grad)
    close(dweight - start_weight, weight_t.grad)
    if with_bias:
        close(dbias - start_bias, bias_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, C, NH", [(2, 4, 16, 2), (1, 1, 8, 2), (2, 7, 30, 3)])
def test_attention_backward_from_saved_probabilities(seed, B, T, C, NH):
    rng = seeded(seed, "attention")
    x, dout = rng.normal(size=(B, T, 3 * C)), rng.normal(size=(B, T, C))
    out, att = np.empty((B, T, C)), np.empty((B, NH, T, T))
    cpu.attention_forward(out, None, att, x, B, T, C, NH)
    att[..., ~np.tril(np.ones((T, T), dtype=bool))] = np.nan  # above the diagonal: never read
    dinp = np.full((B, T, 3 * C), np.nan)
    cpu.attention_backward(dinp, None, dout, x, att, B, T, C, NH)
    x_t = tensor(x)
    q, k, v = (part.reshape(B, T, NH, C // NH).transpose(1, 2) for part in x_t.split(C, dim=-1))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y.transpose(1, 2).reshape(B, T, C).backward(torch.tensor(dout))
    close(dinp, x_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_gelu_backward_is_the_tanh_form(seed):
    rng = seeded(seed, "gelu")
    x = np.concatenate([rng.normal(size=97) * 3, [0.0, -30.0, 30.0]])  # saturated ends too
    dout = rng.normal(size=x.size)
    dinp = np.full(x.size, np.nan)
    cpu.gelu_backward(dinp, x, dout, x.size)
    x_t = tensor(x)
    torch.nn.functional.gelu(x_t, approximate="tanh").backward(torch.tensor(dout))
    close(dinp, x_t.grad)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("B, T, V, Vp", [(2, 3, 11, 16), (1, 1, 5, 5), (3, 4, 50, 64)])
def test_cross_entropy_losses_and_gradient_of_their_mean(seed, B, T, V, Vp):
    rng = seeded(seed, "cross_entropy")
    logits = rng.normal(size=(B, T, Vp)) * 5
    logits[0, 0, :V] += 1e4  # large logits: the log-sum-exp must subtract the largest
    targets = rng.integers(0, V, size=(B, T))
    losses, dlogits = np.empty((B, T)), np.full((B, T, Vp), np.nan)
    cpu.cross_entropy_forward_backward(dlogits, losses, logits, targets.astype(np.int32), B, T, V, Vp)
    logits_t = tensor(logits)
    per_token = torch.nn.functional.cross_entropy(logits_t[..., :V].reshape(-1, V), torch.tensor(targets).reshape(-1),
                                                  reduction="none")
    per_token.mean().backward()
    close(losses, per_token.reshape(B, T))
    close(dlogits, logits_t.grad)
    assert (dlogits[..., V:] == 0).all()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_adamw_follows_torch_for_five_steps(seed):
    rng = seeded(seed, "adamw")
    N, settings = 37, dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    params = rng.normal(size=N)
    m, v = np.zeros(N), np.zeros(N)
    theirs = torch.tensor(params.copy(), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.AdamW([theirs], **settings)
    for step in range(1, 6):
        grads = rng.normal(size=N) * 10.0 ** rng.integers(-3, 3)
        cpu.adamw_update(params, grads, m, v, N, settings["lr"], *settings["betas"], settings["eps"],
                         settings["weight_decay"], step)
        theirs.grad = torch.tensor(grads)
        optimizer.step()
        close(params, theirs)
