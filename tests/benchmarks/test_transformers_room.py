"""The benchmarks' transformers rows load a second copy of the weights beside the kit's: a GPU without room for
both is told in one line, before the long work, rather than with PyTorch's out-of-memory trace minutes later."""

import pytest

from gpt2kit.benchmarks.transformers_model import check_room_for_transformers
from gpt2kit.gpt2.config import preset
from gpt2kit.gptj.config import PRESETS as GPTJ_PRESETS
from gpt2kit.kernel_runtime.errors import KitError

GPTJ_6B = GPTJ_PRESETS["gpt-j-6b"]
A40, H100 = 46_068 * 2**20, 81_559 * 2**20  # their memory as cudaMemGetInfo reports it


def test_gpt_j_on_an_a40_is_refused_naming_the_sizes_and_the_way_out():
    with pytest.raises(KitError) as refused:
        check_room_for_transformers(GPTJ_6B, "--no-hf", device_bytes=A40)
    message = str(refused.value)
    assert "\n" not in message
    assert message == ("transformers' rows need its copy of the model's 24.2 GB of weights beside the kit's, "
                       "about 53 GB in all, more than this GPU's 48 GB: --no-hf leaves them out")


@pytest.mark.parametrize("config, device_bytes", [(GPTJ_6B, H100), (preset("gpt2"), A40), (preset("gpt2-xl"), A40)],
                         ids=["gpt-j-6b-on-80GB", "gpt2-on-48GB", "gpt2-xl-on-48GB"])
def test_a_model_that_fits_twice_passes(config, device_bytes):
    check_room_for_transformers(config, "--no-hf", device_bytes=device_bytes)


def test_the_line_is_drawn_at_two_copies_and_a_tenth_more_of_each():
    weight_bytes = 4 * GPTJ_6B.num_parameters()
    check_room_for_transformers(GPTJ_6B, "--no-hf", device_bytes=int(2.2 * weight_bytes) + 1)
    with pytest.raises(KitError):
        check_room_for_transformers(GPTJ_6B, "--no-hf", device_bytes=int(2.2 * weight_bytes) - 2**20)
