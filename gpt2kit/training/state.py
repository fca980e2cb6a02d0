"""A training run's state in one file, to go on exactly where it stopped.

    save_state(path, TrainingState(run, step.model.parameters, step.moments), to_host)
    state = read_state(path)        # state.run, state.parameters, state.moments (host arrays)

The file is a NumPy .npz archive (read without pickle): the model's parameters and
AdamW's moments, each array as the backend held it (float64 on the reference backend,
so that a resumed run computes the same bits as one never stopped), and `run`, a JSON
object of what else the run needs (its model's sizes, its settings, the steps done),
which the command that trains writes and reads. It is written whole or not at all
(kernel_runtime.files), and a Ctrl-C stops the writing within one array.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from gpt2kit.model_runtime.checkpoint_files import CheckpointError, Progress, Tenths, os_errors
from gpt2kit.kernel_runtime.files import replacing

FORMAT = "gpt2-cuda-kit training state 1"


@dataclasses.dataclass
class TrainingState:
    run: dict          # JSON: what the run is and how far it went; the command's to fill and to read
    parameters: dict   # name -> array
    moments: dict      # name -> (m, v), AdamW's


def save_state(path: Path, state: TrainingState, to_host: Callable = np.asarray,
               progress: Progress | None = None) -> None:
    """`state` to `path` (replaced once complete), each array through to_host (a device array's copy on the
    host)."""
    arrays = {f"parameters/{name}": array for name, array in state.parameters.items()}
    for name, (m, v) in state.moments.items():
        arrays |= {f"m/{name}": m, f"v/{name}": v}
    tenths = Tenths(progress, f"saving {path}", sum(array.nbytes for array in arrays.values()))
    with (os_errors(path, "write"), replacing(path) as partial,
          zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED, allowZip64=True) as archive):
        with archive.open("run.json", "w") as member:
            member.write(json.dumps({"format": FORMAT} | state.run).encode())
        for name, array in arrays.items():  # as np.savez writes them, an array at a time
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, to_host(array), allow_pickle=False)
            tenths.add(array.nbytes)


def read_state(path: Path) -> TrainingState:
    """The state save_state wrote to `path`; CheckpointError, one line naming the file, for anything else."""
    with os_errors(path, "read"):
        try:
            with zipfile.ZipFile(path) as archive:
                run = json.loads(archive.read("run.json"))
                arrays = {member.removesuffix(".npy"): _read_array(archive, member)
                          for member in archive.namelist() if member.endswith(".npy")}
        except (zipfile.BadZipFile, KeyError, ValueError) as err:
            raise CheckpointError(f"{path}: not a training state the kit saved ({err})") from None
    if not isinstance(run, dict) or run.pop("format", None) != FORMAT:
        raise CheckpointError(f"{path}: not a training state the kit saved (its run.json names no {FORMAT!r})")
    names = [key.split("/", 1)[1] for key in arrays if key.startswith("parameters/")]
    for name in names:
        for kind in ("m", "v"):
            moment = arrays.get(f"{kind}/{name}")
            if moment is None or moment.shape != arrays[f"parameters/{name}"].shape:
                raise CheckpointError(f"{path}: AdamW's {kind} of {name} is missing or not of its shape")
    return TrainingState(run, {name: arrays[f"parameters/{name}"] for name in names},
                         {name: (arrays[f"m/{name}"], arrays[f"v/{name}"]) for name in names})


def _read_array(archive: zipfile.ZipFile, member: str) -> np.ndarray:
    with archive.open(member) as data:
        return np.lib.format.read_array(data, allow_pickle=False)
