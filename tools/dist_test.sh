#!/usr/bin/env bash
# Usage: tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py options]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT. On a machine without a GPU,
# GPUS is the number of CPU processes (gloo backend).
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
source "$(dirname "$0")/launcher_common.sh"
torchrun_tool "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
