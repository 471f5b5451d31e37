#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG GPUS [train.py options]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. On a machine without a GPU,
# GPUS is the number of CPU processes (gloo backend).
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
TOOLS="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$TOOLS/../.venv/bin/python" ]]; then PYTHON="$TOOLS/../.venv/bin/python"; else PYTHON=python; fi
fi

# exec: killing this script kills torchrun, whose workers then end too
# (mmact.utils.end_with_launcher); torchrun alone would leave them running.
export PYTHONPATH="$TOOLS/..":$PYTHONPATH MMACT_LAUNCHER_PID=$$
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$TOOLS/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
