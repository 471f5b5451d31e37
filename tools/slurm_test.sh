#!/usr/bin/env bash
# Usage: [PYTHON=...] [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#        tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options]
if [[ $# -lt 4 || -z "$1" ]]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options]; got $# arguments, PARTITION '$1' (the slurm partition: \$SLURM_JOB_PARTITION in a batch script)" >&2
  exit 2
fi
set -x
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
PY_ARGS=${@:5}
TOOLS="$(cd "$(dirname "$0")" && pwd)"
# the interpreter, as tools/dist_train.sh finds it: PYTHON, else the
# repository's .venv, else python on the PATH
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$TOOLS/../.venv/bin/python" ]]; then PYTHON="$TOOLS/../.venv/bin/python"; else PYTHON=python; fi
fi

PYTHONPATH="$TOOLS/..":$PYTHONPATH \
srun -p "${PARTITION}" \
    --job-name="${JOB_NAME}" \
    --gres=gpu:"${GPUS_PER_NODE}" \
    --ntasks="${GPUS}" \
    --ntasks-per-node="${GPUS_PER_NODE}" \
    --cpus-per-task="${CPUS_PER_TASK}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    "$PYTHON" -u "$TOOLS/test.py" "${CONFIG}" "${CHECKPOINT}" --launcher="slurm" ${PY_ARGS}
