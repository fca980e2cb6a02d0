"""The same weights in Hugging Face transformers, on the GPU: the comparison the benchmarks run beside the
kit's kernels (GPT2LMHeadModel for GPT-2, GPTJForCausalLM for GPT-J)."""

import tempfile

import numpy as np

# what the comparison imports, for kernel_runtime.commands.check_installed
TRANSFORMERS = {"torch": "the comparison with transformers needs PyTorch: the README's Setup says how to add it",
                "transformers": "the comparison with transformers needs it: pip install -e '.[hf]'"}


def hf_model(config, params, device: str = "cuda"):
    """transformers' model of config's family holding `params`, float32, in eval mode on `device` (the GPU)."""
    from gptj.config import GPTJConfig

    if isinstance(config, GPTJConfig):
        return _hf_gptj(config, params, device)
    import transformers

    from gpt2.checkpoint import write_hf

    with tempfile.TemporaryDirectory() as directory:
        write_hf(directory, config, params)
        return transformers.GPT2LMHeadModel.from_pretrained(directory).to(device).eval()


def _hf_gptj(config, params, device: str):
    """GPTJForCausalLM made on `device` (its own init, overwritten) and filled from `params` tensor by tensor:
    6B parameters never go through a file."""
    import torch
    import transformers

    from gptj.checkpoint import hf_layout

    hf_config = transformers.GPTJConfig(n_layer=config.num_layers, n_head=config.num_heads, n_embd=config.channels,
                                        rotary_dim=config.rotary_dim, vocab_size=config.vocab_size,
                                        n_positions=config.max_T, bos_token_id=config.end_of_text,
                                        eos_token_id=config.end_of_text)
    with torch.device(device):
        model = transformers.GPTJForCausalLM(hf_config).eval()
    state = {name.removeprefix("transformer."): tensor for name, tensor in model.state_dict().items()}
    with torch.no_grad():
        for name, (_, parts) in hf_layout(config).items():
            for index, hf_name in parts:
                state[hf_name].copy_(torch.from_numpy(np.ascontiguousarray(params[name][index])))
    return model
