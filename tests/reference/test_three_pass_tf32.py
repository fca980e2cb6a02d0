"""Tensor cores at float32 accuracy ("3xTF32"), shown on the CPU by emulation before any kernel exists: each operand
of a product is split into a TF32 high part and a TF32 low part (reference.precision.split_tf32), and three
tensor-core products, low x high, high x low and high x high, are added into float32 accumulators one m16n8k8 mma
at a time. So emulated, the matmul, flash attention's two products and Wav2Vec2's attention's six (forward and
backward) pass every case of their specs under the strict fp32 profile, the extreme ones included; leave out either
cross product, or split nothing (one TF32 pass), and they fail it. An mma rounds the sum it adds into its
accumulators toward zero, and so does the emulation. So does matmul's backward pass, with two rules: a product of
fewer than 16 terms stays in float32 on the CUDA cores (kernels/matmul_backward.py's MIN_TENSOR_CORE_K), since one
row's weight gradient, an outer product, fails fp32 on the tensor cores; and a long sum is taken in chunks whose
sums are added in float32 (matmul_tf32.py's FLUSH), since rows of the softmax's gradient summed by mmas alone fail
it too. The GPU kernels that compute this are judged by the same cases."""

import math

import numpy as np
import pytest

from gpt2kit.reference.judging import run_case
from gpt2kit.reference.numerics import window_mask
from gpt2kit.reference.precision import split_tf32
from gpt2kit.reference.registry import SPECS, cases

THREE_PASSES = ("low_high", "high_low", "high_high")  # the small products first, as a 3xTF32 kernel adds them
MMA_K = 8  # products an m16n8k8 mma adds into an accumulator at once
FLASH_CASES = cases("flash_attention_forward") if "flash_attention_forward" in SPECS else []
needs_flash = pytest.mark.skipif(not FLASH_CASES, reason="milestone 3's flash attention spec is not in this kit")
BACKWARD_CASES = cases("matmul_backward") if "matmul_backward" in SPECS else []
SPEECH_FORWARD_CASES = cases("bidirectional_attention_forward") if "bidirectional_attention_forward" in SPECS else []
SPEECH_BACKWARD_CASES = (cases("bidirectional_attention_backward") if "bidirectional_attention_backward" in SPECS
                         else [])
needs_speech = pytest.mark.skipif(not SPEECH_FORWARD_CASES, reason="Wav2Vec2's attention spec is not in this kit")
needs_backward = pytest.mark.skipif(not BACKWARD_CASES, reason="milestone 4's matmul backward spec is not in this kit")
SHORTEST_ON_TENSOR_CORES = 16  # terms a backward product sums at least to go to the tensor cores
BACKWARD_FLUSH = 4 * 16  # terms per chunk of a backward product's sums: FLUSH_SLICES slices of 16


BELOW_FLOAT32 = np.uint64((1 << 29) - 1)  # the bits of a float64's significand that a float32's has not


def truncate_into(acc: np.ndarray, sums: np.ndarray) -> None:
    """acc = sums (float64, overwritten) rounded to float32 toward zero, as an mma rounds the sum it adds into its
    accumulators: the bits past float32's significand cleared, then an exact conversion."""
    sums.view(np.uint64)[...] &= ~BELOW_FLOAT32
    acc[...] = sums


def tensor_core_product(a: np.ndarray, b: np.ndarray, passes=THREE_PASSES, flush: int = 0) -> np.ndarray:
    """a @ b^T over the last axis (a (..., M, K), b (..., N, K)) as tensor cores form it from split operands:
    for every 8 of K, each pass's mma adds its 8 products (exact: TF32 x TF32 fits float64) to the float32
    accumulator, rounding toward zero once. passes: which of the split operands' products ("high_high" alone is
    one TF32 pass). flush: every `flush` terms, the accumulator is added into a float32 total (rounding to
    nearest) and starts again from zero (matmul_tf32.py's FLUSH)."""
    a_parts = dict(zip(("high", "low"), split_tf32(a)))
    b_parts = dict(zip(("high", "low"), split_tf32(b)))
    K = a.shape[-1]
    acc = np.zeros(a.shape[:-1] + b.shape[-2:-1], np.float32)
    total = np.zeros_like(acc)
    sums = np.empty(acc.shape)  # one mma's, in float64: one array for them all (attention's scores are large)
    for k0 in range(0, K, MMA_K):
        for name in passes:
            a_part, b_part = (parts[which][..., k0:k0 + MMA_K].astype(np.float64)
                              for parts, which in zip((a_parts, b_parts), name.split("_")))
            np.matmul(a_part, np.swapaxes(b_part, -1, -2), out=sums)
            sums += acc
            truncate_into(acc, sums)
        if flush and ((k0 + MMA_K) % flush == 0 or k0 + MMA_K >= K):
            total += acc
            acc[...] = 0
    return total if flush else acc


def matmul_on_tensor_cores(passes):
    def matmul_forward(out, inp, weight, bias, B, T, C, OC):
        result = tensor_core_product(inp.reshape(-1, C), weight, passes)
        if bias is not None:
            result += bias
        out[...] = result.reshape(out.shape)
    return matmul_forward


def matmul_backward_on_tensor_cores(shortest: int, flush: int = BACKWARD_FLUSH):
    """Both products of matmul's backward pass on the tensor cores in three passes, their sums taken in chunks of
    `flush` terms, when each sums at least `shortest` terms, else both in float32; dweight's product added to the
    gradient it holds, rounding once."""
    def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
        def product(a, b):  # a (R, K) @ b (K, N)
            if min(B * T, OC) < shortest:
                return np.matmul(a, b, dtype=np.float32)
            return tensor_core_product(a, np.ascontiguousarray(b.T), flush=flush)
        rows, x = dout.reshape(-1, OC), inp.reshape(-1, C)
        dinp[...] = product(rows, weight).reshape(dinp.shape)
        dweight[...] += product(np.ascontiguousarray(rows.T), x)
        if dbias is not None:
            dbias[...] += rows.sum(axis=0, dtype=np.float32)
    return matmul_backward


def flash_attention_on_tensor_cores(passes):
    """Both of attention's products on the tensor cores (scores = q k^T, out = p v); the scale, the softmax's
    exponentials and sums and the division by the sum in float32, as a flash kernel computes them."""
    def flash_attention_forward(out, lse, inp, B, T, C, NH):
        HS = C // NH
        q, k, v = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)  # each (B, NH, T, HS)
        scores = tensor_core_product(q, k, passes) * np.float32(1 / math.sqrt(HS))
        scores = np.where(window_mask(T, T), scores, np.float32(-np.inf))
        top = scores.max(axis=-1, keepdims=True)
        p = np.exp(scores - top)
        total = p.sum(axis=-1, keepdims=True, dtype=np.float32)
        o = tensor_core_product(p, np.swapaxes(v, -1, -2), passes) / total
        out[...] = o.transpose(0, 2, 1, 3).reshape(out.shape)
        lse[...] = (top + np.log(total))[..., 0]
    return flash_attention_forward


def bidirectional_attention_on_tensor_cores(passes=THREE_PASSES):
    """Wav2Vec2's attention (kernels/bidirectional_attention.py) with both products on the tensor cores: the scores
    q k^T, scaled after; the softmax over the real keys in float32; out = p v. Its sums over up to a few hundred keys
    need no chunks (matmul's backward sums thousands)."""
    from gpt2kit.reference.specs.bidirectional_attention import real_keys

    def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
        HS = C // NH
        q, k, v = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)  # each (B, NH, T, HS)
        scores = tensor_core_product(q, k, passes) * np.float32(1 / math.sqrt(HS))
        real = real_keys(lengths, T)
        scores = np.where(real, scores, np.float32(-np.inf))
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True, dtype=np.float32)
        att[...] = p
        o = tensor_core_product(p, np.swapaxes(v, -1, -2), passes)
        out[...] = o.transpose(0, 2, 1, 3).reshape(out.shape)
    return bidirectional_attention_forward


def bidirectional_attention_backward_on_tensor_cores(passes=THREE_PASSES):
    """Its backward pass's four products on the tensor cores (dp = dy v^T; dq = ds k over the keys; dk = ds^T q and
    dv = p^T dy over the queries), ds in float32."""
    from gpt2kit.reference.specs.bidirectional_attention import real_keys

    def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
        HS = C // NH
        q, k, v = inp.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
        dy = dout.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        dp = tensor_core_product(dy, v, passes)
        weighted = (att * dp).sum(axis=-1, keepdims=True, dtype=np.float32)
        ds = np.where(real_keys(lengths, T), np.float32(1 / math.sqrt(HS)) * att * (dp - weighted), np.float32(0))
        transposed = np.swapaxes
        dq = tensor_core_product(ds, transposed(k, -1, -2), passes)
        dk = tensor_core_product(transposed(ds, -1, -2), transposed(q, -1, -2), passes)
        dv = tensor_core_product(transposed(att, -1, -2), transposed(dy, -1, -2), passes)
        dinp[...] = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(dinp.shape)
    return bidirectional_attention_backward


@pytest.mark.parametrize("case", cases("matmul_forward"), ids=lambda c: c.id)
def test_a_3xtf32_matmul_passes_fp32(case):
    result = run_case(matmul_on_tensor_cores(THREE_PASSES), case, device="cpu")
    assert result.passed, result.message


@needs_backward
@pytest.mark.parametrize("case", BACKWARD_CASES, ids=lambda c: c.id)
def test_a_3xtf32_matmul_backward_passes_fp32(case):
    result = run_case(matmul_backward_on_tensor_cores(SHORTEST_ON_TENSOR_CORES), case, device="cpu")
    assert result.passed, result.message


@needs_backward
def test_a_3xtf32_matmul_backward_summing_without_chunks_fails_fp32():
    """Rows of the softmax's gradient (one large term, thousands of small ones of the other sign) summed by mmas
    alone: the truncation of every addition into the large sum keeps one sign."""
    case = next(c for c in BACKWARD_CASES if c.variant == "softmax")
    assert not run_case(matmul_backward_on_tensor_cores(SHORTEST_ON_TENSOR_CORES, flush=0), case, device="cpu").passed


@needs_backward
def test_a_3xtf32_matmul_backward_of_one_row_fails_fp32():
    case = next(c for c in BACKWARD_CASES if c.size["B"] * c.size["T"] == 1 and c.size["C"] >= 64)
    assert not run_case(matmul_backward_on_tensor_cores(1), case, device="cpu").passed


@needs_flash
@pytest.mark.parametrize("case", FLASH_CASES, ids=lambda c: c.id)
def test_a_3xtf32_flash_attention_passes_fp32(case):
    result = run_case(flash_attention_on_tensor_cores(THREE_PASSES), case, device="cpu")
    assert result.passed, result.message


@needs_speech
@pytest.mark.parametrize("case", SPEECH_FORWARD_CASES, ids=lambda c: c.id)
def test_a_3xtf32_bidirectional_attention_passes_fp32(case):
    result = run_case(bidirectional_attention_on_tensor_cores(), case, device="cpu")
    assert result.passed, result.message


@needs_speech
@pytest.mark.parametrize("case", SPEECH_BACKWARD_CASES, ids=lambda c: c.id)
def test_a_3xtf32_bidirectional_attention_backward_passes_fp32(case):
    result = run_case(bidirectional_attention_backward_on_tensor_cores(), case, device="cpu")
    assert result.passed, result.message


FEWER_PASSES = pytest.mark.parametrize("passes", [("high_low", "high_high"), ("low_high", "high_high"), ("high_high",)],
                                       ids=["without_low_high", "without_high_low", "one_tf32_pass"])


@FEWER_PASSES
@pytest.mark.parametrize("case", [c for c in cases("matmul_forward") if c.size["C"] >= 64][:3], ids=lambda c: c.id)
def test_a_matmul_with_fewer_passes_fails_fp32(case, passes):
    assert not run_case(matmul_on_tensor_cores(passes), case, device="cpu").passed


@needs_flash
@FEWER_PASSES
def test_flash_attention_with_fewer_passes_fails_fp32(passes):
    case = next(c for c in FLASH_CASES if c.values == "extreme")
    assert not run_case(flash_attention_on_tensor_cores(passes), case, device="cpu").passed


@needs_speech
@FEWER_PASSES
def test_bidirectional_attention_with_fewer_passes_fails_fp32(passes):
    forward = next(c for c in SPEECH_FORWARD_CASES if c.size["C"] == 768)
    backward = next(c for c in SPEECH_BACKWARD_CASES if c.size["C"] == 768)
    assert not run_case(bidirectional_attention_on_tensor_cores(passes), forward, device="cpu").passed
    assert not run_case(bidirectional_attention_backward_on_tensor_cores(passes), backward, device="cpu").passed
