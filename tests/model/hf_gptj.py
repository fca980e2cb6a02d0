"""Small GPT-J models from transformers for the GPT-J tests: random weights with every parameter non-trivial,
GPT-J's head size of 256, a context past 1,024 positions. Needs torch and transformers (the caller skips
without them)."""

import torch
import transformers

from gpt2kit.gptj.checkpoint import read_hf
from gpt2kit.gptj.model import GPTJ
from gpt2kit.reference.numerics import rotary_sin_cos

VOCAB, EOS, CONTEXT = 1000, 7, 1100  # a small vocabulary keeps the LM head cheap; end-of-text inside it


def hf_gptj(seed: int, eos_lean: float = 0.0, n_layer=2, n_head=2, n_embd=512, rotary_dim=64, vocab_size=VOCAB,
            eos=EOS):
    """A randomly initialised GPTJForCausalLM (float32, as a checkpoint holds it), noisy biases and layernorm
    weights; end-of-text's LM-head bias raised by eos_lean (hypotheses then end at different steps)."""
    torch.manual_seed(seed)
    config = transformers.GPTJConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, rotary_dim=rotary_dim,
                                     vocab_size=vocab_size, n_positions=CONTEXT, bos_token_id=eos, eos_token_id=eos)
    model = transformers.GPTJForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
        model.lm_head.bias[eos] += eos_lean
    return model


def ours_and_theirs(tmp_path, seed: int, eos_lean: float = 0.0, **sizes):
    """The kit's reference GPT-J read from transformers' save, and transformers' in float64 with the exact
    rotary table."""
    theirs = hf_gptj(seed, eos_lean, **sizes)
    theirs.save_pretrained(tmp_path)
    return GPTJ(*read_hf(tmp_path), backend="reference"), exact(theirs)


def exact(model):
    """transformers' model in float64, with the float64 rotary table."""
    model.double()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("embed_positions"):
                buffer.copy_(torch.from_numpy(rotary_sin_cos(*buffer.shape)))
    return model
