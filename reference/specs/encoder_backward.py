"""encoder_backward(dwte, dwpe, dout, inp, B, T, C): dwte[inp[b, t]] += dout[b, t] and dwpe[t] += sum over b of
dout[b, t]; dwpe's rows from T on are left as they are."""

import numpy as np

from gpt2kit.reference.numerics import U
from gpt2kit.reference.spec import Arguments, Spec, normal
from gpt2kit.reference.specs.encoder import GPT2
from gpt2kit.reference.specs.residual import signed_magnitudes


def build(case, rng):
    B, T, C, V, max_T = (case.size[k] for k in ("B", "T", "C", "V", "max_T"))
    if case.variant == "one-token":  # every position the same id: one row gathers all B * T rows of dout
        tokens = np.full((B, T), rng.integers(0, V), dtype=np.int32)
    else:
        tokens = rng.integers(0, V, size=(B, T), dtype=np.int32)
        tokens.flat[0], tokens.flat[-1] = 0, V - 1  # both ends of the table
    if case.values == "extreme":  # magnitudes from 1e-30 to 1e30, both signs: sums that cancel
        dout, dwte, dwpe = (signed_magnitudes(rng, n, -30, 30).reshape(n // C, C) for n in (B * T * C, V * C,
                                                                                              max_T * C))
    else:
        dout, dwte, dwpe = normal(rng, B * T, C), normal(rng, V, C), normal(rng, max_T, C)
    # the gradients gathered so far: what the call adds to (dwpe's rows past T must come back as they were)
    return Arguments(dict(dwte=(V, C), dwpe=(max_T, C), dout=dout.reshape(B, T, C), inp=tokens, B=B, T=T, C=C),
                     initial=dict(dwte=dwte, dwpe=dwpe))


def error_bound(x, e):
    # Each element is its initial value plus k rows of dout (k: the token's count in the batch for dwte, B for
    # dwpe's first T rows, 0 elsewhere: left exact). Summed in float32 in any order, k roundings err by at most
    # gamma_k = k U / (1 - k U) times the sum of the terms' magnitudes: linear in the repetition count k (rounding
    # errors of random sign usually make it nearer sqrt(k) U). The initial value is no input, but
    # |initial| <= |expected| + the sum of |dout| over its k rows. Only the rows the batch adds to are worked on:
    # at GPT-2's vocabulary they are a few hundred of dwte's 50,257.
    B, T, C = x["B"], x["T"], x["C"]
    grads = np.abs(x["dout"]).reshape(B * T, C)
    touched, token_of_row = np.unique(x["inp"].astype(np.int64).ravel(), return_inverse=True)
    token_sums = np.zeros((len(touched), C))
    np.add.at(token_sums, token_of_row, grads)
    token_counts = np.bincount(token_of_row).reshape(-1, 1)
    dwte, dwpe = np.zeros(e["dwte"].shape), np.zeros(e["dwpe"].shape)
    dwte[touched] = summation_error(token_counts, token_sums, e["dwte"][touched])
    dwpe[:T] = summation_error(B, grads.reshape(B, T, C).sum(axis=0), e["dwpe"][:T])
    return {"dwte": dwte, "dwpe": dwpe}


def summation_error(k, terms, expected):
    """The rounding error of an initial value plus k terms of total magnitude `terms`, summed to `expected`."""
    return k * U / (1 - k * U) * (np.abs(expected) + 2 * terms)


SPEC = Spec(
    function="encoder_backward", module="encoder_backward", outputs=("dwte", "dwpe"), build=build,
    error_bound=error_bound, updates=("dwte", "dwpe"),
    cases=(
        dict(B=1, T=1, C=8, **GPT2),
        dict(B=2, T=7, C=5, V=11, max_T=16),
        dict(B=3, T=37, C=33, V=300, max_T=64),
        dict(B=4, T=300, C=40, V=1000, max_T=512, variant="one-token"),  # 1200 rows into one, over 10 tiles
        dict(B=8, T=200, C=24, V=3, max_T=256),      # a vocabulary of 3: every block's token repeats
        dict(B=4, T=400, C=33, V=300, max_T=512),    # ~5 of each token across 13 tiles: tiles without one
        dict(B=70, T=3, C=9, V=40, max_T=4),         # three turns of 32 rows a block, tokens shared within a turn
        dict(B=4, T=64, C=768, **GPT2),
        dict(B=3, T=50, C=37, V=20, max_T=64, values="extreme"),
    ),
    quick=dict(B=4, T=64, C=768, **GPT2),
    benchmark=(dict(B=8, T=1024, C=768, **GPT2),),
    # dout and the ids read once, each touched row of dwte read and written (as many as B * T: random ids from
    # 50257 rarely repeat), dwpe's first T rows read and written
    traffic=lambda s: 4 * (s["B"] * s["T"] * (3 * s["C"] + 1) + 2 * s["T"] * s["C"]),
    graded=False, milestone=4,
)
