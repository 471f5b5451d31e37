#!/usr/bin/env bash
# Build and install mmcv 2.1.0 with its CUDA ops for this machine's GPU only,
# on a bare CUDA machine (e.g. Python 3.12 + a recent CUDA torch, no mmcv),
# so that gpu_check.sh can run its Mask R-CNN part. About 4x faster than a
# build for every architecture: TORCH_CUDA_ARCH_LIST is the local GPU's and
# MAX_JOBS every core.
#
# Usage: bash tools/gpu/build_mmcv_cuda.sh [--background | --lite] [WORK]
#   WORK (default work_dirs/mmcv_cuda) gets build.log, the wheel and a status
#   file: "running", "built" (background build finished), "done" (installed
#   and its CUDA ops work) or "failed" (and the builder's pid with
#   --background). With --background the wheel is built after the command
#   returns (setsid) and not installed, so that processes importing mmcv
#   meanwhile never see it replaced; the next run without an option installs
#   it (seconds): a fresh machine of the same kind reuses a carried WORK.
#   --lite installs mmcv's Python part without ops (seconds) where no mmcv
#   imports, so that mmact imports while the CUDA build runs.
#   MMCV_SDIST: path of mmcv-2.1.0.tar.gz (a machine without an index carries
#   it: `pip download --no-deps --no-binary :all: mmcv==2.1.0`); default: the
#   first mmcv-2.1.0.tar.gz under .whl/ or WORK/, else pip download.
#   PYTHON picks the interpreter (default python3). MAX_JOBS: compile jobs
#   (default every core). mmcv 2.1.0's setup.py imports pkg_resources, which
#   setuptools >= 81 no longer has: a setuptools < 70 wheel under .whl/build/
#   is then put on the build's path (gpu_wheels.sh downloads it).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
MODE=install
case "${1:-}" in
  --background) MODE=background; shift ;;
  --lite) MODE=lite; shift ;;
esac
WORK="$(mkdir -p "${1:-work_dirs/mmcv_cuda}" && cd "${1:-work_dirs/mmcv_cuda}" && pwd)"
PYTHON=${PYTHON:-python3}
MMCV_VERSION=2.1.0
MMCV_WHEEL=("$WORK"/mmcv-"$MMCV_VERSION"-*.whl)

sdist() {
  local path=${MMCV_SDIST:-$(ls .whl/mmcv-$MMCV_VERSION.tar.gz "$WORK"/mmcv-$MMCV_VERSION.tar.gz 2>/dev/null | head -n1 || true)}
  if [[ -z "$path" ]]; then
    "$PYTHON" -m pip download -q --no-cache-dir --no-deps --no-binary :all: \
      --no-build-isolation -d "$WORK" "mmcv==$MMCV_VERSION" >&2
    path="$WORK/mmcv-$MMCV_VERSION.tar.gz"
  fi
  echo "$path"
}
# mmcv's setup.py imports pkg_resources.
with_pkg_resources() {
  if ! "$PYTHON" -c "import pkg_resources" 2>/dev/null; then
    local tools_wheel
    tools_wheel=$(ls .whl/build/setuptools-*.whl 2>/dev/null | head -n1 || true)
    if [[ -z "$tools_wheel" ]]; then
      echo "[mmcv_cuda] mmcv's setup.py needs pkg_resources: put a setuptools<70 wheel in .whl/build/" >&2
      return 1
    fi
    "$PYTHON" -m pip install -q --no-deps --target "$WORK/build-site" "$tools_wheel"
    export PYTHONPATH="$WORK/build-site${PYTHONPATH:+:$PYTHONPATH}"
  fi
}

if [[ $MODE == lite ]]; then
  if ! "$PYTHON" -c "import mmcv" 2>/dev/null; then
    with_pkg_resources
    MMCV_WITH_OPS=0 "$PYTHON" -m pip install -q --no-deps --no-build-isolation "$(sdist)"
    echo "[mmcv_cuda] installed mmcv's Python part (no ops)"
  fi
  exit 0
fi
if [[ $MODE == background ]]; then
  echo running > "$WORK/status"
  MMCV_BUILD_ONLY=1 setsid bash "$0" "$WORK" > "$WORK/build.log" 2>&1 < /dev/null &
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
install_wheel() {
  echo "[mmcv_cuda] installing $1"
  "$PYTHON" -m pip install -q --no-deps --force-reinstall "$1"
  ops_ok
  echo "[mmcv_cuda] mmcv with CUDA ops works"
  echo done > "$WORK/status"
}

if [[ -z "${MMCV_BUILD_ONLY:-}" ]]; then
  if [[ -f "${MMCV_WHEEL[0]}" ]]; then install_wheel "${MMCV_WHEEL[0]}"; exit 0; fi
  if ops_ok 2>/dev/null; then
    echo "[mmcv_cuda] mmcv with CUDA ops works"
    echo done > "$WORK/status"
    exit 0
  fi
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
SDIST=$(sdist)
JOBS=${MAX_JOBS:-$(nproc)}
echo "[mmcv_cuda] building $SDIST for sm_${ARCH/./} with -std=$CXX_STD, $JOBS jobs, torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
src=$(mktemp -d)
tar xzf "$SDIST" -C "$src"
sed -i "s/-std=c++17/-std=$CXX_STD/g" "$src/mmcv-$MMCV_VERSION/setup.py"
with_pkg_resources
start=$(date +%s)
TORCH_CUDA_ARCH_LIST="$ARCH" FORCE_CUDA=1 MMCV_WITH_OPS=1 MAX_JOBS=$JOBS \
  "$PYTHON" -m pip wheel --no-cache-dir --no-build-isolation --no-deps \
  -w "$WORK" "$src/mmcv-$MMCV_VERSION"
echo "[mmcv_cuda] built in $(( $(date +%s) - start )) s"
MMCV_WHEEL=("$WORK"/mmcv-"$MMCV_VERSION"-*.whl)
if [[ -n "${MMCV_BUILD_ONLY:-}" ]]; then echo built > "$WORK/status"; exit 0; fi
install_wheel "${MMCV_WHEEL[0]}"
