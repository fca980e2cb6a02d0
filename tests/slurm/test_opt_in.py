"""On a machine where Slurm answers (a Delta login node), a plain pytest submits nothing."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

FAKE_SLURM = '''#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
[ "$(basename "$0")" = sinfo ] && echo idle
exit 0
'''


def test_slurm_tests_submit_nothing_unless_asked(tmp_path):
    """A cluster with a gpuA40x4 partition answers (as on a Delta login node): still nothing is submitted."""
    log = tmp_path / "slurm-calls.log"
    for command in ("sbatch", "sinfo"):
        path = tmp_path / command
        path.write_text(FAKE_SLURM.format(log=log))
        path.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/slurm/test_slurm_jobs.py"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "KIT_SLURM_TESTS": "0"})
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Slurm job tests submit real jobs: set KIT_SLURM_TESTS=1 to run them" in done.stdout
    assert "passed" not in done.stdout.splitlines()[-1]
    assert not log.exists()
