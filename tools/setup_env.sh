#!/usr/bin/env bash
# Create (or complete) a virtual environment with one of mmact's tested stacks
# (docs/design.md §5), mmcv 2.1.0 with compiled ops, mmengine, mmdet,
# mmpretrain, pycocotools, lvis, the test tools, and mmact in editable mode.
#
#   bash tools/setup_env.sh                        # .venv/: torch 2.14.1, numpy 2
#   MMACT_STACK=torch2.1 bash tools/setup_env.sh   # .venv-torch2.1/: torch 2.1.2, numpy < 2
#
# Re-running on a complete environment only verifies it (seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK="${MMACT_STACK:-default}"
case "$STACK" in
  default)
    # torch 2.14's headers need C++20; mmcv 2.1.0's setup.py asks for C++17.
    TORCH_VERSION=2.14.1 TORCHVISION_VERSION=0.29.1 NUMPY_SPEC='numpy' CXX_STD=c++20
    VENV="${MMACT_VENV:-$ROOT/.venv}" ;;
  torch2.1)
    # The stack most mmdet 3.3 users run: prebuilt mmcv 2.1.0 wheels stop at torch 2.1.
    TORCH_VERSION=2.1.2 TORCHVISION_VERSION=0.16.2 NUMPY_SPEC='numpy<2' CXX_STD=c++17
    VENV="${MMACT_VENV:-$ROOT/.venv-torch2.1}" ;;
  *)
    echo "[setup_env] MMACT_STACK=$STACK: use 'default' (torch 2.14.1) or 'torch2.1' (torch 2.1.2, numpy < 2)" >&2
    exit 2 ;;
esac
SHARED_WHEELS="${MMACT_WHEELS:-$ROOT/../shared/wheels}"
# Not PYTHON: make exports its own PYTHON (.venv/bin/python) to this script.
BASE_PYTHON="${MMACT_BASE_PYTHON:-python3.11}"
MMCV_VERSION=2.1.0
STAMP="$VENV/.mmact-env-complete"

log() { echo "[setup_env:$STACK] $*"; }

# The stamp holds a hash of everything that decides the environment's content.
env_hash() {
  { echo "$STACK"; cat "$ROOT/tools/setup_env.sh" "$ROOT"/requirements/*.txt; } | sha256sum | cut -d' ' -f1
}

verify() {
  "$VENV/bin/python" - "$TORCH_VERSION" "$NUMPY_SPEC" <<'PY'
import importlib
import sys
import numpy, torch, torchvision, mmengine, mmcv, mmdet, mmpretrain, pycocotools, lvis, pkg_resources  # noqa
importlib.import_module('mmcv._ext')  # compiled ops load against this torch
import mmact  # noqa
torch_version, numpy_spec = sys.argv[1:]
assert torch.__version__.split('+')[0] == torch_version, torch.__version__
assert numpy_spec != 'numpy<2' or numpy.__version__ < '2', numpy.__version__
print(f'[setup_env] torch {torch.__version__}, numpy {numpy.__version__}, '
      f'mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, '
      f'mmpretrain {mmpretrain.__version__}, mmengine {mmengine.__version__}, '
      f'mmact {mmact.__version__}')
PY
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(env_hash)" ]] && verify; then
  log "complete environment at $VENV reused"
  exit 0
fi

start=$(date +%s)
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$BASE_PYTHON" -m venv "$VENV"; }
# Every install below keeps the stack's torch and numpy: pip would otherwise
# upgrade them to satisfy a newer dependency.
CONSTRAINTS="$VENV/mmact-constraints.txt"
printf 'torch==%s\ntorchvision==%s\n%s\n' "$TORCH_VERSION" "$TORCHVISION_VERSION" "$NUMPY_SPEC" > "$CONSTRAINTS"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -c "$CONSTRAINTS")

log "installing torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION $NUMPY_SPEC"
"${PIP[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" "$NUMPY_SPEC"
# mmengine needs pkg_resources at run time (mmdet::/mmpretrain:: config bases) and
# mmcv's setup.py needs it to build; setuptools>=70 drops parts of it.
"${PIP[@]}" "setuptools<70" ninja wheel

# Replace any mmcv present, then add its dependencies (mmengine among them:
# `import mmcv` needs it, so the ops check below can only run after this).
install_mmcv_wheel() {
  "${PIP[@]}" --no-deps --force-reinstall "$1"
  "${PIP[@]}" "$1" "mmengine==0.10.7"
}

mmcv_ops_ok() { "$VENV/bin/python" -c "import importlib; importlib.import_module('mmcv._ext')" 2>/dev/null; }

if [[ "$("$VENV/bin/python" -c 'import mmcv; print(mmcv.__version__)' 2>/dev/null)" == "$MMCV_VERSION" ]] && mmcv_ops_ok; then
  log "mmcv $MMCV_VERSION with ops already installed"
else
  tag=$("$VENV/bin/python" -c "import sys, torch; print(f\"torch-{torch.__version__.split('+')[0]}-cp{sys.version_info.major}{sys.version_info.minor}\")")
  wheel=$(ls "$SHARED_WHEELS/$tag"/mmcv-"$MMCV_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -n "$wheel" ]]; then
    log "installing mmcv from the prebuilt wheel $wheel"
    install_mmcv_wheel "$wheel"
  fi
  if [[ -z "$wheel" ]] || ! mmcv_ops_ok; then
    # No wheel for this torch: build the sdist with the C++ standard this torch's headers need.
    # --no-cache-dir: pip's wheel cache does not key on the torch version.
    log "building mmcv $MMCV_VERSION from source against $tag with -std=$CXX_STD (about 12 minutes on 2 cores)"
    build=$(mktemp -d)
    "$VENV/bin/python" -m pip download --no-cache-dir --no-deps --no-binary :all: \
      --no-build-isolation -d "$build" "mmcv==$MMCV_VERSION"
    tar xzf "$build/mmcv-$MMCV_VERSION.tar.gz" -C "$build"
    sed -i "s/-std=c++17/-std=$CXX_STD/g" "$build/mmcv-$MMCV_VERSION/setup.py"
    MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-2}" "$VENV/bin/python" -m pip wheel --no-cache-dir \
      --no-build-isolation --no-deps -w "$build/dist" "$build/mmcv-$MMCV_VERSION"
    install_mmcv_wheel "$(ls "$build"/dist/mmcv-*.whl)"
    mmcv_ops_ok || { log "mmcv ops still fail to load"; exit 1; }
  fi
fi

log "installing mmengine, mmdet, mmpretrain, datasets tools and test tools"
# The constraints pin torch; its own metadata would ask for setuptools>=77,
# which drops the pkg_resources that mmengine imports at run time.
"${PIP[@]}" -r "$ROOT/requirements/mminstall.txt" -r "$ROOT/requirements/optional.txt" \
  -r "$ROOT/requirements/tests.txt" -r "$ROOT/requirements/docs.txt" \
  "mmengine==0.10.7" "mmcv==$MMCV_VERSION" "mmdet==3.3.0" "mmpretrain==1.2.0" "lvis==0.5.3"
"${PIP[@]}" "setuptools<70"
# .ci/run sets up both stacks at once (make -j2): the editable install writes
# mmact.egg-info/ and mmact/.mim/ in the checkout, so one install at a time
if command -v flock >/dev/null; then
  flock "$ROOT/setup.py" "${PIP[@]}" --no-deps -e "$ROOT"
else
  "${PIP[@]}" --no-deps -e "$ROOT"
fi

verify
env_hash > "$STAMP"
log "done in $(( $(date +%s) - start ))s"
