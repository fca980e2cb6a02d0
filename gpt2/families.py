"""The model families the kit's command runs, and which one a model source names.

    family = FAMILIES[family_of(source)]    # GPT-2's or GPT-J's: its name and model class
    model = load_model(source, backend)     # a model_runtime.causal_lm.CausalLM of that family

GPT-2: an llm.c .bin file, a transformers directory of model_type gpt2, a hub name
(gpt2, gpt2-medium, ...), random or random:<size> (gpt2/checkpoint.py). GPT-J: a
transformers directory of model_type gptj, gpt-j-6b or EleutherAI/gpt-j-6b, or
random:gpt-j-6b (gptj/checkpoint.py). Both read GPT-2's BPE (gpt2/tokenizer.py).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gpt2 import checkpoint as gpt2_checkpoint
from gpt2.config import PRESET_ALIASES, SMALL_PRESETS
from gpt2.config import PRESETS as GPT2_PRESETS
from gpt2.model import GPT2
from gptj import checkpoint as gptj_checkpoint
from gptj.config import PRESETS as GPTJ_PRESETS
from gptj.model import GPTJ
from model_runtime.backends import Backend
from model_runtime.causal_lm import CausalLM
from model_runtime.checkpoint_files import CheckpointError, Progress, os_errors


@dataclasses.dataclass(frozen=True)
class Family:
    name: str                   # as tables and figures show it
    model: type                 # a CausalLM: (config, parameters, backend) -> the model; its load_checkpoint

    def load(self, source: str, progress: Progress | None = None) -> tuple:
        return self.model.load_checkpoint(source, progress)


FAMILIES = {"gpt2": Family("GPT-2", GPT2), "gptj": Family("GPT-J", GPTJ)}

# random:<size>'s sizes, every family's (GPT-2's aliases such as 124M included)
RANDOM_SIZES = {**GPT2_PRESETS, **SMALL_PRESETS, **GPTJ_PRESETS,
                **{alias: GPT2_PRESETS[name] for alias, name in PRESET_ALIASES.items()}}
# what a command line is checked against: the longest context of any model it may load
LONGEST_CONTEXT = max(config.max_T for config in RANDOM_SIZES.values())


def family_of(source: str) -> str:
    """"gptj" for a GPT-J source, else "gpt2" (whose loader then judges it, with its own errors)."""
    text = str(source)
    if text.startswith("random:"):
        size = text.split(":", 1)[1]
        if size not in RANDOM_SIZES:
            raise CheckpointError(f"unknown model size {size!r} (known: {', '.join(RANDOM_SIZES)})")
        return "gptj" if size in GPTJ_PRESETS else "gpt2"
    path = Path(text).expanduser()
    with os_errors(path, "read"):
        is_directory = (path / "config.json").exists()
    if is_directory:
        return "gptj" if gptj_checkpoint.is_gptj_directory(path) else "gpt2"
    return "gptj" if gptj_checkpoint.hub_repo_id(text) is not None else "gpt2"


def load_model(source: str, backend: Backend, progress: Progress | None = None) -> CausalLM:
    """The model `source` names, on `backend`; refused in one line, before anything loads, where the backend
    lacks a host function of the family's, or where the reference backend's float64 weights would not fit in
    this machine's memory."""
    family = FAMILIES[family_of(source)]
    family.model.check_backend(backend)
    if backend.name == "reference":
        check_fits_in_memory(source, family)
    return family.model(*family.load(source, progress), backend=backend)


def check_fits_in_memory(source: str, family: Family) -> None:
    """CheckpointError when a random model of a known size would take more than this machine's memory on the
    reference backend: its weights in float64, and in float32 while they load (12 bytes a parameter)."""
    size = source.split(":", 1)[1] if source.startswith("random:") else None
    if size not in RANDOM_SIZES:
        return
    parameters = RANDOM_SIZES[size].num_parameters()
    needed, memory = 12 * parameters, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise CheckpointError(f"{source}: {family.name}'s {parameters / 1e9:.1f}B parameters "
                              f"take {needed / 2**30:.0f} GiB on the reference backend (float64, and float32 while "
                              f"they load), more than this machine's {memory / 2**30:.0f} GiB: run it on a GPU")


def check_sources(model: str, kernels: str | None = None) -> None:
    """Raise the one-line error of a --model or --kernels that names nothing there, reading nothing, so
    that a command names a wrong path before a missing GPU. A model source that names something (a file,
    a directory, a hub name, random) is judged when it loads."""
    from kernel_runtime.loader import kernels_directory

    if kernels is not None:
        kernels_directory(kernels)
    family_of(model)  # a random model of an unknown size
    if (model.split(":", 1)[0] != "random" and gpt2_checkpoint.hub_repo_id(model) is None
            and gptj_checkpoint.hub_repo_id(model) is None and not os.path.exists(os.path.expanduser(model))):
        gpt2_checkpoint.load(model)  # nothing to read there: raises load's own error
