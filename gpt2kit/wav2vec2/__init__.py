"""Wav2Vec2ForCTC (speech to characters) on the kit's host functions, forward, CTC loss and backward.

    from gpt2kit.wav2vec2 import Wav2Vec2Config, Wav2Vec2ForCTC
    from gpt2kit.wav2vec2.checkpoint import random_parameters
    model = Wav2Vec2ForCTC(Wav2Vec2Config(), random_parameters(Wav2Vec2Config()), backend="reference")
    logits = model.forward(audio, audio_lengths)   # (B, S) samples -> (B, T frames, 32)

It imports nothing of gpt2/ or gpt2kit/gptj/: what the families share is model_runtime's.
"""

from gpt2kit.wav2vec2.config import Wav2Vec2Config
from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

__all__ = ["Wav2Vec2Config", "Wav2Vec2ForCTC"]
