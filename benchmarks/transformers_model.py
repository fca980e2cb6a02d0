"""What the comparison with Hugging Face transformers needs installed. The model itself is each family's:
its registry entry's transformers_model (model_runtime.families) puts the kit's weights into transformers'
GPT2LMHeadModel, GPTJForCausalLM or Wav2Vec2ForCTC."""

import warnings

from gpt2kit.kernel_runtime.errors import KitError

# what the comparison imports, for kernel_runtime.commands.check_installed
TRANSFORMERS = {"torch": "the comparison with transformers needs PyTorch: the README's Setup says how to add it",
                "transformers": "the comparison with transformers needs it: pip install -e '.[hf]'"}


def silence_tf32_advice() -> None:
    """Leave out torch.compile's advice to turn on TF32 (two warnings at each compilation): the comparisons
    are float32's, as the kit's numerics are."""
    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores", category=UserWarning)


def check_room_for_transformers(config, leave_out: str, device_bytes: int | None = None) -> None:
    """KitError, before the long work, where transformers' copy of the model's float32 weights cannot fit in the
    GPU's memory (device_bytes; None: this GPU's) beside the kit's, which stays loaded: the two copies and a tenth
    more of each (transformers' cache and activations, the two libraries' contexts). GPT-J 6B's 24.2 GB need
    53 GB: an 80 GB card, not a 48 GB A40."""
    if device_bytes is None:
        import cupy

        device_bytes = cupy.cuda.runtime.memGetInfo()[1]
    weight_bytes = 4 * config.num_parameters()
    needed = 2.2 * weight_bytes
    if needed > device_bytes:
        raise KitError(f"transformers' rows need its copy of the model's {weight_bytes / 1e9:.1f} GB of weights "
                       f"beside the kit's, about {needed / 1e9:.0f} GB in all, more than this GPU's "
                       f"{device_bytes / 1e9:.0f} GB: {leave_out} leaves them out")
