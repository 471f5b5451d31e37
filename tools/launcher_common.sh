# Sourced by tools/{dist,slurm}_{train,test}.sh and tools/gpu/gpu_check.sh:
# what the launchers share.
#   TOOLS   this folder;
#   PYTHON  the interpreter, the first of
#             1. PYTHON, when set;
#             2. the activated virtual environment's: $VIRTUAL_ENV/bin/python;
#             3. the activated conda environment's, other than base:
#                $CONDA_PREFIX/bin/python (CONDA_DEFAULT_ENV is not base);
#             4. the repository's .venv/bin/python (make demo, make test);
#             5. python on the PATH;
#           announce_python names it and why on one line before the tool
#           starts, or stops the launcher when it cannot run torch;
#   PYTHONPATH starts with the repository (mmact and its tools import).
TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "$PYTHON" ]]; then
  PYTHON_ENV="PYTHON=$PYTHON"
  PYTHON_FROM="PYTHON"
elif [[ -n "$VIRTUAL_ENV" ]]; then
  PYTHON="$VIRTUAL_ENV/bin/python"
  PYTHON_ENV="the activated virtual environment $VIRTUAL_ENV (VIRTUAL_ENV)"
  PYTHON_FROM="VIRTUAL_ENV: the activated virtual environment; set PYTHON to use another"
elif [[ -n "$CONDA_PREFIX" && "$CONDA_DEFAULT_ENV" != base ]]; then
  PYTHON="$CONDA_PREFIX/bin/python"
  PYTHON_ENV="the activated conda environment ${CONDA_DEFAULT_ENV:-$CONDA_PREFIX} (CONDA_PREFIX=$CONDA_PREFIX)"
  PYTHON_FROM="CONDA_PREFIX: the activated conda environment ${CONDA_DEFAULT_ENV:-$CONDA_PREFIX}; set PYTHON to use another"
elif [[ -x "$TOOLS/../.venv/bin/python" ]]; then
  PYTHON="$(cd "$TOOLS/.." && pwd)/.venv/bin/python"
  PYTHON_ENV="the repository's .venv"
  PYTHON_FROM="the repository's .venv: no environment is activated; set PYTHON to use another"
else
  PYTHON=python
  PYTHON_ENV="python on the PATH"
  PYTHON_FROM="python on the PATH: no environment is activated and there is no .venv; set PYTHON to use another"
fi
export PYTHONPATH="$TOOLS/..":$PYTHONPATH

# announce_python: one line on stderr naming the interpreter's path and why it
# was chosen (a .venv with CPU-only mmcv ops, from make demo, is not used
# unnoticed on a GPU machine); or, instead, why it cannot run the tools:
# exit 127 when there is no such interpreter, 1 when it has no torch (before
# torchrun or srun starts).
announce_python() {
  local path torch
  if ! path="$(command -v "$PYTHON")"; then
    echo "$(basename "$0"): no interpreter '$PYTHON' ($PYTHON_FROM)" >&2
    exit 127
  fi
  if [[ "$path" == */* ]]; then
    path="$(cd "$(dirname "$path")" && pwd)/$(basename "$path")"
  fi
  # find_spec: whether torch is there, without the seconds of importing it
  torch="$("$PYTHON" -c 'import importlib.util as u; print("torch" if u.find_spec("torch") else "none")' 2>/dev/null)"
  if [[ "$torch" == none ]]; then
    echo "$(basename "$0"): $PYTHON_ENV has no torch ($path cannot import it): install torch and mmact's requirements there (docs/get_started.md), or set PYTHON to an interpreter that has them" >&2
    exit 1
  elif [[ "$torch" != torch ]]; then
    echo "$(basename "$0"): $path ($PYTHON_ENV) is not a working Python interpreter" >&2
    exit 1
  fi
  echo "$(basename "$0"): interpreter $path ($PYTHON_FROM)" >&2
}

# torchrun_tool [torchrun options] TOOL [tool options]: GPUS processes per
# node (NNODES, NODE_RANK, MASTER_ADDR, PORT for several machines). exec:
# killing the launcher kills torchrun, whose workers then end too
# (mmact.utils.end_with_launcher); torchrun alone would leave them running.
torchrun_tool() {
  announce_python
  export MMACT_LAUNCHER_PID=$$
  exec "$PYTHON" -m torch.distributed.run \
      --nnodes="${NNODES:-1}" \
      --node_rank="${NODE_RANK:-0}" \
      --master_addr="${MASTER_ADDR:-127.0.0.1}" \
      --nproc_per_node="$GPUS" \
      --master_port="${PORT:-29500}" \
      "$@"
}

# slurm_usage MIN_ARGS USAGE "$@": stop with the usage (exit 2) when an
# argument is missing or the partition is empty (an unset $PARTITION in a
# batch script shifts the others).
slurm_usage() {
  local min=$1 usage=$2
  shift 2
  if [[ $# -lt $min || -z "$1" ]]; then
    echo "usage: $usage; got $# arguments, PARTITION '$1' (the slurm partition: \$SLURM_JOB_PARTITION in a batch script)" >&2
    exit 2
  fi
}

# srun_tool [srun options] TOOL [tool options]: GPUS tasks on PARTITION,
# GPUS_PER_NODE per node, CPUS_PER_TASK each, plus SRUN_ARGS. exec: run in the
# background (srun_tool ... &), the subshell becomes srun, which handles the
# stop signals itself (a subshell would die of the ones its parent traps).
srun_tool() {
  announce_python
  exec srun -p "${PARTITION}" \
      --job-name="${JOB_NAME}" \
      --gres=gpu:"${GPUS_PER_NODE:-8}" \
      --ntasks="${GPUS:-8}" \
      --ntasks-per-node="${GPUS_PER_NODE:-8}" \
      --cpus-per-task="${CPUS_PER_TASK:-5}" \
      --kill-on-bad-exit=1 \
      ${SRUN_ARGS} \
      "$@"
}
