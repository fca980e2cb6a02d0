"""The family registry (model_runtime.families): which family each source names, and that a family is its package
plus one line of FAMILY_PACKAGES."""

import json
import sys
import types

import pytest

from gpt2kit.model_runtime import families
from gpt2kit.model_runtime.backends import make_backend
from gpt2kit.model_runtime.checkpoint_files import CheckpointError
from gpt2kit.model_runtime.families import (FAMILY_PACKAGES, GENERATES_TEXT, Family, check_sources, family_of,
                                            load_model, longest_context)

HUB_AND_RANDOM = [("random", "gpt2"), ("random:124M", "gpt2"), ("random:gpt2-mini", "gpt2"), ("gpt2-medium", "gpt2"),
                  ("openai-community/gpt2-xl", "gpt2"), ("random:gpt-j-6b", "gptj"), ("gpt-j-6b", "gptj"),
                  ("EleutherAI/gpt-j-6b", "gptj"), ("random:tiny", "wav2vec2"), ("wav2vec2", "wav2vec2"),
                  ("wav2vec2-base-960h", "wav2vec2"), ("facebook/wav2vec2-base-960h", "wav2vec2")]


def transformers_directory(path, **config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("source, family", HUB_AND_RANDOM)
def test_each_hub_name_and_random_size_is_claimed_by_its_family_alone(source, family):
    assert [entry.key for entry in families.families() if entry.claims(source)] == [family]
    assert family_of(source).key == family


@pytest.mark.parametrize("model_type", ["gpt2", "gptj", "wav2vec2"])
def test_a_transformers_directory_is_its_model_types_family(tmp_path, model_type):
    assert family_of(transformers_directory(tmp_path / "model", model_type=model_type)).key == model_type


def test_a_local_directory_comes_before_a_hub_name_of_another_family(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    transformers_directory(tmp_path / "gpt-j-6b", model_type="gpt2")
    assert family_of("gpt-j-6b").key == "gpt2"


def test_an_llmc_file_is_gpt2s(tiny_model):
    assert family_of(str(tiny_model)).key == "gpt2"


def test_what_no_family_claims_is_gpt2s_whose_loader_says_what_is_wrong(tmp_path):
    unknown = transformers_directory(tmp_path / "llama", model_type="llama")
    assert not any(entry.claims(unknown) for entry in families.families())
    assert family_of(unknown).key == "gpt2"
    with pytest.raises(CheckpointError, match=r"config.json: model_type is 'llama', not 'gpt2'$"):
        family_of(unknown).load(unknown)
    with pytest.raises(CheckpointError, match=r"^/no/such: no such file or directory, and not a model name"):
        check_sources("/no/such")


def test_no_size_is_two_families():
    sizes = [size for entry in families.families() for size in entry.sizes]
    assert len(sizes) == len(set(sizes))


def test_an_unknown_size_names_every_familys():
    with pytest.raises(CheckpointError, match=r"^unknown model size 'huge' \(GPT-2's: gpt2, .*, 1558M; GPT-J's: "
                                              r"gpt-j-6b; Wav2Vec2's: base, tiny\)$"):
        family_of("random:huge")


def test_a_model_that_generates_no_text_is_refused_before_it_loads():
    with pytest.raises(CheckpointError, match=r"^random:tiny: a Wav2Vec2 model, which trains on speech: it generates "
                                              r"no text$"):
        load_model("random:tiny", make_backend("reference"))


def test_the_longest_context_is_the_text_families():
    assert longest_context() == 2048  # GPT-J's (Wav2Vec2's sizes have no context)


class ToyModel:
    def __init__(self, config, parameters, backend):
        self.config, self.parameters, self.backend = config, parameters, backend

    @classmethod
    def check_backend(cls, backend) -> None:
        pass


@pytest.fixture
def toy_family(monkeypatch):
    """A family package, gpt2kit.toy_family, with its entry in gpt2kit.toy_family.family, registered the one way
    there is: a line of FAMILY_PACKAGES."""
    config = types.SimpleNamespace(max_T=4096, num_parameters=lambda: 3)
    module = types.ModuleType("gpt2kit.toy_family.family")
    module.FAMILY = Family(key="toy_family", name="Toy", does=GENERATES_TEXT, model=ToyModel,
                           load=lambda source, progress=None: (config, {"w": [1.0, 2.0, 3.0]}),
                           sizes={"toy-1": config}, model_type="toy", names=lambda source: source == "toy/hub",
                           transformers_model=lambda config, parameters, device: None)
    monkeypatch.setitem(sys.modules, "gpt2kit.toy_family", types.ModuleType("gpt2kit.toy_family"))
    monkeypatch.setitem(sys.modules, "gpt2kit.toy_family.family", module)
    monkeypatch.setattr(families, "FAMILY_PACKAGES", (*FAMILY_PACKAGES, "toy_family"))
    return module.FAMILY


def test_a_registered_family_is_found_and_loads(toy_family, tmp_path):
    for source in ("random:toy-1", "toy/hub", transformers_directory(tmp_path / "toy", model_type="toy")):
        assert family_of(source) is toy_family
        check_sources(source)
    model = load_model("random:toy-1", make_backend("reference"))
    assert isinstance(model, ToyModel) and model.parameters == {"w": [1.0, 2.0, 3.0]}
    assert longest_context() == 4096
    with pytest.raises(CheckpointError, match=r"; Toy's: toy-1\)$"):
        family_of("random:huge")
