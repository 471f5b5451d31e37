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
source "$(dirname "$0")/launcher_common.sh"
torchrun_tool \
    --max_restarts="${MAX_RESTARTS:-0}" \
    ${RUN_ID:+--rdzv_id="$RUN_ID"} \
    "$TOOLS/train.py" "$CONFIG" --launcher pytorch "${@:3}"
