#!/usr/bin/env bash
# Create (or complete) .venv/ at the repo root with the stack of docs/design.md §5:
# torch 2.14.1 + torchvision 0.29.1, mmcv 2.1.0 with compiled ops, mmengine, mmdet,
# mmpretrain, pycocotools, lvis, test tools, and mmact in editable mode.
# Re-running on a complete .venv only verifies it (seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MMACT_VENV:-$ROOT/.venv}"
SHARED_WHEELS="${MMACT_WHEELS:-$ROOT/../shared/wheels}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
MMCV_VERSION=2.1.0
STAMP="$VENV/.mmact-env-complete"

log() { echo "[setup_env] $*"; }

# The stamp holds a hash of everything that decides the environment's content.
env_hash() {
  cat "$ROOT/tools/setup_env.sh" "$ROOT"/requirements/*.txt | sha256sum | cut -d' ' -f1
}

verify() {
  "$VENV/bin/python" - <<'PY'
import importlib
import torch, torchvision, mmengine, mmcv, mmdet, mmpretrain, pycocotools, lvis, pkg_resources  # noqa
importlib.import_module('mmcv._ext')  # compiled ops load against this torch
import mmact  # noqa
print(f'[setup_env] torch {torch.__version__}, mmcv {mmcv.__version__}, '
      f'mmdet {mmdet.__version__}, mmpretrain {mmpretrain.__version__}, '
      f'mmengine {mmengine.__version__}, mmact {mmact.__version__}')
PY
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(env_hash)" ]] && verify; then
  log "complete .venv at $VENV reused"
  exit 0
fi

start=$(date +%s)
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check)

log "installing torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION"
"${PIP[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
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
    # No wheel for this torch: build the sdist with the C++20 flag torch 2.14 headers need.
    # --no-cache-dir: pip's wheel cache does not key on the torch version.
    log "building mmcv $MMCV_VERSION from source against $tag (about 12 minutes on 2 cores)"
    build=$(mktemp -d)
    "$VENV/bin/python" -m pip download --no-cache-dir --no-deps --no-binary :all: \
      --no-build-isolation -d "$build" "mmcv==$MMCV_VERSION"
    tar xzf "$build/mmcv-$MMCV_VERSION.tar.gz" -C "$build"
    sed -i 's/-std=c++17/-std=c++20/g' "$build/mmcv-$MMCV_VERSION/setup.py"
    MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-2}" "$VENV/bin/python" -m pip wheel --no-cache-dir \
      --no-build-isolation --no-deps -w "$build/dist" "$build/mmcv-$MMCV_VERSION"
    install_mmcv_wheel "$(ls "$build"/dist/mmcv-*.whl)"
    mmcv_ops_ok || { log "mmcv ops still fail to load"; exit 1; }
  fi
fi

log "installing mmengine, mmdet, mmpretrain, datasets tools and test tools"
# torch is left out of this resolve: its metadata asks for setuptools>=77,
# which drops the pkg_resources that mmengine imports at run time.
"${PIP[@]}" -r "$ROOT/requirements/mminstall.txt" -r "$ROOT/requirements/optional.txt" \
  -r "$ROOT/requirements/tests.txt" \
  "mmengine==0.10.7" "mmcv==$MMCV_VERSION" "mmdet==3.3.0" "mmpretrain==1.2.0" "lvis==0.5.3"
"${PIP[@]}" "setuptools<70"
"${PIP[@]}" --no-deps -e "$ROOT"

verify
env_hash > "$STAMP"
log "done in $(( $(date +%s) - start ))s"
