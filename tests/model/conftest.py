"""Fixtures the model tests share."""

import pytest

from gpt2kit.gpt2.checkpoint import perturbed_parameters, write_llmc
from tests.model.helpers import TINY


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.bin"
    write_llmc(path, TINY, perturbed_parameters(TINY, seed=4))
    return path
