"""The leaderboard without a GPU: its table, configurations, the gate's judging, scoring,
reports and command-line errors; the token check on the reference backend; the keys of
taped calls; and the ranking process's protocol against fake workers and replayers
(tests/grading/leaderboard_fakes.py: the real replayer's side over a tiny model), honest
or standing for wrong tapes."""

import ast
import dataclasses
import json
import math
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from gpt2kit.gpt2.checkpoint import perturbed_parameters
from gpt2kit.gpt2.config import preset
from gpt2kit.generation.generate import GREEDY, Sampling, generate_batch
from gpt2kit.gpt2.model import GPT2
from gpt2kit.grading import leaderboard
from gpt2kit.grading.leaderboard import (Configuration, GateOutputs, LeaderboardError, Row, configurations,
                                         gate_failure, geometric_mean, load_workload, standing)
from gpt2kit.grading.ranking import Commands, Judge, Roofline, make_gate, rank_submission, run_inputs
from gpt2kit.grading.sandbox import Sandbox
from gpt2kit.grading.taped_calls import TapedCallError, TapedOps, call_key, describe, read_tapes
from gpt2kit.grading.token_check import FALSE_ALARM, check_run, freedman_margin
from gpt2kit.kernel_runtime.tape import Buffer, Tape
from gpt2kit.model_runtime.tokenizer import get_tokenizer
from gpt2kit.reference.precision import FP32
from tests.grading import leaderboard_fakes
from tests.model.helpers import TINY

ROOT = Path(__file__).parents[2]
WORKLOAD = load_workload()


def test_the_table_is_the_course_s_and_fits_the_context():
    assert (WORKLOAD.batches, WORKLOAD.new_tokens, WORKLOAD.prompt_lengths) == ((1, 4, 8, 16, 32), (50, 500),
                                                                                (7, 15, 10))
    found = configurations(WORKLOAD)
    assert len(found) == 30 and len(set(found)) == 30 and found[0] == Configuration(1, 50, 7)
    context = preset("gpt2").max_T
    assert max(WORKLOAD.prompt_lengths) + max(WORKLOAD.new_tokens) <= context
    assert len(get_tokenizer().encode(WORKLOAD.gate_prompt)) + WORKLOAD.gate_steps <= context


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("batches = [1, 4, 8, 16, 32]", "batches = []"), "batches must be a non-empty list"),
    (lambda t: t.replace("new_tokens = [50, 500]", "new_tokens = [50, 0]"), "new_tokens must be a non-empty list"),
    (lambda t: t.replace("top_k = 50", "top_k = 0"), "top_k must be an integer >= 1"),
    (lambda t: t.replace("gate_steps = 8\n", ""), "missing gate_steps"),
    (lambda t: t + "\nbatch = 3\n", "unknown key 'batch'"),
    (lambda t: t.replace("temperature = 1.0", "temperature = -1"), "temperature must be a number >= 0"),
    (lambda t: t.replace("prompt_lengths = [7, 15, 10]", "prompt_lengths = [7, 0]"), "prompt_lengths must be a"),
    (lambda t: t.replace("[1, 4", "[1, 4,,"), "cannot read the leaderboard table"),
])
def test_a_bad_table_is_one_line(tmp_path, edit, message):
    path = tmp_path / "table.toml"
    path.write_text(edit(leaderboard.TABLE_FILE.read_text()))
    with pytest.raises(LeaderboardError, match=message) as raised:
        load_workload(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_geometric_mean():
    assert geometric_mean([100, 10_000]) == pytest.approx(1000)
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])


REFERENCE = np.random.default_rng(0).normal(size=(5, 11))


def outputs(**changes):
    steps = np.random.default_rng(1).normal(size=(4, 11))
    good = GateOutputs(REFERENCE.astype(np.float32), steps, steps.copy(), np.array([3, 1, 4]), np.array([3, 1, 4]))
    return dataclasses.replace(good, **changes)


@pytest.mark.parametrize("changed, reason", [
    ({}, None),
    ({"logits": (REFERENCE + 2e-3).astype(np.float32)}, "logits on the gate prompt off by 0.002 (allowed 0.001)"),
    ({"logits": np.full_like(REFERENCE, np.nan, dtype=np.float32)}, "logits on the gate prompt off by inf"),
    ({"logits": REFERENCE[:4].astype(np.float32)}, "gate logits of shape (4, 11), expected (5, 11)"),
    ({"cached_tokens": np.array([3, 1, 5])}, "greedy tokens with the KV cache differ from recomputing at step 2"),
    ({"recomputed_logits": np.zeros((4, 11))}, "logits with the KV cache differ from recomputing by"),
], ids=["passes", "off", "nan", "shape", "tokens", "cache"])
def test_the_gate(changed, reason):
    failure = gate_failure(outputs(**changed), REFERENCE, allowed=1e-3)
    assert failure == reason if reason is None else failure.startswith(reason), failure
    assert gate_failure(None, REFERENCE, 1e-3) == "the gate's outputs are missing or unreadable"


def test_standing_scores_only_a_complete_checked_run_that_passed_the_gate():
    rows = [Row(c, 1.0, c.tokens) for c in configurations(WORKLOAD)]
    passed = standing("alice", WORKLOAD, None, rows)
    assert passed.score == pytest.approx(math.exp(np.mean([np.log(r.tokens) for r in rows])))
    assert standing("bob", WORKLOAD, "logits off", rows).reason == "failed the correctness gate: logits off"
    assert standing("bob", WORKLOAD, None, rows, crash="timed out after 900 s").score is None
    assert standing("bob", WORKLOAD, None, rows[:29]).reason == "only 29 of 30 configurations ran"
    refused = rows[:3] + [dataclasses.replace(rows[3], refused="wrong tokens: row 0")] + rows[4:]
    assert standing("bob", WORKLOAD, None, refused).reason == f"{rows[3].configuration.name}: wrong tokens: row 0"
    fields = leaderboard.gradescope_fields(passed)
    assert fields["leaderboard"] == [{"name": "tok/s (geometric mean)", "value": round(passed.score, 1),
                                      "order": "desc"}]
    assert fields["output"].splitlines()[-1].startswith("score") and len(fields["output"].splitlines()) == 33


# ---------------------------------------------------------------- the token check, on the reference backend

@pytest.fixture(scope="module")
def tiny():
    return leaderboard_fakes.tiny_model()


def tiny_prompts(seed: int, batch: int = 3, prompt_length: int = 5) -> np.ndarray:
    return run_inputs(seed, 0, Configuration(batch, 0, prompt_length), TINY.vocab_size)[0]


def sampled(seed: int, temperature: float = 1.0, top_k: int = 50) -> Sampling:
    return Sampling(temperature, top_k, None, seed)


def generated(model, prompts: np.ndarray, count: int, sampling: Sampling) -> np.ndarray:
    return np.array(generate_batch(model, prompts.tolist(), count, sampling, stop_at_end_of_text=False))


ALLOWED = 1e-4  # TINY in float64 on both sides: the model's own tokens pass any allowance


@pytest.mark.parametrize("seed", range(4), ids=lambda seed: f"seed{seed}")
def test_the_model_s_own_tokens_pass(tiny, seed):
    prompts = tiny_prompts(seed)
    for sampling in (GREEDY, sampled(seed)):
        assert check_run(tiny, prompts, generated(tiny, prompts, 40, sampling), 40, sampling, ALLOWED) is None


@pytest.mark.parametrize("seed", range(3), ids=lambda seed: f"seed{seed}")
def test_a_changed_token_is_named(tiny, seed):
    prompts, rng = tiny_prompts(seed), np.random.default_rng(seed)
    for sampling, what in ((GREEDY, "is not the trusted model's choice"),
                           (sampled(seed), "is not in the trusted model's top 50")):
        tokens = generated(tiny, prompts, 20, sampling)
        row, position = int(rng.integers(3)), int(rng.integers(20))
        context = np.concatenate([prompts, tokens], 1)[row:row + 1, :prompts.shape[1] + position]
        tokens[row, position] = int(np.argmin(tiny(context)[0, -1]))  # the least likely token there
        failure = check_run(tiny, prompts, tokens, 20, sampling, ALLOWED)
        assert failure.startswith(f"wrong tokens: row {row}, new token {position} (id {tokens[row, position]}) "
                                  f"{what}"), failure


@pytest.fixture(scope="module")
def peaked():
    """TINY with its logits 20x larger: a top 50 a few nats wide, where a wrong temperature shows (TINY's own
    spans a fifth of a nat, which every temperature samples almost alike)."""
    params = perturbed_parameters(TINY, seed=leaderboard_fakes.WEIGHTS_SEED)
    return GPT2(TINY, params | {"lnfw": params["lnfw"] * 20}, backend="reference")


@pytest.mark.parametrize("seed", range(3), ids=lambda seed: f"seed{seed}")
def test_samples_of_another_distribution_fail_the_mean_log_probability(peaked, seed):
    prompts = tiny_prompts(seed, batch=4)
    assert check_run(peaked, prompts, generated(peaked, prompts, 50, sampled(seed)), 50, sampled(seed),
                     ALLOWED) is None
    for wrong in (GREEDY, sampled(seed, temperature=0.5), sampled(seed, top_k=5)):
        failure = check_run(peaked, prompts, generated(peaked, prompts, 50, wrong), 50, sampled(seed), ALLOWED)
        assert failure is not None and "mean log-probability" in failure, (wrong, failure)


def test_tokens_of_the_wrong_shape_or_range_are_refused(tiny):
    prompts = tiny_prompts(0, batch=2)
    assert check_run(tiny, prompts, np.zeros((2, 3), np.int32), 4, GREEDY, ALLOWED).startswith(
        "wrong tokens: expected 2 rows of 4 token ids, got (2, 3)")
    assert check_run(tiny, prompts, np.zeros((2, 4)), 4, GREEDY, ALLOWED).startswith("wrong tokens: expected")
    outside = np.zeros((2, 4), np.int64)
    outside[1, 2] = TINY.vocab_size
    assert check_run(tiny, prompts, outside, 4, GREEDY, ALLOWED) == (
        f"wrong tokens: row 1, new token 2: id {TINY.vocab_size} is outside [0, {TINY.vocab_size})")


def test_freedman_s_margin():
    log_odds = math.log(2 / FALSE_ALARM)
    assert freedman_margin(4.0, 0.0) == pytest.approx(math.sqrt(2 * 4.0 * log_odds))  # about 5.4 sigma
    margin = freedman_margin(4.0, 1.0)
    assert 2 * math.exp(-margin ** 2 / (2 * (4.0 + margin / 3))) == pytest.approx(FALSE_ALARM)


# ---------------------------------------------------------------- the protocol, against fake workers

def tiny_table(directory: Path, temperature: float = 1.0, time_limit: float = 120) -> Path:
    text = leaderboard.TABLE_FILE.read_text()
    for old, new in (("batches = [1, 4, 8, 16, 32]", "batches = [1, 2]"),
                     ("new_tokens = [50, 500]", "new_tokens = [5, 20]"),
                     ("prompt_lengths = [7, 15, 10]", "prompt_lengths = [4, 6]"),
                     ("temperature = 1.0", f"temperature = {temperature}"),
                     ("time_limit_seconds = 900", f"time_limit_seconds = {time_limit}")):
        text = text.replace(old, new)
    path = directory / "table.toml"
    path.write_text(text)
    return path


def rank_fake(replay: str, table: Path, seed: int = 7, roofline: Roofline = Roofline(1e30, 1.0),
              worker: str = "honest", spy_file: Path | None = None):
    """A fake worker and a fake replayer (tests/grading/leaderboard_fakes.py, `worker` and `replay` their
    behaviours) ranked, judged by TINY on the reference backend (its own weights). The fakes are this checkout's
    tests: they run with the checkout as their kit, unisolated."""
    workload, model = load_workload(table), leaderboard_fakes.tiny_model()
    params = perturbed_parameters(TINY, seed=leaderboard_fakes.WEIGHTS_SEED)
    gate = make_gate(TINY, params, get_tokenizer().encode(workload.gate_prompt), FP32)
    judge = Judge(workload, gate, roofline, lambda: model, TINY.vocab_size)
    fake = [sys.executable, "-m", "tests.grading.leaderboard_fakes"]
    started_by = Commands(lambda place: [*fake, "worker", worker, str(table), *([str(spy_file)] if spy_file else [])],
                          [*fake, "replayer", replay, str(table)])
    return rank_submission(None, started_by, judge, seed, sandbox=Sandbox(ROOT, "none", ""), name=replay)


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["sampled", "greedy"])
def test_an_honest_replay_scores_by_the_replayer_s_clock(tmp_path, temperature):
    result = rank_fake("honest", tiny_table(tmp_path, temperature))
    print("\n" + leaderboard.console_table(result))
    assert result.reason == "geometric mean of 8 configurations, every token checked"
    assert [r.configuration for r in result.rows] == configurations(load_workload(tmp_path / "table.toml"))
    assert all(r.seconds > 0 and r.refused is None for r in result.rows)
    assert result.seed == 7 and result.wall_seconds > 0 and "prompts seed" in leaderboard.console_table(result)


@pytest.mark.parametrize("behaviour, reason", [
    ("other_model_after_first_run", "B1 new5 prompt6: wrong tokens: row 0, new token "),
    ("ignores_prompts", "B1 new5 prompt4: wrong tokens: row 0, new token "),
    ("greedy_when_sampling", ": wrong tokens: their mean log-probability under the trusted model is"),
    ("one_token_short", "B1 new5 prompt4: wrong tokens: expected 1 rows of 5 token ids, got (1, 4)"),
    ("crashes_in_second_run", "the replay failed (exit 1): RuntimeError: the submission crashed"),
    ("refuses", "its tapes were refused: RuntimeError: a replay of the submission's tape failed"),
])
def test_tokens_that_are_not_the_model_s_or_a_failed_replay_lose_the_score_with_the_reason(tmp_path, behaviour,
                                                                                           reason):
    result = rank_fake(behaviour, tiny_table(tmp_path))
    assert result.score is None and reason in result.reason, result.reason


@pytest.mark.parametrize("worker, reason", [
    ("crashes", "the worker process failed (exit 1): RuntimeError: the submission crashed"),
    ("silent", "the worker process broke off the protocol: "),
])
def test_a_broken_worker_loses_its_score_with_the_reason(tmp_path, worker, reason):
    result = rank_fake("honest", tiny_table(tmp_path), worker=worker)
    assert result.score is None and reason in result.reason and not result.rows, result.reason


@pytest.mark.parametrize("worker, replay, reason", [("hangs", "honest", "the worker process timed out after 15 s"),
                                                    ("honest", "hangs", "the replay timed out after 15 s")])
def test_a_worker_or_replay_past_the_time_limit_is_stopped(tmp_path, worker, replay, reason):
    result = rank_fake(replay, tiny_table(tmp_path, time_limit=15), worker=worker)
    assert result.score is None and result.reason == reason, result.reason


def test_the_worker_is_told_nothing_of_the_runs(tmp_path):
    spied = tmp_path / "spied.txt"
    seed = 123_456_789_012
    result = rank_fake("honest", tiny_table(tmp_path), seed=seed, worker="spies", spy_file=spied)
    assert result.score is not None, result.reason
    received, argv, environment, files = ast.literal_eval(spied.read_text())
    assert received == ["done"] and str(seed) not in repr((argv, environment)) and files == []
    first = run_inputs(seed, 0, Configuration(1, 5, 4), TINY.vocab_size)
    assert run_inputs(seed + 1, 0, Configuration(1, 5, 4), TINY.vocab_size)[0].tolist() != first[0].tolist()


def test_a_run_faster_than_the_memory_bandwidth_allows_is_refused(tmp_path):
    result = rank_fake("honest", tiny_table(tmp_path), roofline=Roofline(bytes_per_second=1.0, bytes_per_step=1e3))
    assert result.score is None
    assert result.reason.startswith("B1 new5 prompt4: ") and ("tok/s is impossible: the device's memory bandwidth "
                                                              "allows at most 0 (each step reads the weights once)"
                                                              in result.reason), result.reason


def grading(*args):
    return subprocess.run([sys.executable, "-m", "gpt2kit.grading", *args], capture_output=True, text=True, cwd=ROOT)


def test_command_line_mistakes_are_one_line(tmp_path):
    done = grading("leaderboard", str(tmp_path / "missing"))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"gpt2kit.grading: no such submission directory: "
                                                               f"{tmp_path / 'missing'}"])
    done = grading("leaderboard", str(tmp_path), "--table", str(tmp_path / "none.toml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot read the leaderboard table" in done.stderr


def test_the_leaderboard_worker_loads_no_oracle():
    code = ("import sys, gpt2kit.grading.leaderboard_worker; print(sorted(set(sys.modules) & "
            "{'gpt2kit.reference.cpu', 'gpt2kit.reference.gold', 'gpt2kit.reference.judging'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


# ---------------------------------------------------------------- taped calls' keys and refusals


class DeviceArray:
    """What a call's key reads of a CuPy array: its address, shape, dtype, size and layout."""

    def __init__(self, address: int, shape: tuple, dtype: str = "float32", contiguous: bool = True):
        self.data, self.shape, self.dtype = types.SimpleNamespace(ptr=address), shape, np.dtype(dtype)
        self.nbytes = math.prod(shape) * self.dtype.itemsize
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)


def test_a_call_s_key_is_its_function_shapes_and_numbers_an_array_given_twice_named_once():
    out, other = DeviceArray(1000, (2, 3)), DeviceArray(2000, (2, 3))
    key = call_key("residual_forward", (out, out, other, 6))
    shape = {"shape": [2, 3], "dtype": "float32"}
    assert json.loads(key) == ["residual_forward", [["out", shape], ["inp1", {"same_as": "out"}], ["inp2", shape],
                                                    ["N", 6]]]
    assert call_key("residual_forward", (out, other, DeviceArray(3000, (2, 3)), 6)) != key
    assert call_key("residual_forward", (out, out, DeviceArray(3000, (2, 3), "float16"), 6)) != key
    assert describe(key) == "residual_forward(N=6)"
    with pytest.raises(TapedCallError, match="^residual_forward: arguments out and inp1 overlap$"):
        call_key("residual_forward", (out, DeviceArray(1004, (2, 3)), other, 6))
    with pytest.raises(TapedCallError, match="^residual_forward: argument inp2 is not contiguous$"):
        call_key("residual_forward", (out, other, DeviceArray(3000, (2, 3), contiguous=False), 6))


def test_the_replayer_refuses_a_call_no_tape_answers_and_a_tape_of_kept_memory():
    arrays = (DeviceArray(1000, (4,)), DeviceArray(2000, (4,)), DeviceArray(3000, (4,)), 4)
    with pytest.raises(TapedCallError, match=r"^residual_forward\(N=4\): the worker taped no such call$"):
        TapedOps({}, {}).ops().residual_forward(*arrays)
    kept = Tape([Buffer(16, "out"), Buffer(16, kept=True)])
    with pytest.raises(TapedCallError, match=r"^residual_forward\(N=4\): its kernels read memory the call was not "
                                             r"given \(an array kept from an earlier call or from import\)"):
        TapedOps({call_key("residual_forward", arrays): kept}, {}).ops().residual_forward(*arrays)


@pytest.mark.parametrize("text, message", [
    ("not json", "^unreadable tapes: "), ("[]", "^unreadable tapes: not an object of key -> tape$"),
    ('{"k": "{\\"buffers\\": 1}"}', "^k: bad tape: buffers must be a list"), ('{"k": "[]"}', "^k: unreadable tape: not a JSON object")])
def test_unreadable_tapes_are_one_line_naming_the_key(text, message):
    with pytest.raises(TapedCallError, match=message):
        read_tapes(text)
    assert Tape.from_json(Tape([Buffer(8, kept=True)]).to_json()).buffers == [Buffer(8, kept=True)]
