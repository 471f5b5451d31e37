#!/usr/bin/env bash
# Build and install mmcv 2.1.0 with its CUDA ops for this machine's GPU only,
# on a bare CUDA machine (e.g. Python 3.12 + a recent CUDA torch, no mmcv),
# so that gpu_check.sh can run its Mask R-CNN part. About 4x faster than a
# build for every architecture: TORCH_CUDA_ARCH_LIST is the local GPU's and
# MAX_JOBS every core.
#
# Usage: bash tools/gpu/build_mmcv_cuda.sh [--background] [WORK]
#   WORK (default work_dirs/mmcv_cuda) gets build.log, the wheel and a status
#   file: "running", "done" or "failed" (and the builder's pid with
#   --background). With --background the build goes on
#   after the command returns (setsid), so a session with a per-call time limit
#   starts it and polls WORK/status in later calls. Re-running after "done"
#   only installs the wheel again (seconds): a fresh machine of the same kind
#   reuses a carried WORK.
#   MMCV_SDIST: path of mmcv-2.1.0.tar.gz (a machine without an index carries
#   it: `pip download --no-deps --no-binary :all: mmcv==2.1.0`); default: the
#   first mmcv-2.1.0.tar.gz under .whl/ or WORK/, else pip download.
#   PYTHON picks the interpreter (default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BACKGROUND=0
if [[ "${1:-}" == "--background" ]]; then BACKGROUND=1; shift; fi
WORK="$(mkdir -p "${1:-work_dirs/mmcv_cuda}" && cd "${1:-work_dirs/mmcv_cuda}" && pwd)"
PYTHON=${PYTHON:-python3}
MMCV_VERSION=2.1.0

if [[ $BACKGROUND -eq 1 ]]; then
  echo running > "$WORK/status"
  setsid bash "$0" "$WORK" > "$WORK/build.log" 2>&1 < /dev/null &
  echo $! > "$WORK/pid"
  echo "building in the background: tail -f $WORK/build.log; cat $WORK/status"
  exit 0
fi
trap 'echo failed > "$WORK/status"' ERR
echo running > "$WORK/status"

ops_ok() {
  "$PYTHON" - <<'EOF'
import torch
from mmcv.ops import RoIAlign
feats = torch.rand(1, 1, 8, 8, device='cuda')
rois = torch.tensor([[0, 0, 0, 4, 4.]], device='cuda')
RoIAlign((2, 2), 1.0, 0)(feats, rois)
EOF
}

wheel=$(ls "$WORK"/mmcv-"$MMCV_VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [[ -n "$wheel" ]]; then
  echo "[mmcv_cuda] installing the wheel built earlier: $wheel"
  "$PYTHON" -m pip install --no-deps --force-reinstall "$wheel"
fi
if ops_ok 2>/dev/null; then
  echo "[mmcv_cuda] mmcv with CUDA ops works"
  echo done > "$WORK/status"
  exit 0
fi

# The local GPU's architecture, e.g. 9.0 for an H100 / H200.
ARCH=$("$PYTHON" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
# torch's headers decide the C++ standard: ATen.h of newer torch refuses
# anything below C++20, mmcv 2.1.0's setup.py asks for C++17.
CXX_STD=$("$PYTHON" - <<'EOF'
import os, torch
header = os.path.join(os.path.dirname(torch.__file__), 'include/ATen/ATen.h')
print('c++20' if '202002L' in open(header).read() else 'c++17')
EOF
)
SDIST=${MMCV_SDIST:-$(ls .whl/mmcv-$MMCV_VERSION.tar.gz "$WORK"/mmcv-$MMCV_VERSION.tar.gz 2>/dev/null | head -n1 || true)}
if [[ -z "$SDIST" ]]; then
  "$PYTHON" -m pip download --no-cache-dir --no-deps --no-binary :all: \
    --no-build-isolation -d "$WORK" "mmcv==$MMCV_VERSION"
  SDIST="$WORK/mmcv-$MMCV_VERSION.tar.gz"
fi
echo "[mmcv_cuda] building $SDIST for sm_${ARCH/./} with -std=$CXX_STD, $(nproc) jobs, torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
src=$(mktemp -d)
tar xzf "$SDIST" -C "$src"
sed -i "s/-std=c++17/-std=$CXX_STD/g" "$src/mmcv-$MMCV_VERSION/setup.py"
start=$(date +%s)
TORCH_CUDA_ARCH_LIST="$ARCH" FORCE_CUDA=1 MMCV_WITH_OPS=1 MAX_JOBS=$(nproc) \
  "$PYTHON" -m pip wheel --no-cache-dir --no-build-isolation --no-deps \
  -w "$WORK" "$src/mmcv-$MMCV_VERSION"
echo "[mmcv_cuda] built in $(( $(date +%s) - start )) s"
"$PYTHON" -m pip install --no-deps --force-reinstall "$WORK"/mmcv-"$MMCV_VERSION"-*.whl
ops_ok
echo "[mmcv_cuda] mmcv with CUDA ops works"
echo done > "$WORK/status"
