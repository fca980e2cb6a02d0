"""The leaderboard without a GPU: its table, configurations, the gate's judging, the worker's
records (forged ones ignored), scoring, reports and command-line errors; the timing loop
on the reference backend."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpt2.checkpoint import perturbed_parameters
from gpt2.config import preset
from gpt2.executors import make_executor
from gpt2.model import GPT2
from gpt2.tokenizer import get_tokenizer
from grading import leaderboard
from grading.leaderboard import (Configuration, GateOutputs, LeaderboardError, Row, configurations, gate_failure,
                                 geometric_mean, load_rows, load_workload, save_rows, standing)
from grading.leaderboard_worker import WARM_UP_TOKENS, time_configurations
from tests.model.helpers import TINY

ROOT = Path(__file__).parents[2]
WORKLOAD = load_workload()


def test_the_table_is_the_course_s_and_fits_the_context():
    assert (WORKLOAD.batches, WORKLOAD.new_tokens, len(WORKLOAD.prompts)) == ((1, 4, 8, 16, 32), (50, 500), 3)
    found = configurations(WORKLOAD)
    assert len(found) == 30 and len(set(found)) == 30 and found[0] == Configuration(1, 50, 0)
    tokenizer, context = get_tokenizer(), preset("gpt2").max_T
    for prompt in WORKLOAD.prompts:
        assert len(tokenizer.encode(prompt)) + max(WORKLOAD.new_tokens) <= context
    assert len(tokenizer.encode(WORKLOAD.gate_prompt)) + WORKLOAD.gate_steps <= context


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("batches = [1, 4, 8, 16, 32]", "batches = []"), "batches must be a non-empty list"),
    (lambda t: t.replace("new_tokens = [50, 500]", "new_tokens = [50, 0]"), "new_tokens must be a non-empty list"),
    (lambda t: t.replace("top_k = 50", "top_k = 0"), "top_k must be an integer >= 1"),
    (lambda t: t.replace("gate_steps = 8\n", ""), "missing gate_steps"),
    (lambda t: t + "\nbatch = 3\n", "unknown key 'batch'"),
    (lambda t: t.replace("temperature = 1.0", "temperature = -1"), "temperature must be a number > 0"),
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
    assert gate_failure(None, REFERENCE, 1e-3) == "the gate's outputs are missing (the worker did not get that far)"


def test_gate_outputs_and_rows_round_trip_and_forged_rows_do_not_count(tmp_path):
    outputs().save(tmp_path)
    loaded = GateOutputs.load(tmp_path)
    assert all(np.array_equal(getattr(loaded, f.name), getattr(outputs(), f.name)) for f in dataclasses.fields(loaded))
    rows = [Row(c, 0.5, c.batch * c.new_tokens) for c in configurations(WORKLOAD)[:3]]
    save_rows(rows, tmp_path)
    forged = json.loads((tmp_path / leaderboard.ROWS_FILE).read_text())
    forged += [forged[0] | {"seconds": 1e-9},                       # a repeat: the first one counts
               forged[1] | {"batch": 2},                             # not a configuration of the table
               forged[2] | {"tokens": 1, "prompt": 1},               # fewer tokens than it asked for
               {"batch": 1}]                                          # not a row
    (tmp_path / leaderboard.ROWS_FILE).write_text(json.dumps(forged))
    assert load_rows(tmp_path, WORKLOAD) == rows


def test_standing_scores_only_a_complete_run_that_passed_the_gate():
    rows = [Row(c, 1.0, c.batch * c.new_tokens) for c in configurations(WORKLOAD)]
    passed = standing("alice", WORKLOAD, None, rows)
    assert passed.score == pytest.approx(math.exp(np.mean([np.log(r.tokens) for r in rows])))
    assert standing("bob", WORKLOAD, "logits off", rows).reason == "failed the correctness gate: logits off"
    assert standing("bob", WORKLOAD, None, rows, crash="timed out after 900 s").score is None
    assert standing("bob", WORKLOAD, None, rows[:29]).reason == "only 29 of 30 configurations ran"
    fields = leaderboard.gradescope_fields(passed)
    assert fields["leaderboard"] == [{"name": "tok/s (geometric mean)", "value": round(passed.score, 1),
                                      "order": "desc"}]
    assert fields["output"].splitlines()[-1].startswith("score") and len(fields["output"].splitlines()) == 33


def test_the_timing_loop_warms_each_batch_size_and_counts_every_token():
    model = GPT2(TINY, perturbed_parameters(TINY, seed=3), backend="reference")
    executor, calls = make_executor(model, "baseline"), []
    original = executor.generate
    executor.generate = lambda prompts, n, *args, **kwargs: calls.append((len(prompts), n)) or original(
        prompts, n, *args, **kwargs)
    small = dataclasses.replace(WORKLOAD, batches=(1, 2), new_tokens=(3, 4), prompts=("a", "b"))
    rows = time_configurations(executor, [[1, 2, 3], [4, 5]], small)
    assert [r.configuration for r in rows] == configurations(small)
    assert all(r.tokens == r.configuration.batch * r.configuration.new_tokens and r.seconds > 0 for r in rows)
    warm_up = WARM_UP_TOKENS  # two warm-up calls per batch size, before its first timed call
    assert calls == [(1, warm_up)] * 2 + [(1, 3)] * 2 + [(1, 4)] * 2 + [(2, warm_up)] * 2 + [(2, 3)] * 2 + [(2, 4)] * 2


def grading(*args):
    return subprocess.run([sys.executable, "-m", "grading", *args], capture_output=True, text=True, cwd=ROOT)


def test_command_line_mistakes_are_one_line(tmp_path):
    done = grading("leaderboard", str(tmp_path / "missing"))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"grading: no such submission directory: "
                                                               f"{tmp_path / 'missing'}"])
    done = grading("leaderboard", str(tmp_path), "--table", str(tmp_path / "none.toml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot read the leaderboard table" in done.stderr


def test_the_leaderboard_worker_loads_no_oracle():
    code = ("import sys, grading.leaderboard_worker; "
            "print(sorted(set(sys.modules) & {'reference.cpu', 'reference.gold', 'reference.judging'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
