"""What the comparison with Hugging Face transformers needs installed. The model itself is each family's:
its registry entry's transformers_model (model_runtime.families) puts the kit's weights into transformers'
GPT2LMHeadModel, GPTJForCausalLM or Wav2Vec2ForCTC."""

import warnings

# what the comparison imports, for kernel_runtime.commands.check_installed
TRANSFORMERS = {"torch": "the comparison with transformers needs PyTorch: the README's Setup says how to add it",
                "transformers": "the comparison with transformers needs it: pip install -e '.[hf]'"}


def silence_tf32_advice() -> None:
    """Leave out torch.compile's advice to turn on TF32 (two warnings at each compilation): the comparisons
    are float32's, as the kit's numerics are."""
    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores", category=UserWarning)
