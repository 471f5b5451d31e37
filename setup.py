"""Install mmact: ``pip install -e .`` (``tools/setup_env.sh`` builds the full stack)."""
import os
import os.path as osp
import re
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def read_version() -> str:
    text = (ROOT / 'mmact' / 'version.py').read_text()
    return re.search(r"__version__ = '([^']+)'", text).group(1)


def parse_requirements(name: str) -> list:
    """Read one requirements file, following ``-r`` includes."""
    requirements = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split('#')[0].strip()
        if not line:
            continue
        if line.startswith('-r '):
            requirements += parse_requirements(
                str(Path(name).parent / line[3:].strip()))
        else:
            requirements.append(line)
    return requirements


def add_mim_extension() -> None:
    """Put ``configs/``, ``tools/`` and ``model-index.yml`` into
    ``mmact/.mim/``, as mmdet and mmpretrain do for ``mim`` and for scripts
    that look for a package's configs: links in an editable install, copies
    in a wheel or sdist."""
    if {'develop', 'editable_wheel'} & set(sys.argv):
        mode = 'symlink'
    elif {'sdist', 'bdist_wheel', 'build', 'install'} & set(sys.argv):
        mode = 'copy'
    else:
        return
    mim = ROOT / 'mmact' / '.mim'
    mim.mkdir(exist_ok=True)
    for name in ('configs', 'tools', 'model-index.yml'):
        source, target = ROOT / name, mim / name
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if mode == 'symlink':
            os.symlink(osp.relpath(source, mim), target)
        elif source.is_dir():
            shutil.copytree(
                source, target, ignore=shutil.ignore_patterns('__pycache__'))
        else:
            shutil.copyfile(source, target)


add_mim_extension()
setup(
    name='mmact',
    version=read_version(),
    description='Learnable activations (APA, AGLU, APA-SE, FleS, AReLU, IGLU) '
    'for OpenMMLab detection and classification',
    long_description=(ROOT / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    keywords='computer vision, object detection, activation functions',
    packages=find_packages(exclude=('configs', 'tools', 'tests', 'projects')),
    # the C and CUDA kernels, compiled on first use (mmact/ops/cpu_build.py,
    # cuda_build.py); the configs, tools and model index for mim
    # (MANIFEST.in: mmact/.mim)
    package_data={
        'mmact.ops': ['csrc/*.c', 'csrc/*.cpp', 'csrc/*.cu', 'csrc/*.h'],
        # the CPU simulation of the CUDA kernels, for tests
        'mmact.testing.cuda_sim': ['csrc/*.cpp', 'csrc/*.h', 'csrc/*/*/*.h']
    },
    include_package_data=True,
    python_requires='>=3.8',
    license='Apache License 2.0',
    install_requires=parse_requirements('requirements/runtime.txt'),
    extras_require={
        'all': parse_requirements('requirements.txt'),
        'mim': parse_requirements('requirements/mminstall.txt'),
        'optional': parse_requirements('requirements/optional.txt'),
        # .safetensors weights (mmact.checkpoint): optional, no hard requirement
        'safetensors': ['safetensors'],
        'tests': parse_requirements('requirements/tests.txt'),
    },
    zip_safe=False,
)
