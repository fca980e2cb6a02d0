"""Wav2Vec2's entry in the kit's family registry (model_runtime.families)."""

from gpt2kit.model_runtime.families import TRAINS_ON_SPEECH, Family
from gpt2kit.wav2vec2 import checkpoint
from gpt2kit.wav2vec2.config import PRESETS
from gpt2kit.wav2vec2.model import Wav2Vec2ForCTC

FAMILY = Family(key="wav2vec2", name="Wav2Vec2", does=TRAINS_ON_SPEECH, model=Wav2Vec2ForCTC, load=checkpoint.load,
                sizes=PRESETS, model_type="wav2vec2",
                names=lambda source: source == "wav2vec2" or checkpoint.hub_repo_id(source) is not None,
                transformers_model=checkpoint.transformers_model)
