"""bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH): multi-head attention of packed q|k|v
(B, T, 3C) in which every query of utterance b, padded ones too, attends to every key before lengths[b] (int32, at
least 1); att (B, NH, T, T) gets the probabilities, 0 at padded keys; out (B, T, C)."""

import numpy as np

from gpt2kit.reference.bounds import attention_bounds
from gpt2kit.reference.spec import Arguments, Spec, normal

CASES = (
    dict(B=1, T=1, C=64, NH=1),
    dict(B=3, T=7, C=96, NH=2),          # head size 48; an utterance of one frame
    dict(B=2, T=33, C=16, NH=2),         # head size 8
    dict(B=3, T=130, C=768, NH=12),      # Wav2Vec2's heads; a third tile of keys, partly padded
    dict(B=2, T=100, C=128, NH=2, values="extreme"),
)
WAV2VEC2 = dict(B=8, T=800, C=768, NH=12)  # 8 utterances of 16 s: 800 frames of 20 ms


def draw_lengths(rng, B: int, T: int) -> np.ndarray:
    """Each utterance's real frames: the first has all T (no padding), the second (of three or more) one, the others
    anywhere from 1 to T."""
    lengths = rng.integers(1, T + 1, size=B)
    lengths[0] = T
    if B >= 3:
        lengths[1] = 1
    return lengths.astype(np.int32)


def real_keys(lengths, T: int) -> np.ndarray:
    """(B, 1, T, T): query t of utterance b sees key s when s < lengths[b]."""
    lengths = np.asarray(lengths).astype(np.int64).reshape(-1, 1, 1, 1)
    return np.broadcast_to(np.arange(T) < lengths, (lengths.shape[0], 1, T, T))


def build(case, rng):
    B, T, C, NH = (case.size[k] for k in ("B", "T", "C", "NH"))
    scale = 100.0 if case.values == "extreme" else 1.0  # extreme: scores of order 1e4
    return Arguments(dict(out=(B, T, C), att=(B, NH, T, T), inp=normal(rng, B, T, 3 * C, scale=scale),
                          lengths=draw_lengths(rng, B, T), B=B, T=T, C=C, NH=NH))


def error_bound(x, e):
    # As causal attention's (reference.bounds), with the keys each utterance's length leaves visible.
    B, T, C3 = x["inp"].shape
    NH = e["att"].shape[1]
    HS = C3 // 3 // NH
    q, k, v = np.abs(x["inp"]).reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    att, out = attention_bounds(q, k, v, e["att"], real_keys(x["lengths"], T))
    return {"att": att, "out": out.transpose(0, 2, 1, 3).reshape(B, T, C3 // 3)}


def traffic(s):
    N = s["B"] * s["T"] * s["C"]
    return 4 * (3 * N + s["B"] * s["NH"] * s["T"] ** 2 + N)  # q, k, v read; att and out written


def flops(s):  # q k^T and p v over every pair (no padding counted)
    return 2 * 2 * s["B"] * s["NH"] * s["T"] ** 2 * (s["C"] // s["NH"])


SPEC = Spec(
    function="bidirectional_attention_forward", module="bidirectional_attention", outputs=("out", "att"),
    build=build, error_bound=error_bound, cases=CASES,
    quick=dict(B=2, T=200, C=768, NH=12),
    benchmark=(WAV2VEC2,),
    traffic=traffic, flops=flops,
    graded=False, provided=True, handed_out=False,
)
