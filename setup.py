"""Install mmact: ``pip install -e .`` (``tools/setup_env.sh`` builds the full stack)."""
import re
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


setup(
    name='mmact',
    version=read_version(),
    description='Learnable activations (APA, AGLU, APA-SE, FleS, AReLU, IGLU) '
    'for OpenMMLab detection and classification',
    long_description=(ROOT / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    keywords='computer vision, object detection, activation functions',
    packages=find_packages(exclude=('configs', 'tools', 'tests', 'projects')),
    # the C kernels, compiled on first use (mmact/ops/cpu_build.py)
    package_data={'mmact.ops': ['csrc/*.c', 'csrc/*.cpp', 'csrc/*.h']},
    python_requires='>=3.8',
    license='Apache License 2.0',
    install_requires=parse_requirements('requirements/runtime.txt'),
    extras_require={
        'all': parse_requirements('requirements.txt'),
        'mim': parse_requirements('requirements/mminstall.txt'),
        'optional': parse_requirements('requirements/optional.txt'),
        'tests': parse_requirements('requirements/tests.txt'),
    },
    zip_safe=False,
)
