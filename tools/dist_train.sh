#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG GPUS [train.py options]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT (and RUN_ID, the same on
# every node, for restarts). On a machine without a GPU, GPUS is the number of
# CPU processes (gloo backend).
# MAX_RESTARTS=N: torchrun restarts failed workers up to N times; restarted
# workers resume from the newest checkpoint of the work dir. A SIGTERM or
# SIGUSR1 to the job stops it at the next iteration after a checkpoint
# (exit status 75 from each worker; see docs/user_guides/preemption.md).
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
    --max_restarts="${MAX_RESTARTS:-0}" \
    ${RUN_ID:+--rdzv_id="$RUN_ID"} \
    "$TOOLS/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
