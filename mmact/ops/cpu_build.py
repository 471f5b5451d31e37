"""Build, cache and load mmact's CPU extension for the host's vector ISA.

The fused CPU kernels are C files in the package (``mmact/ops/csrc``:
``apa.c`` for APA / AGLU, ``fles.c`` for FleS's pixel passes, their
headers, ``prelude.h`` for threads and ``approx.h`` for the polynomial
functions). One torch C++ extension compiles them in: ``apa_op.cpp`` and
``fles_op.cpp`` register the torch operators (``torch.ops.mmact.*``, each
with a C++ autograd node or none where a Python backward calls it) and
``module.cpp`` a Python module with a native-cost entry per operator
(:func:`extension`). Everything a CPU kernel does is reached through it.

* **ISA.** The extension is built for the best vector ISA the running CPU
  supports (``avx512`` > ``avx2`` > ``portable``, read from the CPU flags);
  ``MMACT_CPU_ISA`` selects a lower one (e.g. to compare builds).
* **Cache.** Builds live in ``$MMACT_CACHE_DIR`` (default
  ``~/.cache/mmact``; :func:`default_cache_dir`) in a folder named by a
  *build key*: a hash of the sources (their local headers inlined), the
  compiler flags, the C++ compiler's version, the CPU's model name and
  flags, the torch version, install and C++ ABI, and the Python ABI. A home
  directory shared by machines with different CPUs therefore holds one
  build per CPU. A finished build is marked
  (``mmact-complete``) and later imported directly, without torch's
  extension builder (whose import prints a notice when it finds a CUDA
  toolkit but no GPU); a new build logs, once, what it built and how long
  it took (about 25 s on two cores, most of it torch's headers). One
  process builds at a time (:func:`build_lock`), the others then load its
  build.
* **Threads.** Kernels split their ranges on OpenMP threads (``-fopenmp``:
  the extension shares the ``libgomp`` runtime, and so the thread team, that
  torch already loaded), as many as ``torch.get_num_threads()``.
* **Compiler.** ``$CXX`` (default ``c++``) must be a gcc: the flags are
  gcc's, and clang's OpenMP runtime would be a second thread pool; clang is
  refused with a message naming ``CXX``. ``ninja`` is a runtime
  requirement (torch's builder).

Nothing here is required: without a compiler, on other platforms than
Linux, or with the C kernels switched off (``MMACT_DISABLE_CPU_KERNEL=1``,
:func:`mmact.ops.backends.configure`), :func:`extension` returns None (a
failed build warns once) and the ops use their torch path.
"""
import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import logging
import os
import os.path as osp
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from functools import lru_cache
from types import ModuleType
from typing import (Dict, FrozenSet, Iterator, List, Optional, Sequence,
                    Tuple, Union)

import torch
from mmengine.logging import print_log

from . import backends

__all__ = [
    'ISAS', 'CSRC', 'SOURCES', 'cpu_model', 'cpu_flags', 'supported_isas',
    'host_isa', 'read_source', 'compiler_flags', 'torch_identity',
    'build_key', 'default_cache_dir', 'build_lock', 'build_extension',
    'load_extension', 'extension'
]

#: Vector ISAs a kernel can be built for, best first.
ISAS = ('avx512', 'avx2', 'portable')

# CPU flags (as in /proc/cpuinfo) each ISA build needs, and its compiler
# flags. The AVX-512 build asks for 512-bit vectors (gcc's generic tuning
# would stay at 256 bits).
_ISA_CPU_FLAGS = {
    'avx512':
    frozenset({'avx512f', 'avx512dq', 'avx512bw', 'avx512vl', 'avx2', 'fma'}),
    'avx2':
    frozenset({'avx2', 'fma'}),
    'portable':
    frozenset(),
}
_ISA_CC_FLAGS = {
    'avx512': [
        '-mavx512f', '-mavx512dq', '-mavx512bw', '-mavx512vl', '-mavx2',
        '-mfma', '-mprefer-vector-width=512'
    ],
    'avx2': ['-mavx2', '-mfma'],
    'portable': [],
}
# -fno-tree-pre: partial redundancy elimination would specialise the
# polynomial code for clamped arguments into extra divisions and blends
# (3x slower gate loops on x86). torch's builder adds -fPIC, -shared and the
# C++ standard.
_BASE_FLAGS = [
    '-O3', '-fopenmp', '-fopenmp-simd', '-fno-math-errno',
    '-fno-trapping-math', '-ffp-contract=fast', '-fno-tree-pre'
]
#: The kernels' C and C++ sources (package data).
CSRC = osp.join(osp.dirname(osp.abspath(__file__)), 'csrc')
#: The extension's translation units, in :data:`CSRC`.
SOURCES = ('apa_op.cpp', 'fles_op.cpp', 'module.cpp')
#: The extension's module name (its file stem).
_STEM = 'mmact_cpu'
_INCLUDE = re.compile(r'^#include ([<"])([\w./]+)[>"]$', re.MULTILINE)


def _find(file: str, folders: Sequence[str]) -> Optional[str]:
    return next((f for f in folders if osp.isfile(osp.join(f, file))), None)


def read_source(name: str, source_dir: Union[str, Sequence[str]] = CSRC) -> str:
    """The text of ``source_dir/name.c`` (or of ``source_dir/name`` when
    ``name`` has a suffix) with its local headers inlined (each once;
    ``#line`` keeps compiler messages pointing at the files): what the build
    key hashes. Local headers are every ``#include "..."`` and the
    ``#include <...>`` found in the source folders (stand-ins for a
    library's headers, found before it through the include path).

    Args:
        name: a C file's stem (``'apa'``, ``'fles'``) or a file name
            (``'apa_op.cpp'``).
        source_dir: where its files are, or several folders searched in
            order (as the include path is); default :data:`CSRC`.
    """
    folders = [source_dir] if isinstance(source_dir, str) else source_dir

    def inline(file: str, seen: set) -> str:
        folder = _find(file, folders) or folders[0]
        with open(osp.join(folder, file)) as f:
            text = f.read()
        path = f'{osp.basename(folder)}/{file}'  # not the checkout's
        out, pos, line = [f'#line 1 "{path}"\n'], 0, 1
        for m in _INCLUDE.finditer(text):
            header = m.group(2)
            if m.group(1) == '<' and _find(header, folders) is None:
                continue  # a system or torch header
            out.append(text[pos:m.start()])
            line += text.count('\n', pos, m.end()) + 1
            if header not in seen:
                seen.add(header)
                out.append(inline(header, seen))
                out.append(f'\n#line {line} "{path}"')
            pos = m.end()
        out.append(text[pos:])
        return ''.join(out)

    return inline(name if '.' in name else f'{name}.c', set())


def _cpuinfo() -> Dict[str, str]:
    info: Dict[str, str] = {}
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if not line.strip():
                    break  # first processor only
                key, _, value = line.partition(':')
                info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else ``platform``)."""
    info = _cpuinfo()
    return (info.get('model name') or info.get('Model')
            or platform.processor() or platform.machine() or 'unknown')


@lru_cache(maxsize=1)
def cpu_flags() -> FrozenSet[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; else torch's view)."""
    info = _cpuinfo()
    flags = info.get('flags') or info.get('Features')
    if flags:
        return frozenset(flags.split())
    cap = torch.backends.cpu.get_cpu_capability()  # 'AVX2', 'AVX512', ...
    if cap == 'AVX512':
        return _ISA_CPU_FLAGS['avx512']
    return _ISA_CPU_FLAGS['avx2'] if cap == 'AVX2' else frozenset()


def supported_isas(flags: Optional[FrozenSet[str]] = None) -> List[str]:
    """ISAs a CPU with ``flags`` (default: this one) can run, best first."""
    if platform.machine().lower() not in ('x86_64', 'amd64'):
        return ['portable']
    flags = cpu_flags() if flags is None else flags
    return [isa for isa in ISAS if _ISA_CPU_FLAGS[isa] <= flags]


def host_isa() -> str:
    """The ISA kernels are built for: the best one this CPU runs, or
    ``$MMACT_CPU_ISA`` when set (it must be one the CPU runs)."""
    supported = supported_isas()
    wanted = os.environ.get('MMACT_CPU_ISA', '')
    if not wanted:
        return supported[0]
    if wanted not in supported:
        raise ValueError(f'MMACT_CPU_ISA={wanted!r} is not supported here; '
                         f'accepted values on this CPU: {supported}')
    return wanted


def _compiler(var: str = 'CC',
              default: str = 'cc') -> Optional[Tuple[str, str]]:
    """(path, version line) of the compiler ``$var`` (default ``default``),
    or None."""
    path = shutil.which(os.environ.get(var, default))
    if path is None:
        return None
    try:
        out = subprocess.run([path, '--version'],
                             capture_output=True,
                             text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path, (out.splitlines() or ['?'])[0]


def _gcc(var: str, default: str) -> Tuple[str, str]:
    """:func:`_compiler` of ``$var``, required to be a gcc: the build flags
    are gcc's (``-fno-tree-pre``), and clang's OpenMP runtime (libomp)
    would be a second thread pool beside torch's libgomp.

    Raises:
        RuntimeError: naming ``var``, when there is no such compiler or it
            is clang.
    """
    name = os.environ.get(var, default)
    compiler = _compiler(var, default)
    if compiler is None:
        raise RuntimeError(f'no compiler {var}={name}')
    if 'clang' in compiler[1]:
        gnu = 'gcc' if var == 'CC' else 'g++'
        raise RuntimeError(f'{var}={name} is clang ({compiler[1]}); the '
                           f'kernels are built with gcc (its flags, torch\'s '
                           f'OpenMP runtime): set {var}={gnu}')
    return compiler


def compiler_flags(isa: str) -> List[str]:
    """The compiler flags of a build for ``isa`` (one of :data:`ISAS`),
    besides those torch's builder adds (``-fPIC``, ``-shared``, the C++
    standard)."""
    return _BASE_FLAGS + _ISA_CC_FLAGS[isa]


def torch_identity() -> list:
    """The torch a build is for, as build keys hold it: its version,
    install folder and C++ ABI (two installs of one version may differ in
    ABI: conda, pip)."""
    return [
        torch.__version__,
        osp.dirname(torch.__file__),
        bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    ]


def build_key(sources: Sequence[str],
              isa: str,
              compiler: Tuple[str, str],
              model: Optional[str] = None,
              flags: Optional[FrozenSet[str]] = None,
              cc_flags: Optional[Sequence[str]] = None) -> str:
    """Hex digest naming one build of ``sources`` on one machine, torch and
    Python.

    Args:
        sources: the texts compiled (from :func:`read_source`).
        isa: one of :data:`ISAS`.
        compiler: ``(path, version line)`` of the compiler.
        model: CPU model name (default: this CPU's).
        flags: CPU flags (default: this CPU's).
        cc_flags: compiler flags (default: :func:`compiler_flags` of
            ``isa``).
    """
    if isa not in ISAS:
        raise ValueError(f'isa must be one of {ISAS}, got {isa!r}')
    fields = dict(
        sources=[hashlib.sha256(s.encode()).hexdigest() for s in sources],
        isa=isa,
        cc_flags=list(compiler_flags(isa) if cc_flags is None else cc_flags),
        compiler=list(compiler),
        machine=platform.machine(),
        cpu_model=cpu_model() if model is None else model,
        cpu_flags=sorted(cpu_flags() if flags is None else flags),
        torch=torch_identity(),
        # the library is a CPython extension: one per Python ABI too
        python=sys.implementation.cache_tag)
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def default_cache_dir() -> str:
    """Where builds are cached: ``$MMACT_CACHE_DIR``, default
    ``~/.cache/mmact``."""
    return os.environ.get('MMACT_CACHE_DIR',
                          osp.join(osp.expanduser('~'), '.cache', 'mmact'))


@contextlib.contextmanager
def build_lock(folder: str) -> Iterator[None]:
    """Hold the build lock of a cache folder: one process builds into it at
    a time, the others wait for it (then find its build). An exclusive
    ``flock`` on ``folder/mmact-build.lock``, which the system releases
    when its holder exits, however: a build that dies leaves no lock that
    blocks the next run (the file left behind locks nothing).

    Args:
        folder: an existing build folder.
    """
    with open(osp.join(folder, 'mmact-build.lock'), 'a') as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build_path() -> str:
    """``PATH`` for a build: as it is, plus the running Python's scripts
    directory when ninja is not on it (pip's ninja in a virtualenv that was
    not activated; torch's extension builder looks for ninja on PATH)."""
    path = os.environ.get('PATH', '')
    scripts = osp.dirname(sys.executable)
    if (shutil.which('ninja', path=path) is None
            and shutil.which('ninja', path=scripts) is not None):
        path = os.pathsep.join(p for p in (path, scripts) if p)
    return path


def build_extension(isa: Optional[str] = None,
                    cache_dir: Optional[str] = None,
                    source_dir: str = CSRC,
                    *,
                    stem: str = _STEM,
                    sources: Sequence[str] = SOURCES,
                    include_dirs: Sequence[str] = ()) -> ModuleType:
    """Compile the extension (:data:`SOURCES`) with
    :func:`torch.utils.cpp_extension.load` unless the cache has it, and
    import it (its operators appear under ``torch.ops.mmact``); or another
    library of the same flags, named by ``stem``, of ``sources``.

    Args:
        isa: one of :data:`ISAS`; default :func:`host_isa`.
        cache_dir: default ``$MMACT_CACHE_DIR`` or ``~/.cache/mmact``.
        source_dir: default :data:`CSRC`.
        stem: the library's module name (its cache folder's prefix).
        sources: its translation units, in ``include_dirs`` or
            ``source_dir``.
        include_dirs: folders searched before ``source_dir`` (and torch's
            headers) for the sources and their headers.

    Returns:
        The extension module.

    Raises:
        RuntimeError: not Linux, no C++ compiler or a clang (naming
            ``CXX``), or the build failed.
    """
    if platform.system() != 'Linux':
        raise RuntimeError(f'the CPU kernels are built on Linux only, this '
                           f'is {platform.system()}')
    compiler = _gcc('CXX', 'c++')
    isa = host_isa() if isa is None else isa
    folders = [*include_dirs, source_dir]
    key = build_key([read_source(name, folders) for name in sources], isa,
                    compiler)
    build_dir = osp.join(cache_dir or default_cache_dir(),
                         f'{stem}_{isa}_{key[:16]}')
    built = osp.join(build_dir, f'{stem}.so')
    # present only while the library is whole: written after torch's builder
    # returns, removed before it is asked to build again
    complete = osp.join(build_dir, 'mmact-complete')
    if osp.exists(complete) and osp.exists(built):
        try:
            spec = importlib.util.spec_from_file_location(stem, built)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except (ImportError, OSError):
            # a damaged library: removed, so that torch's builder links it
            # again (ninja goes by timestamps: it would keep a damaged
            # library newer than its objects)
            with contextlib.suppress(OSError):
                os.remove(built)
    with contextlib.suppress(FileNotFoundError):
        os.remove(complete)
    os.makedirs(build_dir, exist_ok=True)
    compiles = not osp.exists(built)
    start = time.perf_counter()
    path = os.environ.get('PATH')
    os.environ['PATH'] = _build_path()
    try:
        with build_lock(build_dir):
            # torch's own lock file, left by a build that died, would make
            # its builder wait forever; no one else builds here now
            with contextlib.suppress(FileNotFoundError):
                os.remove(osp.join(build_dir, 'lock'))
            module = _cpp_extension().load(
                name=stem,
                sources=[
                    osp.join(_find(name, folders) or source_dir, name)
                    for name in sources
                ],
                extra_cflags=compiler_flags(isa),
                extra_ldflags=['-fopenmp'],
                extra_include_paths=folders,
                build_directory=build_dir)
    finally:
        if path is None:
            os.environ.pop('PATH', None)
        else:
            os.environ['PATH'] = path
    with contextlib.suppress(OSError):  # a read-only cache: load it slowly
        open(complete, 'w').close()
    if compiles:
        what = 'the CPU extension' if stem == _STEM else stem
        print_log(
            f'mmact: built {what} ({isa}) in '
            f'{time.perf_counter() - start:.1f} s into {build_dir}',
            logger='current',
            level=logging.INFO)
    return module


def _cpp_extension() -> ModuleType:
    """``torch.utils.cpp_extension``, imported without its notice that no
    CUDA runtime was found: mmact builds CPU code only, and the notice
    (printed on torch 2.1, logged as a warning on later torch) reads as a
    broken install to users, once per worker."""
    notice = logging.getLogger('torch.utils.cpp_extension')
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from torch.utils import cpp_extension
    finally:
        notice.setLevel(level)
    return cpp_extension


_lock = threading.Lock()
_built: Dict[str, Optional[ModuleType]] = {}


def extension() -> Optional[ModuleType]:
    """The extension module (its operators loaded), built on first use
    (:func:`build_extension`); None when the C kernels are switched off
    (:mod:`mmact.ops.backends`) or cannot be built (a warning, once, names
    why); callers then use torch."""
    if not backends.settings().cpu_kernels:
        return None
    return load_extension()


def load_extension() -> Optional[ModuleType]:
    """:func:`extension` whatever the settings: the CUDA kernels
    (:mod:`mmact.ops.cuda_build`) register into the operators it defines
    and run under its autograd node, with the C kernels on or off."""
    if _STEM in _built:
        return _built[_STEM]
    with _lock:
        if _STEM not in _built:
            try:
                _built[_STEM] = build_extension()
            except Exception as e:  # compiler/ninja/loader problems
                warnings.warn(f'mmact: the CPU kernels are unavailable '
                              f'({type(e).__name__}: {str(e)[:300]}); using '
                              'the slower torch implementation')
                _built[_STEM] = None
    return _built[_STEM]
