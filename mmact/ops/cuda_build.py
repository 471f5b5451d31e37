"""Build, cache and load the CUDA kernels of APA / AGLU.

``csrc/apa_cuda.cu`` holds the CUDA kernels of the operators that mmact's CPU
extension defines (:mod:`mmact.ops.cpu_build`: ``mmact::apa`` / ``aglu``,
their backward and the backward at a rebuilt input) and registers them for
CUDA tensors (``TORCH_LIBRARY_IMPL(mmact, CUDA)``); the element math is the
C kernels' (``csrc/apa_math.h``). It is compiled by nvcc into a library of
its own, loaded beside the CPU extension (whose autograd node and Python
entries reach the kernels through torch's dispatcher), when
``MMACT_CUDA_KERNELS=1`` (:mod:`mmact.ops.backends`) and a call first meets
a CUDA tensor.

* **Toolkit.** ``$CUDA_HOME`` (or ``$CUDA_PATH``) when set; else the ``nvcc``
  on ``PATH`` followed to its toolkit, through symlinks and wrapper scripts
  (whose text names the real ``nvcc``); else ``/usr/local/cuda`` and
  ``/usr/local/cuda-*``, newest first. A toolkit has ``bin/nvcc`` and
  ``include/cuda_runtime.h``; its major version must be torch's CUDA major
  version.
* **Architectures.** The local GPUs' (``sm_XY`` each) plus PTX of the
  highest, which newer GPUs compile at load; ``--arch`` chooses others
  (``python -m mmact.ops.cuda_build --arch 8.0 9.0``, a prebuild for a
  cluster). A GPU newer than the toolkit (sm_120 with CUDA 12.4) is served
  by the PTX of nvcc's highest architecture below it, compiled by the
  driver at load (:func:`build_archs`); one older than nvcc's lowest (CUDA
  13 has no ``sm_70``, V100) runs the Triton row.
* **Cache.** ``$MMACT_CACHE_DIR`` (:func:`mmact.ops.cpu_build.default_cache_dir`)
  in a folder named by a build key (the sources with their headers, nvcc's
  version, torch's version, CUDA version, install and C++ ABI, the flags)
  and the architectures; a load takes any finished build of its key that
  covers the local GPUs. One build at a time per folder
  (:func:`mmact.ops.cpu_build.build_lock`: the 8 ranks of a job starting
  together build once; a build that died leaves no lock); the library is
  written under a temporary name and renamed when whole.

Anywhere the kernels cannot be built or loaded (no toolkit, another major
version, a GPU older than nvcc's architectures, a failed build),
:func:`library` returns None after one log line saying why, and CUDA
tensors run the Triton row. A launch that finds no code for its GPU (a
driver that cannot compile the PTX) switches the kernels off with one
warning naming the architecture, and the call runs the Triton row
(:func:`unserved`).
"""
import argparse
import contextlib
import glob
import hashlib
import json
import logging
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log

from . import backends
from .cpu_build import (CSRC, build_lock, default_cache_dir, load_extension,
                        read_source, torch_identity)

__all__ = [
    'SOURCE', 'SOURCES', 'Toolkit', 'find_toolkit', 'check_toolkit',
    'parse_arch', 'local_archs', 'nvcc_archs', 'build_archs', 'nvcc_flags',
    'build_key', 'covers', 'build_library', 'library', 'unserved', 'main'
]

#: The CUDA translation unit of APA / AGLU, in
#: :data:`mmact.ops.cpu_build.CSRC`.
SOURCE = 'apa_cuda.cu'
#: Every CUDA translation unit of the library (FleS's pixel passes too).
SOURCES = (SOURCE, 'fles_cuda.cu')
_STEM = 'mmact_cuda'
_RELEASE = re.compile(r'release (\d+)\.(\d+)')
_NVCC_PATH = re.compile(r'(/[^\s"\'`;|&]+)/bin/nvcc\b')


class Toolkit(NamedTuple):
    """A CUDA toolkit: its root, its nvcc, and nvcc's release and version
    line."""
    home: str
    nvcc: str
    version: Tuple[int, int]
    version_line: str


def _is_toolkit(home: str) -> bool:
    return (os.access(osp.join(home, 'bin', 'nvcc'), os.X_OK)
            and osp.isfile(osp.join(home, 'include', 'cuda_runtime.h')))


def _wrapped_homes(nvcc: str) -> List[str]:
    """Toolkits an ``nvcc`` on PATH stands for: its real path's, or those
    its text names when it is a wrapper script."""
    real = osp.realpath(nvcc)
    homes = [osp.dirname(osp.dirname(real))]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if osp.getsize(real) < 65536:
            with open(real) as f:
                text = f.read()
            homes += [osp.dirname(osp.dirname(osp.realpath(m + '/bin/nvcc')))
                      for m in _NVCC_PATH.findall(text)]
    return homes


def _version_key(home: str) -> Tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r'\d+', osp.basename(home)))


def _nvcc_version(nvcc: str) -> Tuple[Tuple[int, int], str]:
    out = subprocess.run([nvcc, '--version'],
                         capture_output=True,
                         text=True,
                         timeout=60).stdout
    match = _RELEASE.search(out)
    if match is None:
        raise RuntimeError(f'{nvcc} --version names no release: {out[-200:]}')
    line = next(ln for ln in out.splitlines() if 'release' in ln)
    return (int(match.group(1)), int(match.group(2))), line.strip()


def find_toolkit() -> Toolkit:
    """The CUDA toolkit to build with (see the module's docstring).

    Raises:
        RuntimeError: ``CUDA_HOME`` / ``CUDA_PATH`` set to a folder that is
            not a toolkit (named), or no toolkit found.
    """
    for var in ('CUDA_HOME', 'CUDA_PATH'):
        home = os.environ.get(var)
        if home:
            if not _is_toolkit(home):
                raise RuntimeError(f'{var}={home} is not a CUDA toolkit (no '
                                   'bin/nvcc or include/cuda_runtime.h)')
            break
    else:
        nvcc = shutil.which('nvcc')
        candidates = _wrapped_homes(nvcc) if nvcc else []
        candidates += ['/usr/local/cuda'] + sorted(
            glob.glob('/usr/local/cuda-*'), key=_version_key, reverse=True)
        home = next((h for h in candidates if _is_toolkit(h)), None)
        if home is None:
            raise RuntimeError('no CUDA toolkit found (nvcc on PATH, '
                               '/usr/local/cuda*); set CUDA_HOME')
    home = osp.realpath(home)
    nvcc = osp.join(home, 'bin', 'nvcc')
    version, line = _nvcc_version(nvcc)
    return Toolkit(home, nvcc, version, line)


def check_toolkit(toolkit: Toolkit) -> None:
    """Refuse a toolkit whose major version is not torch's CUDA major
    version (kernels of another CUDA major version need another runtime).

    Raises:
        RuntimeError: naming both versions, or a torch without CUDA.
    """
    if not torch.version.cuda:
        raise RuntimeError(f'torch {torch.__version__} is built without CUDA')
    torch_major = int(torch.version.cuda.split('.')[0])
    if toolkit.version[0] != torch_major:
        found = '.'.join(map(str, toolkit.version))
        raise RuntimeError(
            f'the CUDA toolkit at {toolkit.home} is CUDA {found}, torch '
            f'{torch.__version__} is built for CUDA {torch.version.cuda}: '
            f'set CUDA_HOME to a CUDA {torch_major}.x toolkit')


def parse_arch(arch: str) -> Tuple[int, int]:
    """``'9.0'`` (or ``'90'``, ``'sm_90'``) as (9, 0).

    Raises:
        ValueError: naming the value.
    """
    match = re.fullmatch(r'(?:sm_)?(\d+)\.?(\d)', arch.strip())
    if match is None:
        raise ValueError(f'arch {arch!r}: use a compute capability such as '
                         '8.0 or 9.0')
    return int(match.group(1)), int(match.group(2))


def local_archs() -> List[Tuple[int, int]]:
    """The compute capabilities of the visible GPUs, sorted.

    Raises:
        RuntimeError: no GPU is visible.
    """
    if not torch.cuda.is_available():
        raise RuntimeError('no GPU is visible: name the architectures '
                           '(--arch 8.0 9.0)')
    return sorted({
        torch.cuda.get_device_capability(i)
        for i in range(torch.cuda.device_count())
    })


def nvcc_archs(toolkit: Toolkit) -> List[Tuple[int, int]]:
    """The architectures the toolkit's nvcc compiles for."""
    out = subprocess.run([toolkit.nvcc, '--list-gpu-arch'],
                         capture_output=True,
                         text=True,
                         timeout=60).stdout
    return sorted({(int(m[:-1]), int(m[-1]))
                   for m in re.findall(r'compute_(\d+)\b', out)})


def build_archs(wanted: Sequence[Tuple[int, int]],
                toolkit: Toolkit) -> List[Tuple[int, int]]:
    """The architectures to compile for so that every ``wanted`` GPU runs
    the library: each one nvcc has; for one it lacks, the highest it has of
    the same major version below it (whose SASS runs there), else the
    highest below it (its PTX, of the build's highest architecture, is
    compiled by the driver at load: a GPU newer than the toolkit, e.g.
    sm_120 with CUDA 12.4's compute_90).

    Args:
        wanted: compute capabilities, e.g. ``[(8, 0), (12, 0)]``.
        toolkit: the toolkit (its ``nvcc --list-gpu-arch``).

    Raises:
        RuntimeError: a GPU older than nvcc's lowest architecture (CUDA 13
            has no sm_70, V100), or one the build's SASS and PTX cannot
            both serve; named, with nvcc's range.
    """
    known = nvcc_archs(toolkit)
    built = set()
    for arch in wanted:
        below = [a for a in known if a <= arch]
        same_major = [a for a in below if a[0] == arch[0]]
        if below:
            built.add(max(same_major or below))
    built = sorted(built)
    missing = [
        a for a in wanted if not (built and covers(_arch_tag(built), a))
    ]
    if missing:
        names = ', '.join(f'{a[0]}.{a[1]}' for a in missing)
        release = '.'.join(map(str, toolkit.version))
        lowest = f'{known[0][0]}.{known[0][1]}' if known else '?'
        raise RuntimeError(
            f'nvcc {release} cannot build for {names} (its lowest is '
            f'{lowest}; CUDA 13 dropped sm_70, V100): CUDA tensors run the '
            'Triton row there')
    return built


def _cxx_standard() -> str:
    # torch's own extension builder moved from C++17 to C++20 with torch's
    # headers
    version = tuple(int(v) for v in re.findall(r'\d+', torch.__version__)[:2])
    return '-std=c++20' if version >= (2, 6) else '-std=c++17'


def nvcc_flags(archs: Sequence[Tuple[int, int]]) -> List[str]:
    """The compile flags of a build for ``archs``: torch's (its half
    types without CUDA's operators, its C++ ABI and standard), SASS for each
    architecture and PTX for the highest."""
    flags = [
        _cxx_standard(), '-O3', '--expt-relaxed-constexpr',
        '-D__CUDA_NO_HALF_OPERATORS__', '-D__CUDA_NO_HALF_CONVERSIONS__',
        '-D__CUDA_NO_BFLOAT16_CONVERSIONS__', '-D__CUDA_NO_HALF2_OPERATORS__',
        f'-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}'
    ]
    for major, minor in sorted(archs):
        flags.append(f'-gencode=arch=compute_{major}{minor},'
                     f'code=sm_{major}{minor}')
    major, minor = max(archs)
    flags.append(f'-gencode=arch=compute_{major}{minor},'
                 f'code=compute_{major}{minor}')
    return flags


def build_key(source: str, toolkit: Toolkit, cuda: Optional[str] = None,
              flags: Optional[Sequence[str]] = None) -> str:
    """Hex digest naming one build of ``source`` (the architectures aside:
    they name the folder, see :func:`build_library`).

    Args:
        source: the text compiled (:func:`mmact.ops.cpu_build.read_source`).
        toolkit: the toolkit (its nvcc version line is keyed).
        cuda: torch's CUDA version (default ``torch.version.cuda``).
        flags: the flags besides the architectures (default
            :func:`nvcc_flags`' for one architecture, without it).
    """
    if flags is None:
        flags = [f for f in nvcc_flags([(9, 0)]) if '-gencode' not in f]
    fields = dict(
        source=hashlib.sha256(source.encode()).hexdigest(),
        nvcc=toolkit.version_line,
        cuda=torch.version.cuda if cuda is None else cuda,
        flags=list(flags),
        torch=torch_identity())
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _arch_tag(archs: Sequence[Tuple[int, int]]) -> str:
    return '-'.join(f'{a}{b}' for a, b in sorted(archs))


def covers(tag: str, capability: Tuple[int, int]) -> bool:
    """Whether a build for the architectures ``tag`` (a folder's, e.g.
    ``'80-90'``) runs on a GPU of ``capability``: SASS of its major
    version and a lower or equal minor one, or the PTX (of the highest
    architecture) at or below it."""
    archs = [parse_arch(a) for a in tag.split('-')]
    return (any(a[0] == capability[0] and a[1] <= capability[1]
                for a in archs) or max(archs) <= capability)


def _link_flags() -> List[str]:
    lib = osp.join(osp.dirname(torch.__file__), 'lib')
    return [
        '-shared', '-Xcompiler', '-fPIC', '-cudart', 'shared', f'-L{lib}',
        f'-Xlinker', f'-rpath,{lib}', '-lc10', '-lc10_cuda', '-ltorch_cpu',
        '-ltorch_cuda'
    ]


def _includes(source_dir: str) -> List[str]:
    include = osp.join(osp.dirname(torch.__file__), 'include')
    return [
        f'-I{source_dir}', f'-I{include}',
        f'-I{osp.join(include, "torch", "csrc", "api", "include")}'
    ]


def build_library(archs: Optional[Sequence[Tuple[int, int]]] = None,
                  cache_dir: Optional[str] = None,
                  source_dir: str = CSRC) -> str:
    """Compile :data:`SOURCES` with nvcc unless the cache holds a build of
    the same key that covers ``archs``; returns the library's path (not
    loaded: :func:`library` loads it).

    Args:
        archs: compute capabilities, e.g. ``[(8, 0), (9, 0)]``; default
            :func:`local_archs`.
        cache_dir: default :func:`mmact.ops.cpu_build.default_cache_dir`.
        source_dir: default :data:`mmact.ops.cpu_build.CSRC`.

    Raises:
        RuntimeError: no toolkit, one of another major version, an
            architecture nvcc lacks, no GPU and no ``archs``, or nvcc
            failed (its last lines).
    """
    toolkit = find_toolkit()
    check_toolkit(toolkit)
    wanted = sorted(set(archs or local_archs()))
    key = build_key(''.join(read_source(s, source_dir) for s in SOURCES),
                    toolkit)
    cache = cache_dir or default_cache_dir()
    prefix = osp.join(cache, f'{_STEM}_{key[:16]}_')

    def finished() -> Optional[str]:
        for folder in sorted(glob.glob(prefix + '*')):
            tag = folder[len(prefix):]
            if (osp.exists(osp.join(folder, 'mmact-complete'))
                    and all(covers(tag, a) for a in wanted)):
                return osp.join(folder, f'{_STEM}.so')
        return None

    built = finished()
    if built is not None:
        return built
    archs = build_archs(wanted, toolkit)
    build_dir = prefix + _arch_tag(archs)
    os.makedirs(build_dir, exist_ok=True)
    with build_lock(build_dir):
        built = finished()  # another process built it meanwhile
        if built is not None:
            return built
        target = osp.join(build_dir, f'{_STEM}.so')
        partial = f'{target}.{os.getpid()}.tmp'
        command = [
            toolkit.nvcc, *nvcc_flags(archs), *_includes(source_dir),
            *_link_flags(), '-o', partial,
            *(osp.join(source_dir, s) for s in SOURCES)
        ]
        cxx = shutil.which(os.environ.get('CXX', ''))
        if cxx:
            command[1:1] = ['-ccbin', cxx]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout)[-1500:]
                raise RuntimeError(f'nvcc failed (exit {done.returncode}): '
                                   f'{tail}')
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
        open(osp.join(build_dir, 'mmact-complete'), 'w').close()
    release = '.'.join(map(str, toolkit.version))
    names = ', '.join(f'sm_{a}{b}' for a, b in archs)
    ptx = 'compute_{}{}'.format(*max(archs))
    jit = ''.join(f'; sm_{a}{b} runs the PTX, compiled by the driver at load'
                  for a, b in wanted if (a, b) > max(archs))
    print_log(
        f'mmact: built the CUDA kernels ({names} + {ptx} PTX{jit}) with nvcc '
        f'{release} in {time.perf_counter() - start:.1f} s into {build_dir}',
        logger='current',
        level=logging.INFO)
    return target


_lock = threading.Lock()
_loaded: Dict[str, Optional[str]] = {}


def library() -> Optional[str]:
    """The path of the loaded CUDA library (its kernels registered), built
    on first use for the local GPUs (:func:`build_library`), once per
    process; None when ``MMACT_CUDA_KERNELS`` is off, or after one log line
    (warning) saying why it cannot be built or loaded: CUDA tensors then
    run the Triton row."""
    if not backends.settings().cuda_kernels:
        return None
    if _STEM in _loaded:
        return _loaded[_STEM]
    with _lock:
        if _STEM not in _loaded:
            try:
                if load_extension() is None:  # it defines the operators
                    raise RuntimeError('the CPU extension, which holds the '
                                       'operators, could not be built')
                path = build_library()
                torch.ops.load_library(path)
                _loaded[_STEM] = path
            except Exception as e:  # toolkit / nvcc / loader problems
                print_log(
                    f'mmact: the CUDA kernels are not used '
                    f'({type(e).__name__}: {str(e)[:400]}); APA / AGLU on '
                    'CUDA tensors run the Triton row',
                    logger='current',
                    level=logging.WARNING)
                _loaded[_STEM] = None
    return _loaded[_STEM]


#: cudaGetErrorString's words for a launch that finds no code the GPU runs:
#: no SASS for it and no PTX below it (cudaErrorNoKernelImageForDevice), or
#: a PTX the driver does not compile (newer than the driver, JIT failed,
#: missing or disabled).
_UNSERVED = ('no kernel image is available', 'unsupported toolchain',
             'PTX JIT compil')


def unserved(error: BaseException, device: torch.device) -> bool:
    """Whether ``error``, raised by a call of the CUDA kernels on
    ``device``, says the library holds no code that GPU runs (a GPU newer
    than the toolkit whose driver cannot compile the PTX, or a prebuilt
    library for other GPUs). If so the CUDA kernels are switched off for the
    process with one warning naming the GPU's architecture, the ops' routes
    are dropped (:func:`mmact.ops.backends.on_change`), and the caller runs
    the call again, which takes the Triton row.

    Args:
        error: The exception a call of the CUDA kernels raised.
        device: The device of the call's input.
    """
    if device.type != 'cuda' or not isinstance(error, RuntimeError):
        return False
    text = str(error)
    if not any(words in text for words in _UNSERVED):
        return False
    with _lock:
        switched = _loaded.get(_STEM) is not None
        _loaded[_STEM] = None
    if switched:
        major, minor = torch.cuda.get_device_capability(device)
        warnings.warn(
            f'mmact: the CUDA kernels hold no code that {device} (sm_{major}'
            f'{minor}, compute capability {major}.{minor}) runs '
            f'({text.splitlines()[0][:200]}); APA / AGLU and FleS run the '
            'Triton row in this process')
        backends.refresh()
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m mmact.ops.cuda_build [--arch 8.0 9.0]``: build the CUDA
    kernels into the cache (for the local GPUs by default), e.g. once
    before the ranks of a job start; prints the library's path."""
    parser = argparse.ArgumentParser(
        prog='python -m mmact.ops.cuda_build',
        description='Build the CUDA kernels of APA / AGLU into the cache '
        '($MMACT_CACHE_DIR, default ~/.cache/mmact).')
    parser.add_argument(
        '--arch',
        nargs='+',
        metavar='X.Y',
        help='compute capabilities to build for (default: the local GPUs)')
    parser.add_argument(
        '--cache-dir', help='default $MMACT_CACHE_DIR or ~/.cache/mmact')
    args = parser.parse_args(argv)
    try:
        archs = [parse_arch(a) for a in args.arch] if args.arch else None
        path = build_library(archs, args.cache_dir)
    except (RuntimeError, ValueError) as e:
        print(f'mmact.ops.cuda_build: {e}', file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
