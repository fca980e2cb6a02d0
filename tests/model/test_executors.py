"""The executors without a GPU: choosing one, the baseline on the reference backend, the
stages a beam search marks, rebuilding hypotheses from the device's back-pointers, and
the device-side selection kernels compiling for the course's GPUs."""

import numpy as np
import pytest

from gpt2kit.generation.beam_search import BeamSearch, beam_search
from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.generation.executors import make_executor
from gpt2kit.generation.grape import rebuild_finished
from gpt2kit.generation.generate import GREEDY, Sampling, generate_batch
from gpt2kit.gpt2.model import GPT2
from gpt2kit.model_runtime.causal_lm import TokenError
from gpt2kit.model_runtime.executors import EXECUTORS, ExecutorError
from tests.model.helpers import TINY


@pytest.fixture(scope="module")
def model():
    return GPT2(TINY, perturbed_parameters(TINY, seed=4), backend="reference")


def test_executors_are_chosen_by_name(model):
    assert EXECUTORS == ("baseline", "ptgraph", "grape")
    with pytest.raises(ExecutorError, match="no executor 'eager'; the executors are baseline, ptgraph, grape"):
        make_executor(model, "eager")
    for name in ("ptgraph", "grape"):
        with pytest.raises(ExecutorError, match=f"{name} runs CUDA graphs .* needs the kernels backend, not 'reference'"):
            make_executor(model, name)


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_baseline_is_the_host_loop_on_a_kept_decoder(model, seed):
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(0, 50257, n)) for n in (3, 7)]
    baseline = make_executor(model, "baseline")
    sampling = Sampling(temperature=0.8, top_k=20, seed=seed)
    for _ in range(2):  # the second call reuses the first call's decoder, emptied
        assert baseline.generate(prompts, 6, sampling) == generate_batch(model, prompts, 6, sampling)
        assert baseline.generate(prompts, 6, GREEDY) == generate_batch(model, prompts, 6, GREEDY)
    equal_prompts = [list(rng.integers(0, 50257, 4)) for _ in range(2)]
    ours = baseline.beam_search(equal_prompts, 5, BeamSearch(3))
    host = beam_search(model, equal_prompts, 5, BeamSearch(3))
    assert ours.sequences == host.sequences and np.array_equal(ours.scores, host.scores)


def test_a_beam_search_marks_its_stages_in_order(model):
    class Marks:
        def __init__(self):
            self.stages = []

        def mark(self, stage):
            self.stages.append(stage)

    marks = Marks()
    beam_search(model, [[5, 6, 7]], 3, BeamSearch(2), clock=marks)
    step = ["InputPrep", "Model", "BeamSearch"]
    assert marks.stages == ["Model", "BeamSearch"] + step + step + ["end"]


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_hypotheses_are_rebuilt_from_back_pointers(seed):
    """Back-pointers walked backwards give what carrying whole sequences forwards gives."""
    rng = np.random.default_rng(seed)
    P, K, prompt_length, steps, eot = 2, 3, 4, 7, 99
    prompts = rng.integers(0, 50, (P, prompt_length))
    parents = rng.integers(0, K, (steps, P * K))
    chosen = rng.integers(0, 50, (steps, P * K))
    beams = [[list(prompts[p]) for _ in range(K)] for p in range(P)]  # forwards: every beam's whole sequence
    history = [beams]
    for s in range(steps):
        beams = [[beams[p][parents[s, p * K + i]] + [int(chosen[s, p * K + i])] for i in range(K)] for p in range(P)]
        history.append(beams)
    finished_step = rng.integers(-1, steps, P * K)
    finished_beam = rng.integers(0, K, P * K)
    finished_token = rng.integers(0, 50, P * K)
    max_length = prompt_length + steps + 1
    rebuilt = rebuild_finished(prompts, parents, chosen, finished_step, finished_beam, finished_token, K, max_length,
                               eot)
    for p in range(P):
        for i in range(K):
            step = finished_step[p * K + i]
            expected = ([] if step < 0 else history[step][p][finished_beam[p * K + i]] + [finished_token[p * K + i]])
            expected = expected + [eot] * (max_length - len(expected))
            assert rebuilt[p, i].tolist() == expected


def test_beam_prompts_of_different_lengths_are_one_line(model):
    with pytest.raises(TokenError, match="beam search takes prompts of one length, not of 2 and 3 tokens"):
        make_executor(model, "baseline").beam_search([[1, 2], [3, 4, 5]], 4, BeamSearch(2))


def test_a_grape_run_lists_the_stages_it_has_made():
    """The study counts a run's graphs through stages(): a run that has only generated has no reordering stage,
    and one that has run a beam search lists it too."""
    from gpt2kit.generation.grape import GrapeRun, Stage

    run = GrapeRun.__new__(GrapeRun)  # its buffers need a GPU; its stages do not
    run.model_stage, run.reorder_stage, run.choose_stages = Stage(lambda: None), None, {"sample": Stage(lambda: None)}
    assert run.stages() == [run.model_stage, run.choose_stages["sample"]]
    run.reorder_stage = Stage(lambda: None, key=5)
    assert run.stages() == [run.model_stage, run.reorder_stage, run.choose_stages["sample"]]
