"""The model families, each a package of its own, and which one a model source names.

    family = family_of(source)              # the entry of the family that claims the source: its name, model, ...
    model = load_model(source, backend)     # a text family's model (a model_runtime.causal_lm.CausalLM)

A family package (gpt2kit.<name>) exports its entry, FAMILY (a Family), from its module
`family` (gpt2/family.py, gpt2kit/gptj/family.py, gpt2kit/wav2vec2/family.py).
FAMILY_PACKAGES lists them, a line each: adding a family is its package, a line there and
a line of pyproject.toml's packages. They are imported by name, when first asked for, so
that this module imports no family and no family imports another (tests/test_layering.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import Callable, Mapping

from gpt2kit.model_runtime.backends import Backend
from gpt2kit.model_runtime.checkpoint_files import CheckpointError, Progress, os_errors, read_json_object

FAMILY_PACKAGES = (  # gpt2kit's subpackages
    "gpt2",  # the first: a source no family claims is its, and its loader then says what is wrong
    "gptj",
    "wav2vec2",
)
GENERATES_TEXT = "generates text"  # a causal LM (model_runtime.causal_lm.CausalLM): python -m gpt2kit runs it
TRAINS_ON_SPEECH = "trains on speech"  # audio in, characters out, a CTC loss (gpt2kit/wav2vec2/)


@dataclasses.dataclass(frozen=True)
class Family:
    key: str                      # its package: the name of its files (gpt2_generate_profile.csv)
    name: str                     # as tables and figures show it
    does: str                     # GENERATES_TEXT or TRAINS_ON_SPEECH
    model: type                   # (config, parameters, backend=...) -> the model
    load: Callable                # (source, progress=None) -> (config, parameters); progress(line) told each tenth
    sizes: Mapping[str, object]   # random:<size> -> its config
    model_type: str               # config.json's model_type in a transformers directory of this family
    names: Callable[[str], bool]  # whether any other source is this family's: a hub name, GPT-2's llm.c files
    transformers_model: Callable  # (config, parameters, device) -> transformers' model holding the parameters

    def claims(self, source: str) -> bool:
        """Whether `source` names a model of this family: random:<one of its sizes>, a transformers directory of
        its model_type, or a source its `names` knows."""
        if source.startswith("random:"):
            return source.split(":", 1)[1] in self.sizes
        model_type = transformers_model_type(source)
        return model_type == self.model_type if model_type is not None else self.names(source)


def families() -> list[Family]:
    """Every family's entry, in FAMILY_PACKAGES' order."""
    return [importlib.import_module(f"gpt2kit.{package}.family").FAMILY for package in FAMILY_PACKAGES]


def transformers_model_type(source: str) -> str | None:
    """The model_type of the transformers directory `source` names ("" where its config.json gives none), or None
    where it names no directory holding a config.json."""
    config = Path(source).expanduser() / "config.json"
    with os_errors(config.parent, "read"):  # a name too long for a path, say
        if not config.exists():
            return None
    return str(read_json_object(config).get("model_type", ""))


def family_of(source: str) -> Family:
    """The family that claims `source`; where none does, the first (GPT-2), whose loader then judges the source
    with its own errors. CheckpointError for random:<size> of a size no family has."""
    source, entries = str(source), families()
    for family in entries:
        if family.claims(source):
            return family
    if source.startswith("random:"):
        known = "; ".join(f"{family.name}'s: {', '.join(family.sizes)}" for family in entries)
        raise CheckpointError(f"unknown model size {source.split(':', 1)[1]!r} ({known})")
    return entries[0]


def text_family_of(source: str) -> Family:
    """family_of(source), refused in one line where that family's models generate no text."""
    family = family_of(source)
    if family.does != GENERATES_TEXT:
        raise CheckpointError(f"{source}: a {family.name} model, which {family.does}: it generates no text")
    return family


def longest_context() -> int:
    """What a command line is checked against: the longest context of any text model random:<size> makes."""
    return max(config.max_T for family in families() if family.does == GENERATES_TEXT
               for config in family.sizes.values())


def load_model(source: str, backend: Backend, progress: Progress | None = None):
    """The text model `source` names, on `backend`: a model_runtime.causal_lm.CausalLM. Refused in one line,
    before anything loads, where its family generates no text, where the backend lacks a host function of the
    family's, or where the reference backend's float64 weights would not fit in this machine's memory."""
    family = text_family_of(source)
    family.model.check_backend(backend)
    if backend.name == "reference":
        check_fits_in_memory(source, family)
    return family.model(*family.load(source, progress), backend=backend)


def check_fits_in_memory(source: str, family: Family) -> None:
    """CheckpointError when a random model of a known size would take more than this machine's memory on the
    reference backend: its weights in float64, and in float32 while they load (12 bytes a parameter)."""
    size = source.split(":", 1)[1] if source.startswith("random:") else None
    if size not in family.sizes:
        return
    parameters = family.sizes[size].num_parameters()
    needed, memory = 12 * parameters, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise CheckpointError(f"{source}: {family.name}'s {parameters / 1e9:.1f}B parameters "
                              f"take {needed / 2**30:.0f} GiB on the reference backend (float64, and float32 while "
                              f"they load), more than this machine's {memory / 2**30:.0f} GiB: run it on a GPU")


def check_sources(model: str, kernels: str | None = None) -> None:
    """Raise the one-line error of a --model or --kernels that names nothing there, reading nothing, so
    that a command names a wrong path before a missing GPU. A model source that names something (a file,
    a directory, a hub name, random) is judged when it loads."""
    from gpt2kit.kernel_runtime.loader import kernels_directory

    if kernels is not None:
        kernels_directory(kernels)
    family = family_of(model)  # a random model of an unknown size raises
    if not family.claims(model) and not os.path.exists(os.path.expanduser(model)):
        family.load(model)  # nothing to read there: raises its loader's own error
