"""GPT-J's entry in the kit's family registry (model_runtime.families)."""

from gpt2kit.gptj import checkpoint
from gpt2kit.gptj.config import PRESETS
from gpt2kit.gptj.model import GPTJ
from gpt2kit.model_runtime.families import GENERATES_TEXT, Family

FAMILY = Family(key="gptj", name="GPT-J", does=GENERATES_TEXT, model=GPTJ, load=checkpoint.load, sizes=PRESETS,
                model_type="gptj", names=lambda source: checkpoint.hub_repo_id(source) is not None,
                transformers_model=checkpoint.transformers_model)
