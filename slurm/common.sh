# Sourced by every job script in slurm/: finds the kit, activates the environment
# the README sets up, and says where the job runs. Not a job script itself.
#
# KIT_DIR is the kit's checkout: by default the directory sbatch was run from.

job_name=$(basename "${JOB_SCRIPT:-$0}")
KIT_DIR=${KIT_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}
if [ ! -x "$KIT_DIR/.venv/bin/python" ]; then
    echo "$job_name: no environment at $KIT_DIR/.venv: run the README's setup in the kit first (or set KIT_DIR)" >&2
    exit 1
fi
# shellcheck disable=SC1091
source "$KIT_DIR/.venv/bin/activate"
cd "$KIT_DIR" || exit 1
export PYTHONUNBUFFERED=1

echo "== $job_name: job ${SLURM_JOB_ID:-none} on $(hostname) at $(date -Is)"
GPU_MISSING=$(python -c 'from gpt2kit.kernel_runtime import gpu_unavailable_reason as r; print(r() or "")')
if [ -z "$GPU_MISSING" ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
else
    echo "== no GPU here: $GPU_MISSING"
fi

# skip_without_gpu WHAT: end the job successfully, saying why, when there is no GPU.
skip_without_gpu() {
    if [ -n "$GPU_MISSING" ]; then
        echo "$1: skipped: $GPU_MISSING"
        exit 0
    fi
}
