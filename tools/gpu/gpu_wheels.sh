#!/usr/bin/env bash
# Download, on a machine with a package index, what gpu_check.sh needs on a
# bare CUDA machine without one (Python 3.12 with torch, Triton, numpy, scipy,
# matplotlib, opencv-headless already there): the mmcv 2.1.0 sdist that
# build_mmcv_cuda.sh compiles, and wheels of mmengine, mmdet, mmpretrain,
# pycocotools, lvis and their small pure-Python dependencies.
# Usage: bash tools/gpu/gpu_wheels.sh [DIR]   (default .whl)
#        PYTHON picks the interpreter that downloads (default .venv/bin/python).
# On the CUDA machine, gpu_check.sh installs DIR's wheels with --no-deps.
# mmpretrain imports modelindex (PyPI's model-index; 'modelindex' there is an
# empty placeholder) and importlib_metadata (>= 8.8 needs lazy_importer on
# Python 3.12).
set -euo pipefail
DIR=${1:-.whl}
PY=${GPU_PYTHON_VERSION:-3.12}
mkdir -p "$DIR"
# The sdist's metadata step needs pkg_resources (setuptools < 70) and wheel,
# as tools/setup_env.sh installs them into .venv/.
PYTHON=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
PIP=("$PYTHON" -m pip download --disable-pip-version-check --no-deps -d "$DIR")
"${PIP[@]}" --no-binary :all: --no-build-isolation mmcv==2.1.0
"${PIP[@]}" --only-binary :all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  mmengine==0.10.7 mmdet==3.3.0 mmpretrain==1.2.0 lvis==0.5.3 \
  pycocotools shapely terminaltables addict yapf termcolor mat4py model-index \
  ordered-set platformdirs tomli 'importlib_metadata<8.8'
# mmcv's setup.py imports pkg_resources (gone from setuptools >= 81).
"$PYTHON" -m pip download --disable-pip-version-check --no-deps -d "$DIR/build" \
  --only-binary :all: "setuptools<70"
ls -la "$DIR" "$DIR/build"
