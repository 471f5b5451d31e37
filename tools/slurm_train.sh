#!/usr/bin/env bash
# Usage: [PYTHON=...] [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#        [SIGNAL_LEAD=90] tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR \
#        [train.py options]
# Preemption (docs/user_guides/preemption.md): slurm sends SIGUSR1 SIGNAL_LEAD seconds
# before the time limit (0: not asked for), and SIGTERM when it preempts or
# cancels the job; train.py then stops at the next iteration after a
# checkpoint, with exit status 75. Inside a batch job (sbatch) this script
# then requeues the job (scontrol requeue), and the requeued job, running this
# script again, resumes from that checkpoint by itself.
source "$(dirname "$0")/launcher_common.sh"
slurm_usage 4 "$0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py options]" "$@"
set -x
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
SIGNAL_LEAD=${SIGNAL_LEAD:-90}
PREEMPTED=75

# slurm signals the batch shell too: let srun's tasks save, then requeue
trap 'echo "slurm_train.sh: stop signal; waiting for the checkpoint"' TERM USR1
SIGNAL_ARG=()
if [[ "$SIGNAL_LEAD" != 0 ]]; then SIGNAL_ARG=(--signal="USR1@$SIGNAL_LEAD"); fi

srun_tool "${SIGNAL_ARG[@]}" \
    "$PYTHON" -u "$TOOLS/train.py" "${CONFIG}" --work-dir="${WORK_DIR}" --launcher="slurm" "${@:5}" &
wait $!
status=$?
while [[ $status -gt 128 ]] && kill -0 $! 2>/dev/null; do  # a trap ended wait
  wait $!
  status=$?
done
if [[ $status -eq $PREEMPTED ]]; then
  if [[ -n "$SLURM_JOB_ID" ]]; then
    echo "slurm_train.sh: training stopped with a checkpoint; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  else
    echo "slurm_train.sh: training stopped with a checkpoint; not in a batch job, so nothing requeues it: run this command again with --resume"
  fi
fi
exit $status
