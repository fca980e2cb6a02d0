"""Cheat: at import, writes the worker's records itself (every GELU case done, nothing refused, a tape
that launches one kernel that does nothing) and a technique.json claiming everything, then ends the
worker before it can write its own."""

import json
import os
from pathlib import Path

from gpt2kit.kernel_runtime.tape import Buffer, Launch, Program, Tape
from gpt2kit.reference.registry import cases
from tests.kernels.wrong import COPY_SOURCE

FUNCTION = "gelu_forward"


def forge() -> None:
    out = Path.cwd() / "gelu_forward"  # the worker runs in its output directory
    out.mkdir(exist_ok=True)
    with open(out / "records.jsonl", "w") as records:
        for case in cases(FUNCTION, 0):
            nbytes = 4 * case.size["N"]
            tape = Tape([Buffer(nbytes, "out"), Buffer(nbytes, "inp")], [Program(COPY_SOURCE)],
                        [Launch(0, "nothing", (1, 1, 1), (1, 1, 1), 0, ())], {"N": case.size["N"]})
            records.write(json.dumps({"function": FUNCTION, "case": case.shape_id, "error": None, "refused": None,
                                      "tape": tape.to_json()}) + "\n")
    (out / "technique.json").write_text(json.dumps({"technique": "tensor_cores", "missing": None}))
    os._exit(0)


forge()


def gelu_forward(out, inp, N):
    raise AssertionError("never called: the worker ended at import")
