#!/usr/bin/env bash
# Usage: [PYTHON=...] [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#        tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options]
source "$(dirname "$0")/launcher_common.sh"
slurm_usage 4 "$0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options]" "$@"
set -x
PARTITION=$1
JOB_NAME=$2
srun_tool "$PYTHON" -u "$TOOLS/test.py" "$3" "$4" --launcher="slurm" "${@:5}"
