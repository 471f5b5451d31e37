#!/usr/bin/env bash
# Measure mmact on a CUDA machine in one call: every figure the project
# claims, into one log and one gpu.json (tools/gpu/gpu_json.py lists its
# keys). The parts, in the order they run (PART_TABLE below):
#   while mmcv's CUDA ops build in the background on all cores but two (a
#   bare machine; 260 s on 14 cores), on those two, only what reads GPU time:
#     tests       the CUDA tests (Triton kernels against float64 references,
#                 dispatch; the interpreter cases are CI's);
#     ops, fles   APA / AGLU / FleS fwd+bwd wall time against Sigmoid / SiLU /
#                 GELU, bytes saved for backward (benchmark_cuda.py);
#     kernel      GPU time alone of AGLU against SiLU (torch.profiler);
#     se_r50      SE-ResNet-50 APA*+AGLU against ReLU training step, batch 64;
#     cuda_kernels
#                 the CUDA C++ row of APA / AGLU / FleS (MMACT_CUDA_KERNELS=1):
#                 built for the local GPU (python -m mmact.ops.cuda_build),
#                 then its tests (float64 gradcheck, equality with the
#                 Triton and composite rows) and compute-sanitizer's
#                 racecheck, synccheck, initcheck on each kernel;
#   after the build, on idle cores:
#     host_cost, host_cost_triton
#                 host cost per call (benchmark_overhead.py) on the default
#                 path and on the Triton row;
#     host_cost_cuda
#                 the same on the CUDA C++ row;
#     mask_rcnn   the LVIS Mask R-CNN step protocol
#                 (benchmark_mask_rcnn_step.py: APA*+AGLU against SE-ReLU and
#                 ReLU, float32 and --amp);
#     dist        the toy LVIS APA* Mask R-CNN through tools/dist_train.sh
#                 (--amp) and tools/dist_test.sh, 1 GPU.
# A part that fails is named with its last log line in the summary; the
# others still run. gpu.json is rewritten after every part, so a call cut
# short (SIGTERM, SIGINT, an outer time limit) keeps what it measured and
# names the parts left.
#
# Usage: bash tools/gpu/gpu_check.sh [LOG]
#   LOG: default work_dirs/gpu_check/gpu_check.log; gpu.json, the parts'
#   logs and figures (parts/) go beside it. A GPU run that exits 0 also
#   writes docs/benchmarks/gpu.json and the table of docs/benchmarks/gpu.md.
#   PYTHON: the interpreter; unset, the launchers' rule picks one
#   (tools/launcher_common.sh: an activated environment, else .venv).
#   GPU_CHECK_PARTS="host_cost mask_rcnn": only these parts (e.g. a second
#   call on the same machine with the parts a first one left).
#   GPU_CHECK_DRY_RUN=1: every part's script on the CPU at smoke sizes (no
#   GPU, no mmcv build; the test parts collect their tests): wall clocks for
#   CUDA events, no memory figures, bfloat16 autocast for --amp; gpu.json
#   gets "dry_run": true.
# On a bare CUDA machine (a CUDA torch, no mmengine / mmdet / mmpretrain, no
# package index) it installs the wheels of .whl/ (tools/gpu/gpu_wheels.sh
# downloads them where an index is reachable), mmcv's Python part, and builds
# mmcv's CUDA ops for the local GPU (tools/gpu/build_mmcv_cuda.sh).
# Exit status: 0 when every part passed (or was skipped with a reason), 1
# otherwise; 143 / 130 when stopped by SIGTERM / SIGINT.
set -o pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 1
# PYTHON and PYTHONPATH as the launchers set them; the interpreter named
# (or a stop, when it has no torch)
source tools/launcher_common.sh
announce_python
export PYTHONUNBUFFERED=1
LOG=${1:-work_dirs/gpu_check/gpu_check.log}
WORK=$(dirname "$LOG")
PARTS=$WORK/parts
DRY=
[[ "${GPU_CHECK_DRY_RUN:-}" == 1 ]] && DRY=1
START=$(date +%s)

# NAME PHASE: "build" parts read GPU time only and run on two cores while
# mmcv builds; "idle" parts need idle cores or mmcv's CUDA ops. Each part is
# the function part_NAME below: a new part is one line here and one function.
PART_TABLE=(
  "tests build"
  "ops build"
  "fles build"
  "kernel build"
  "se_r50 build"
  "cuda_kernels build"
  "host_cost idle"
  "host_cost_triton idle"
  "host_cost_cuda idle"
  "mask_rcnn idle"
  "dist idle"
)
ALL=()
for row in "${PART_TABLE[@]}"; do ALL+=("${row%% *}"); done
SELECTED=(${GPU_CHECK_PARTS:-${ALL[@]}})
for name in "${SELECTED[@]}"; do
  if [[ " ${ALL[*]} " != *" $name "* ]]; then
    echo "gpu_check: GPU_CHECK_PARTS names '$name'; the parts are: ${ALL[*]}"
    exit 2
  fi
done
phase_of() {
  local row
  for row in "${PART_TABLE[@]}"; do
    [[ "${row%% *}" == "$1" ]] && echo "${row##* }"
  done
}

mkdir -p "$WORK"
rm -rf "$PARTS"
mkdir -p "$PARTS"
echo "${SELECTED[@]}" > "$PARTS/order"
for name in "${SELECTED[@]}"; do echo left > "$PARTS/$name.status"; done

write_json() {  # write_json [EXIT]: gpu.json of what ran so far
  "$PYTHON" tools/gpu/gpu_json.py assemble "$PARTS" "$WORK/gpu.json" \
    --env "$PARTS/env.json" --seconds $(( $(date +%s) - START )) \
    ${1:+--exit "$1"} ${DRY:+--dry-run} \
    || echo "gpu_check: could not write $WORK/gpu.json"
}

if [[ -z $DRY ]] && ! "$PYTHON" -c \
    "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "gpu_check: no CUDA GPU visible to torch ($PYTHON); GPU_CHECK_DRY_RUN=1 runs the parts on the CPU"
  write_json 1 >/dev/null 2>&1
  exit 1
fi

exec > >(tee -a "$LOG") 2>&1
section() { printf '\n===== %s =====\n' "$*"; }

section "environment ($(date -u +%Y-%m-%dT%H:%MZ))${DRY:+, dry run on the CPU}"
DRIVER=
if [[ -z $DRY ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)
fi
COMMIT=$(git rev-parse --short HEAD 2>/dev/null)
if [[ -n $COMMIT ]] && ! git diff --quiet HEAD -- 2>/dev/null; then COMMIT="$COMMIT-dirty"; fi
GPU_CHECK_DRIVER=$DRIVER GPU_CHECK_COMMIT=$COMMIT "$PYTHON" - "$PARTS/env.json" <<'EOF'
import datetime, json, os, sys
import torch
try:
    import triton
    triton_version = triton.__version__
except ImportError:
    triton_version = None
cuda = torch.cuda.is_available() and not os.environ.get('GPU_CHECK_DRY_RUN')
env = dict(
    gpu=torch.cuda.get_device_name(0) if cuda else None,
    driver=os.environ.get('GPU_CHECK_DRIVER') or None,
    torch=torch.__version__,
    triton=triton_version,
    date=datetime.date.today().isoformat(),
    commit=os.environ.get('GPU_CHECK_COMMIT') or None)
print(' '.join(f'{k}={v}' for k, v in env.items()))
json.dump(env, open(sys.argv[1], 'w'))
EOF

MMCV_WORK=work_dirs/mmcv_cuda
CORES=$(nproc)
BUILDING=
ops_ok() {  # mmcv's compiled RoIAlign runs on the device
  "$PYTHON" - "${DRY:+cpu}" <<'EOF' >/dev/null 2>&1
import sys
import torch
from mmcv.ops import RoIAlign
dev = sys.argv[1] or 'cuda'
feats = torch.rand(1, 1, 8, 8, device=dev)
rois = torch.tensor([[0, 0, 0, 4, 4.]], device=dev)
RoIAlign((2, 2), 1.0, 0)(feats, rois)
EOF
}
selected_idle_ops() {  # a selected part needs mmcv's compiled ops
  [[ " ${SELECTED[*]} " == *" mask_rcnn "* || " ${SELECTED[*]} " == *" dist "* ]]
}
if [[ -z $DRY ]]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps .whl/*.whl \
      || echo "gpu_check: installing the wheels of .whl/ failed"
  elif ! "$PYTHON" -c "import mmengine, mmdet, mmpretrain" 2>/dev/null; then
    echo "gpu_check: mmengine, mmdet or mmpretrain is missing and there is no .whl/ here:" \
      "run bash tools/gpu/gpu_wheels.sh on a machine with a package index and copy .whl/ here"
    write_json 1
    exit 1
  fi
  # mmact imports mmcv: its Python part first (seconds), the CUDA ops later.
  bash tools/gpu/build_mmcv_cuda.sh --lite "$MMCV_WORK" \
    || echo "gpu_check: mmcv's Python part could not be installed"
  if ! "$PYTHON" -c "import mmpretrain" 2>/dev/null; then
    "$PYTHON" -c "import mmpretrain" 2>&1 | tail -n 3
    echo "gpu_check: mmpretrain cannot be imported, nor can mmact: with transformers >= 5" \
      "(here: $("$PYTHON" -m pip show transformers 2>/dev/null | sed -n 's/^Version: //p'))" \
      "mmpretrain 1.2.0's BLIP models fail at import; uninstall transformers or" \
      "install transformers < 5 in this environment"
    write_json 1
    exit 1
  fi
  if selected_idle_ops && ! ops_ok \
      && [[ ! "$(cat "$MMCV_WORK/status" 2>/dev/null)" =~ ^(running|built)$ ]]; then
    BUILDING=1
    if [[ $CORES -ge 8 ]] && command -v taskset >/dev/null; then
      MAX_JOBS=$((CORES - 2)) taskset -c 2-$((CORES - 1)) \
        bash tools/gpu/build_mmcv_cuda.sh --background "$MMCV_WORK"
      # the build-phase parts run on the two cores the build leaves
      taskset -pc 0,1 $$ >/dev/null
    else
      bash tools/gpu/build_mmcv_cuda.sh --background "$MMCV_WORK"
    fi
  elif [[ "$(cat "$MMCV_WORK/status" 2>/dev/null)" =~ ^(running|built)$ ]]; then
    BUILDING=1  # a build of an earlier call on this machine
  fi
fi

# Arguments of the benchmark scripts: the device, and the dry run's sizes.
if [[ -n $DRY ]]; then
  BENCH=(--device cpu --smoke)
else
  BENCH=(--device cuda)
fi

# The parts' pytest runs. The dry run collects them only: on the CPU their
# GPU cases skip and the suite (make test) runs the others itself.
PYTEST_RUN=(-q -p no:cacheprovider -rs)
[[ -n $DRY ]] && PYTEST_RUN+=(--collect-only)

part_tests() {
  "$PYTHON" -m pytest "${PYTEST_RUN[@]}" \
    tests/test_ops/test_triton_kernels.py tests/test_ops/test_backends.py \
    -k "not interpreter"
}
part_ops() {
  "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts ops "${BENCH[@]}" \
    --json "$PARTS/ops.json"
}
part_fles() {
  "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts fles "${BENCH[@]}" \
    --json "$PARTS/fles.json"
}
part_kernel() {
  "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts kernel "${BENCH[@]}" \
    --json "$PARTS/kernel.json"
}
part_se_r50() {
  "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts backbone --batch 64 \
    --no-torch-path "${BENCH[@]}" --json "$PARTS/se_r50.json"
}
# 200 calls x 9 rounds: about 20 s a run at 537b3f1's host cost, within the
# call's 480 s beside the build, the Mask R-CNN protocol and the toy run.
HOST_COST_SIZE=(--calls 200 --repeats 9)
part_host_cost() {
  local size=("${HOST_COST_SIZE[@]}")
  [[ -n $DRY ]] && size=(--calls 3 --repeats 2 --warmup 1)
  "$PYTHON" tools/benchmarks/benchmark_overhead.py --device "${BENCH[1]}" \
    "${size[@]}" --json "$PARTS/host_cost.json"
}
part_host_cost_triton() {
  # The Triton row: on a GPU the CUDA tensors' Triton kernels (whatever
  # the default row is); on the CPU Triton's interpreter (Triton >= 3.0).
  local size=("${HOST_COST_SIZE[@]}") env=(MMACT_TRITON= MMACT_CUDA_KERNELS=0)
  if [[ -n $DRY ]]; then
    if ! "$PYTHON" -c "import sys; from mmact.compat import triton_interpreter_available as a; sys.exit(not a())" 2>/dev/null; then
      skip "no Triton interpreter (Triton >= 3.0) for the Triton row on the CPU"
      return 0
    fi
    size=(--calls 1 --repeats 1 --warmup 0)
    env=(TRITON_INTERPRET=1 MMACT_TRITON=1)
  fi
  env "${env[@]}" "$PYTHON" tools/benchmarks/benchmark_overhead.py \
    --device "${BENCH[1]}" "${size[@]}" --summary-key host_cost_triton \
    --json "$PARTS/host_cost_triton.json"
}
# The CUDA C++ row's tests; on the CPU they collect and skip (no GPU), and
# the library is not built (tests/test_ops/test_cuda_build.py compiles it).
CUDA_ROW_TESTS=(tests/test_ops/test_apa/test_cuda.py
                tests/test_ops/test_fles/test_cuda.py
                tests/test_ops/test_fles/test_cuda_routing.py)
part_cuda_kernels() {
  local status=0
  if [[ -z $DRY ]]; then
    "$PYTHON" -m mmact.ops.cuda_build || return 1
  fi
  "$PYTHON" -m pytest "${PYTEST_RUN[@]}" "${CUDA_ROW_TESTS[@]}" \
    || status=1
  [[ -z $DRY ]] && { sanitize_cuda_kernels || status=1; }
  return $status
}
# compute-sanitizer's racecheck, synccheck and initcheck on one small call of
# each CUDA C++ kernel (tools/gpu/sanitizer_cases.py); verdicts in gpu.json's
# sanitizer section, each tool's log in parts/sanitizer/.
sanitize_cuda_kernels() {
  local sanitizer tool dir=$PARTS/sanitizer
  # the toolkit that built the kernels (cuda_build.find_toolkit), else PATH's
  sanitizer="$("$PYTHON" -c 'from mmact.ops.cuda_build import find_toolkit; print(find_toolkit().home)' 2>/dev/null)/bin/compute-sanitizer"
  [[ -x $sanitizer ]] || sanitizer=$(command -v compute-sanitizer)
  if [[ ! -x $sanitizer ]]; then
    echo "no compute-sanitizer in the CUDA toolkit or on PATH: gpu.json's sanitizer section stays empty"
    return 0
  fi
  mkdir -p "$dir"
  for tool in racecheck synccheck initcheck; do
    "$sanitizer" --tool "$tool" --error-exitcode 1 \
      "$PYTHON" tools/gpu/sanitizer_cases.py > "$dir/$tool.log" 2>&1
    echo "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|sanitizer_cases' "$dir/$tool.log" | tail -n 2 | tr '\n' ' ')"
  done
  "$PYTHON" tools/gpu/gpu_json.py sanitizer "$dir" "$PARTS/cuda_kernels.json"
}
part_host_cost_cuda() {
  local size=("${HOST_COST_SIZE[@]}")
  [[ -n $DRY ]] && size=(--calls 3 --repeats 2 --warmup 1)
  MMACT_CUDA_KERNELS=1 "$PYTHON" tools/benchmarks/benchmark_overhead.py \
    --device "${BENCH[1]}" "${size[@]}" --summary-key host_cost_cuda \
    --json "$PARTS/host_cost_cuda.json"
}
needs_ops() {
  if ! ops_ok; then
    echo "mmcv's compiled ops do not run on ${BENCH[1]}: see $MMCV_WORK/build.log"
    return 1
  fi
}
part_mask_rcnn() {
  needs_ops || return 1
  "$PYTHON" tools/benchmarks/benchmark_mask_rcnn_step.py "${BENCH[@]}" \
    --json "$PARTS/mask_rcnn.json"
}
part_dist() {
  needs_ops || return 1
  local config=${MRCNN_CONFIG:-configs/toy/apa_mrcnn_r50_toy.py} out="$WORK/dist"
  local train=(--amp) test=()
  rm -rf "$out"
  if [[ -n $DRY ]]; then
    # A training iteration on two images (--amp: bfloat16 autocast on the
    # CPU), a test on two, the model at a sixteenth of its widths (the same
    # blocks and heads): the tools and the launchers run, the figures mean
    # nothing.
    mkdir -p "$out"
    "$PYTHON" - "$config" "$out/narrow.py" <<'EOF' || return 1
import sys
from mmact.testing import narrow_fpn_detector
from mmact.utils.preflight import load_config
cfg = load_config(sys.argv[1])
narrow_fpn_detector(cfg.model, depth=cfg.model.backbone.depth)
cfg.dump(sys.argv[2])
EOF
    config=$out/narrow.py
    train+=(--cfg-options train_cfg.max_epochs=1
            train_dataloader.dataset.dataset.indices=2)
    test=(--cfg-options test_dataloader.dataset.indices=2
          model.test_cfg.rcnn.max_per_img=20)
  fi
  "$PYTHON" tools/misc/generate_toy_data.py lvis --out-dir data/ --skip-complete \
    || return 1
  PORT=${PORT:-29517} tools/dist_train.sh "$config" 1 "${train[@]}" \
    --work-dir "$out" || return 1
  local ckpt
  ckpt=$(cat "$out/last_checkpoint" 2>/dev/null)
  [[ -n "$ckpt" ]] || { echo "no checkpoint in $out"; return 1; }
  PORT=${PORT:-29518} tools/dist_test.sh "$config" "$ckpt" 1 "${test[@]}" \
    --work-dir "$out/test"
}

skip() {  # inside a part: it cannot run here, for a reason
  echo "SKIPPED: $*"
  echo "skipped: $*" > "$PARTS/$CURRENT.skip"
}

CURRENT=
PART_PID=
run_part() {
  CURRENT=$1
  section "$1 (${DRY:+dry run, }$(( $(date +%s) - START )) s in)"
  echo running > "$PARTS/$1.status"
  local t0 rc
  t0=$(date +%s)
  # its own process group (set -m), so that a stop ends the part whole
  set -m
  ( "part_$1" 2>&1 | tee "$PARTS/$1.log" ) &
  PART_PID=$!
  set +m
  wait "$PART_PID"
  rc=$?
  PART_PID=
  local took=$(( $(date +%s) - t0 ))
  if [[ -f "$PARTS/$1.skip" ]]; then
    cp "$PARTS/$1.skip" "$PARTS/$1.status"
  elif [[ $rc -eq 0 ]]; then
    echo "passed" > "$PARTS/$1.status"
  else
    echo "failed: $(grep -v '^\s*$' "$PARTS/$1.log" | tail -n 1 | cut -c1-200)" \
      > "$PARTS/$1.status"
  fi
  echo "[$1: $(cat "$PARTS/$1.status") in $took s]"
  write_json
  CURRENT=
}

summary() {
  section "summary ($(( $(date +%s) - START )) s)"
  local name
  for name in "${SELECTED[@]}"; do
    printf '%-18s %s\n' "$name" "$(cat "$PARTS/$name.status")"
  done
  echo "log: $LOG; figures: $WORK/gpu.json; each part's log: $PARTS/"
}

on_stop() {
  trap - TERM INT
  if [[ -n $PART_PID ]]; then
    kill -TERM -- -"$PART_PID" 2>/dev/null
    wait "$PART_PID" 2>/dev/null
  fi
  [[ -n $CURRENT ]] && echo "stopped" > "$PARTS/$CURRENT.status"
  write_json
  summary
  local left=()
  for name in "${SELECTED[@]}"; do
    [[ "$(cat "$PARTS/$name.status")" =~ ^(left|stopped)$ ]] && left+=("$name")
  done
  echo "gpu_check: stopped by $1 after $(( $(date +%s) - START )) s; parts left: ${left[*]:-none}" \
    "(GPU_CHECK_PARTS=\"${left[*]}\" runs them)"
  exit "$2"
}
trap 'on_stop SIGTERM 143' TERM
trap 'on_stop SIGINT 130' INT

finish_build() {  # wait for the background build, then install its wheel
  while [[ "$(cat "$MMCV_WORK/status" 2>/dev/null)" == running ]] \
    && kill -0 "$(cat "$MMCV_WORK/pid" 2>/dev/null)" 2>/dev/null; do
    echo "waiting for the mmcv build ($(( $(date +%s) - START )) s in; $MMCV_WORK/build.log: $(tail -c 100 "$MMCV_WORK/build.log" | tr '\n' ' '))"
    sleep 10 &
    wait $!
  done
  bash tools/gpu/build_mmcv_cuda.sh "$MMCV_WORK" \
    || echo "gpu_check: mmcv with CUDA ops could not be built: $MMCV_WORK/build.log"
}

for name in "${SELECTED[@]}"; do
  if [[ $(phase_of "$name") == idle && -n $BUILDING ]]; then
    section "mmcv's CUDA ops ($(( $(date +%s) - START )) s in)"
    finish_build
    BUILDING=
    [[ $CORES -ge 8 ]] && command -v taskset >/dev/null \
      && taskset -pc 0-$((CORES - 1)) $$ >/dev/null
  fi
  run_part "$name"
done

status=0
for name in "${SELECTED[@]}"; do
  [[ "$(cat "$PARTS/$name.status")" =~ ^(passed|skipped) ]] || status=1
done
write_json "$status"
summary
if [[ $status -eq 0 && -z $DRY ]]; then
  cp "$WORK/gpu.json" docs/benchmarks/gpu.json
  "$PYTHON" tools/gpu/gpu_json.py table --write \
    && echo "docs/benchmarks/gpu.json and the table of docs/benchmarks/gpu.md: this call's figures"
fi
[[ $status -eq 0 ]] && echo "gpu_check: all parts passed" || echo "gpu_check: FAILED parts above"
exit $status
