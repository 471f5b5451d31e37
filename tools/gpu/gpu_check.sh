#!/usr/bin/env bash
# Validate mmact on a CUDA machine with one command; prints everything and
# writes it to one log (and the benchmark figures to a JSON beside it):
#   1. the CUDA tests (Triton kernels against float64 references, dispatch);
#   2. operator benchmarks: APA / AGLU / FleS fwd+bwd vs Sigmoid / SiLU /
#      GELU in float32 and bfloat16, saved-for-backward bytes; the Triton
#      path's host cost per call on tiny tensors (benchmark_overhead.py);
#   3. SE-ResNet-50 APA*+AGLU vs SE-ResNet-50 ReLU training step: time and
#      torch.cuda.max_memory_allocated ratios (batch 64 and 256);
#   4. a toy LVIS APA* Mask R-CNN trained with tools/dist_train.sh and tested
#      with tools/dist_test.sh on 1 GPU with --amp; needs mmdet and mmcv
#      built with CUDA ops: on a bare machine it installs the wheels in .whl/
#      (tools/gpu/gpu_wheels.sh downloads them where an index is
#      reachable) and builds mmcv's CUDA ops for the local GPU
#      (tools/gpu/build_mmcv_cuda.sh), in the background on all cores but
#      two while parts 1-2 run on those two, so that the build costs no extra
#      device time; the host-cost benchmark waits for the build (it needs
#      idle cores); the detector is skipped with a message when the build
#      fails.
# Usage: bash tools/gpu/gpu_check.sh [LOG]   (default
#        work_dirs/gpu_check/gpu_check.log); PYTHON picks the interpreter.
#        GPU_CHECK_PARTS picks parts (default "tests benchmarks overhead
#        detector"): a session whose call limit ends the run finishes it in
#        a second call on the same machine with the parts left, e.g.
#        GPU_CHECK_PARTS="overhead detector" (the build goes on between).
# Exit status: 0 when every part that ran passed, 1 otherwise.
set -o pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 1
LOG=${1:-work_dirs/gpu_check/gpu_check.log}
WORK=$(dirname "$LOG")
mkdir -p "$WORK"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PARTS=" ${GPU_CHECK_PARTS:-tests benchmarks overhead detector} "
exec > >(tee -a "$LOG") 2>&1
status=0
section() { printf '\n===== %s =====\n' "$*"; }
fail() { echo "FAILED: $*"; status=1; }
part() { [[ "$PARTS" == *" $1 "* ]]; }

section "environment ($(date -u +%Y-%m-%dT%H:%MZ))"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
"$PYTHON" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "no CUDA GPU visible to torch: nothing to check"; exit 1
fi

MMCV_WORK=work_dirs/mmcv_cuda
CORES=$(nproc)
PIN=()
if [[ -d .whl ]] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps .whl/*.whl || fail "wheels in .whl/"
fi
# mmact imports mmcv: its Python part first (seconds), the CUDA ops later.
bash tools/gpu/build_mmcv_cuda.sh --lite "$MMCV_WORK" || fail "mmcv (lite)"
if ! "$PYTHON" -c "import mmpretrain" 2>/dev/null; then
  "$PYTHON" -c "import mmpretrain" 2>&1 | tail -n 3
  echo "mmpretrain cannot be imported, nor can mmact: with transformers >= 5" \
    "(here: $("$PYTHON" -m pip show transformers 2>/dev/null | sed -n 's/^Version: //p'))" \
    "mmpretrain 1.2.0's BLIP models fail at import; uninstall transformers or" \
    "install transformers < 5 in this environment"
  exit 1
fi
if part detector && [[ ! "$(cat "$MMCV_WORK/status" 2>/dev/null)" =~ ^(running|built|done)$ ]]; then
  # The build takes all cores but two; parts 1-2 run on those two.
  if [[ $CORES -ge 8 ]] && command -v taskset >/dev/null; then
    MAX_JOBS=$((CORES - 2)) taskset -c 2-$((CORES - 1)) \
      bash tools/gpu/build_mmcv_cuda.sh --background "$MMCV_WORK"
    PIN=(taskset -c 0,1)
  else
    bash tools/gpu/build_mmcv_cuda.sh --background "$MMCV_WORK"
  fi
fi

if part tests; then
section "CUDA tests"
"${PIN[@]}" "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
  tests/test_ops/test_triton_kernels.py tests/test_ops/test_backends.py \
  || fail "CUDA tests"
fi

if part benchmarks; then
section "operator and SE-ResNet-50 benchmarks"
"${PIN[@]}" "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts ops fles backbone \
  --batch 64 --json "$WORK/benchmark_b64.json" || fail "benchmarks"
"${PIN[@]}" "$PYTHON" tools/benchmarks/benchmark_cuda.py --parts backbone --batch 256 \
  --no-torch-path --json "$WORK/benchmark_b256.json" || fail "batch 256"
fi

wait_for_build() {
  while [[ "$(cat "$MMCV_WORK/status" 2>/dev/null)" == running ]] \
    && kill -0 "$(cat "$MMCV_WORK/pid" 2>/dev/null)" 2>/dev/null; do
    echo "waiting for the mmcv build ($MMCV_WORK/build.log: $(tail -c 120 "$MMCV_WORK/build.log" | tr '\n' ' '))"
    sleep 20
  done
}
if part overhead; then
section "host cost per call (idle cores)"
wait_for_build
"$PYTHON" tools/benchmarks/benchmark_overhead.py --device cuda --repeats 21 \
  || fail "host cost per call"
fi

if part detector; then
section "mmdet and mmcv with CUDA ops"
wait_for_build
bash tools/gpu/build_mmcv_cuda.sh "$MMCV_WORK" \
  || echo "mmcv with CUDA ops could not be built: see above"

section "toy LVIS APA* Mask R-CNN, tools/dist_train.sh / dist_test.sh, 1 GPU, --amp"
CONFIG=${MRCNN_CONFIG:-configs/toy/apa_mrcnn_r50_toy.py}
if ! "$PYTHON" - <<'EOF'
import sys
try:
    import mmdet  # noqa: F401
    import torch
    from mmcv.ops import RoIAlign
    feats = torch.rand(1, 1, 8, 8, device='cuda')
    rois = torch.tensor([[0, 0, 0, 4, 4.]], device='cuda')
    RoIAlign((2, 2), 1.0, 0)(feats, rois)
except Exception as e:  # noqa: BLE001
    print(f'SKIPPED: the detector needs mmdet and mmcv built with CUDA ops '
          f'({type(e).__name__}: {e}). Build mmcv 2.1.0 with '
          'MMCV_WITH_OPS=1 FORCE_CUDA=1 (see README, "Installation").')
    sys.exit(1)
EOF
then
  :
elif [[ ! -f "$CONFIG" ]]; then
  fail "no config $CONFIG (set MRCNN_CONFIG)"
else
  "$PYTHON" tools/misc/generate_toy_data.py lvis --out-dir data/ --skip-complete \
    || fail "toy data"
  MR_WORK="$WORK/mask_rcnn"
  PORT=${PORT:-29517} tools/dist_train.sh "$CONFIG" 1 --amp --work-dir "$MR_WORK" \
    || fail "dist_train.sh"
  CKPT=$(cat "$MR_WORK/last_checkpoint" 2>/dev/null)
  if [[ -n "$CKPT" ]]; then
    PORT=${PORT:-29518} tools/dist_test.sh "$CONFIG" "$CKPT" 1 \
      --work-dir "$MR_WORK/test" || fail "dist_test.sh"
  else
    fail "no checkpoint in $MR_WORK"
  fi
fi
fi

section "done"
echo "log: $LOG; figures: $WORK/benchmark_b64.json $WORK/benchmark_b256.json"
[[ $status -eq 0 ]] && echo "gpu_check: all parts passed" || echo "gpu_check: FAILED parts above"
exit $status
