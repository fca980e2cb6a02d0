"""Wav2Vec2's entry in the kit's family registry (model_runtime.families)."""

from model_runtime.families import TRAINS_ON_SPEECH, Family
from wav2vec2 import checkpoint
from wav2vec2.config import PRESETS
from wav2vec2.model import Wav2Vec2ForCTC

FAMILY = Family(key="wav2vec2", name="Wav2Vec2", does=TRAINS_ON_SPEECH, model=Wav2Vec2ForCTC, load=checkpoint.load,
                sizes=PRESETS, model_type="wav2vec2",
                names=lambda source: source == "wav2vec2" or checkpoint.hub_repo_id(source) is not None,
                transformers_model=checkpoint.transformers_model)
