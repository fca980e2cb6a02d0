"""The same weights in Hugging Face transformers' GPT2LMHeadModel, on the GPU: the
comparison the benchmarks run beside the kit's kernels."""

import tempfile


def hf_model(config, params, device: str = "cuda"):
    """transformers.GPT2LMHeadModel holding `params`, float32, in eval mode on `device` (the GPU)."""
    import transformers

    from gpt2.checkpoint import write_hf

    with tempfile.TemporaryDirectory() as directory:
        write_hf(directory, config, params)
        return transformers.GPT2LMHeadModel.from_pretrained(directory).to(device).eval()
