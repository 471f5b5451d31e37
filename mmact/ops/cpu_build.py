"""Build, cache and load the C kernels for the host's vector ISA.

The fused CPU kernels are C files in the package (``mmact/ops/csrc``:
``apa.c`` / ``apa.h`` for :mod:`mmact.ops.apa_cpu_kernel`, ``fles.c`` /
``fles.h`` for :mod:`mmact.ops.fles.cpu_kernel`, ``prelude.h`` for both),
compiled on first use with the system's gcc (``$CC``, default ``cc``;
about a second; clang is refused with a message naming ``CC``) and loaded
with :mod:`ctypes`.

* **Signatures, declared once.** A kernel's header holds the only
  prototypes of its entries: the C file is compiled against it, and
  :class:`KernelLibrary` declares the ctypes functions from the same text
  (:func:`parse_prototypes`), so Python and C cannot disagree.
* **ISA.** The library is built for the best vector ISA the running CPU
  supports (``avx512`` > ``avx2`` > ``portable``, read from the CPU flags);
  ``MMACT_CPU_ISA`` selects a lower one (e.g. to compare builds).
* **Cache.** Libraries live in ``$MMACT_CACHE_DIR`` (default
  ``~/.cache/mmact``) under a name derived from a *build key*: a hash of the
  source (its headers inlined), the compiler flags, the compiler's version,
  and the CPU's model name and flags. A home directory shared by machines
  with different CPUs therefore holds one library per CPU, and the key is
  also compiled into the library (``mmact_build_key()``): a library whose
  key does not match the running machine is refused
  (:class:`BuildKeyMismatch`) and rebuilt.
* **Threads.** Entries take a thread count and split their ranges on
  OpenMP threads (``-fopenmp``; the library then shares the ``libgomp``
  runtime, and so the thread team, that torch already loaded); built
  without OpenMP (``MMACT_CPU_OPENMP=0``, or a compiler without it) they
  run in the calling thread. There is no other thread pool.

* **Torch operators.** ``apa_op.cpp`` compiles ``apa.c`` into torch
  operators with a C++ autograd node (``torch.ops.mmact.apa`` / ``aglu``:
  no Python ``autograd.Function`` or ctypes per call) and a Python module
  with a native-cost entry for each; ``fles_op.cpp`` does the same for
  FleS on tiles or a global window (``torch.ops.mmact.fles``, ``fles.c``
  and the scale MLP). Each is built by :func:`build_operators` through
  :func:`torch.utils.cpp_extension.load` (20-30 s) into the same cache,
  under a key that adds the torch version, and logged once at INFO; a
  finished build is marked (``mmact-complete``) and later imported directly,
  so that a process that only loads it prints nothing.

Nothing here is required: without a compiler, on other platforms than
Linux, or with the C kernels switched off (``MMACT_DISABLE_CPU_KERNEL=1``,
:func:`mmact.ops.backends.configure`), :func:`get_library` returns None and
the ops use their torch path.
"""
import contextlib
import ctypes
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
import tempfile
import threading
import time
import warnings
from functools import lru_cache
from types import ModuleType
from typing import Dict, FrozenSet, List, Optional, Tuple

import torch
from mmengine.logging import print_log

from . import backends

__all__ = [
    'ISAS', 'CSRC', 'BuildKeyMismatch', 'cpu_model', 'cpu_flags',
    'supported_isas', 'host_isa', 'read_source', 'parse_prototypes',
    'build_key', 'build_library', 'load_library', 'get_library',
    'KernelLibrary', 'build_operators', 'get_operators'
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
# (3x slower gate loops on x86).
_BASE_FLAGS = [
    '-O3', '-shared', '-fPIC', '-fopenmp-simd', '-fno-math-errno',
    '-fno-trapping-math', '-ffp-contract=fast', '-fno-tree-pre', '-std=gnu11'
]
_KEY_SYMBOL = 'mmact_build_key'

#: The kernels' C sources (package data).
CSRC = osp.join(osp.dirname(osp.abspath(__file__)), 'csrc')
_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)"$', re.MULTILINE)


def read_source(name: str, source_dir: str = CSRC) -> str:
    """The text of ``source_dir/name.c`` (or of ``source_dir/name`` when
    ``name`` has a suffix) with its local ``#include "..."``
    headers inlined (each once; ``#line`` keeps compiler messages pointing
    at the files): what is compiled and what the build key hashes.

    Args:
        name: the kernel's file stem (``'apa'``, ``'fles'``) or file name
            (``'apa_op.cpp'``).
        source_dir: where its files are; default :data:`CSRC`.
    """

    def inline(file: str, seen: set) -> str:
        with open(osp.join(source_dir, file)) as f:
            text = f.read()
        path = f'{osp.basename(source_dir)}/{file}'  # not the checkout's
        out, pos, line = [f'#line 1 "{path}"\n'], 0, 1
        for m in _LOCAL_INCLUDE.finditer(text):
            out.append(text[pos:m.start()])
            line += text.count('\n', pos, m.end()) + 1
            if m.group(1) not in seen:
                seen.add(m.group(1))
                out.append(inline(m.group(1), seen))
                out.append(f'\n#line {line} "{path}"')
            pos = m.end()
        out.append(text[pos:])
        return ''.join(out)

    return inline(name if '.' in name else f'{name}.c', set())


# C types a prototype may use, as ctypes.
_CTYPES = {
    'void': None,
    'int64_t': ctypes.c_int64,
    'float': ctypes.c_float,
    'const char*': ctypes.c_char_p,
}
_PROTOTYPE = re.compile(r'([\w ]+?\*?)\s*(\w+)\((.*)\)')


def _ctype(decl: str, where: str):
    """ctypes type of a C type (a parameter's declaration without its name,
    or a return type)."""
    decl = ' '.join(decl.replace('*', ' * ').split()).replace(' *', '*')
    if decl.endswith('*') and decl != 'const char*':
        return ctypes.c_void_p
    if decl not in _CTYPES:
        raise ValueError(f'{where}: C type {decl!r} has no ctypes form here '
                         f'(use pointers, {", ".join(_CTYPES)})')
    return _CTYPES[decl]


def parse_prototypes(header: str) -> Dict[str, Tuple[object, List[object]]]:
    """``name -> (restype, argtypes)`` of every prototype in ``header``
    (C declarations ``type name(type param, ...);`` at the start of a line,
    spread over lines as formatted).

    Raises:
        ValueError: a type without a ctypes form (anything but pointers,
            ``int64_t``, ``float``, ``void``, ``const char*``).
    """
    text = re.sub(r'/\*.*?\*/', ' ', header, flags=re.DOTALL)
    text = ' '.join(line for line in text.splitlines()
                    if not line.lstrip().startswith('#'))
    found = {}
    for decl in text.split(';'):
        m = _PROTOTYPE.fullmatch(' '.join(decl.split()))
        if m is None:
            continue
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3)
        args = []
        for p in params.split(','):
            p = p.strip()
            if p in ('', 'void'):
                continue
            decl = re.sub(r'\w+$', '', p)  # drop the parameter's name
            args.append(_ctype(decl, f'{name}({p})'))
        found[name] = (_ctype(ret, name), args)
    return found


class BuildKeyMismatch(RuntimeError):
    """A cached library was built for another CPU, compiler or source."""


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


def _flags(isa: str, openmp: bool) -> List[str]:
    return _BASE_FLAGS + _ISA_CC_FLAGS[isa] + (['-fopenmp'] if openmp else [])


def build_key(source: str,
              isa: str,
              compiler: Tuple[str, str],
              model: Optional[str] = None,
              flags: Optional[FrozenSet[str]] = None,
              openmp: bool = False) -> str:
    """Hex digest naming one build of ``source`` on one machine.

    Args:
        source: the C source.
        isa: one of :data:`ISAS`.
        compiler: ``(path, version line)`` of the compiler.
        model: CPU model name (default: this CPU's).
        flags: CPU flags (default: this CPU's).
        openmp: whether the build uses OpenMP.
    """
    if isa not in ISAS:
        raise ValueError(f'isa must be one of {ISAS}, got {isa!r}')
    fields = dict(
        source=hashlib.sha256(source.encode()).hexdigest(),
        isa=isa,
        cc_flags=_flags(isa, openmp),
        compiler=list(compiler),
        machine=platform.machine(),
        cpu_model=cpu_model() if model is None else model,
        cpu_flags=sorted(cpu_flags() if flags is None else flags))
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _cache_dir() -> str:
    return os.environ.get('MMACT_CACHE_DIR',
                          osp.join(osp.expanduser('~'), '.cache', 'mmact'))


def build_library(name: str,
                  source: str,
                  isa: Optional[str] = None,
                  cache_dir: Optional[str] = None,
                  openmp: Optional[bool] = None) -> Tuple[str, str]:
    """Compile ``source`` (from :func:`read_source`) for ``isa`` unless the
    cache has it; the build adds ``mmact_build_key()`` and
    ``mmact_openmp()`` (1 when built with OpenMP).

    Args:
        name: file name stem of the library.
        source: the C source.
        isa: one of :data:`ISAS`; default :func:`host_isa`.
        cache_dir: default ``$MMACT_CACHE_DIR`` or ``~/.cache/mmact``.
        openmp: build with OpenMP; default unless ``MMACT_CPU_OPENMP=0``.
            A compiler without OpenMP gives a build without it.

    Returns:
        ``(path, key)`` of the library.
    """
    if platform.system() != 'Linux':
        raise RuntimeError(f'CPU kernels are built on Linux only, this is '
                           f'{platform.system()}')
    compiler = _gcc('CC', 'cc')
    isa = host_isa() if isa is None else isa
    if openmp is None:
        openmp = os.environ.get('MMACT_CPU_OPENMP', '1') not in ('', '0')
    key = build_key(source, isa, compiler, openmp=openmp)
    cache = cache_dir or _cache_dir()
    path = osp.join(cache, f'{name}_{isa}_{key[:16]}.so')
    if osp.exists(path):
        return path, key
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = osp.join(tmp, f'{name}.c')
        with open(src, 'w') as f:
            f.write(source)
            f.write(
                f'\nconst char* {_KEY_SYMBOL}(void) '
                f'{{ return "{key}"; }}\n'
                '#include <stdint.h>\n'
                f'int64_t mmact_openmp(void) {{ return {int(openmp)}; }}\n')
        out = osp.join(tmp, f'{name}.so')
        proc = subprocess.run(
            [compiler[0], *_flags(isa, openmp), src, '-o', out, '-lm'],
            capture_output=True,
            text=True,
            timeout=300)
        if proc.returncode and openmp:
            return build_library(name, source, isa, cache_dir, openmp=False)
        if proc.returncode:
            raise RuntimeError(f'compiling {name} for {isa} failed: '
                               f'{proc.stderr[-2000:]}')
        os.replace(out, path)  # atomic: concurrent builders are fine
    return path, key


def load_library(path: str, key: str) -> ctypes.CDLL:
    """Load a library built by :func:`build_library` if its key is ``key``.

    The key is looked up in the file before it is opened (a foreign library
    is never loaded), and checked again through ``mmact_build_key()``.

    Raises:
        BuildKeyMismatch: the library was built for another CPU, compiler or
            source (or by something else).
    """
    with open(path, 'rb') as f:
        if key.encode() not in f.read():
            raise BuildKeyMismatch(f'{path} was not built with the key of '
                                   f'this machine ({key[:16]}...)')
    lib = ctypes.CDLL(path)
    getter = getattr(lib, _KEY_SYMBOL)
    getter.restype = ctypes.c_char_p
    if getter().decode() != key:
        raise BuildKeyMismatch(f'{path}: {_KEY_SYMBOL}() is not {key[:16]}')
    return lib


class KernelLibrary:
    """A loaded kernel library with its entries declared from the header.

    Args:
        lib: from :func:`load_library`.
        header: the C prototypes of its entries (the kernel's ``.h``).
    """

    def __init__(self, lib: ctypes.CDLL, header: str = '') -> None:
        self.lib = lib
        lib.mmact_openmp.restype = ctypes.c_int64
        self.openmp = bool(lib.mmact_openmp())
        self.entries = {}
        for name, (restype, argtypes) in parse_prototypes(header).items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
            self.entries[name] = fn

    def __getitem__(self, name: str):
        """The declared entry ``name``."""
        return self.entries[name]


_lock = threading.Lock()
_libraries: Dict[str, Optional[KernelLibrary]] = {}


def get_library(name: str, source_dir: str = CSRC) -> Optional[KernelLibrary]:
    """The library of kernel ``name`` (``source_dir/name.c`` against
    ``name.h``) for this machine, built on first use.

    Returns None (with a warning if a build was attempted and failed) when
    the C kernels are switched off (:mod:`mmact.ops.backends`) or cannot be
    built; callers then use torch.

    Args:
        name: the kernel's file stem (also the in-process cache key).
        source_dir: where its files are; default :data:`CSRC`.
    """
    if not backends.settings().cpu_kernels:
        return None
    if name in _libraries:
        return _libraries[name]
    with _lock:
        if name in _libraries:
            return _libraries[name]
        lib = None
        try:
            source = read_source(name, source_dir)
            with open(osp.join(source_dir, f'{name}.h')) as f:
                header = f.read()
            stem = f'mmact_{name}'
            path, key = build_library(stem, source)
            try:
                lib = KernelLibrary(load_library(path, key), header)
            except BuildKeyMismatch:
                os.remove(path)  # stale or foreign: rebuild once
                lib = KernelLibrary(
                    load_library(*build_library(stem, source)), header)
        except Exception as e:  # compiler/loader problems -> torch path
            warnings.warn(f'mmact: CPU kernel {name} unavailable '
                          f'({type(e).__name__}: {str(e)[:300]}); using '
                          'the slower torch implementation')
        _libraries[name] = lib
    return lib


# The C flags that apply to C++ too (torch's extension builder adds -fPIC,
# -shared and the C++ standard).
_CXX_FLAGS = [
    f for f in _BASE_FLAGS if f not in ('-shared', '-fPIC', '-std=gnu11')
]
_operator_modules: Dict[str, Optional[ModuleType]] = {}


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


def build_operators(name: str,
                    source_dir: str = CSRC,
                    isa: Optional[str] = None,
                    cache_dir: Optional[str] = None) -> ModuleType:
    """Compile ``source_dir/name`` (a C++ file registering torch operators,
    e.g. ``apa_op.cpp``, which also defines a Python module with a function
    per operator) with :func:`torch.utils.cpp_extension.load` and import
    it (its operators appear under ``torch.ops``).

    The build directory is named by a key as in :func:`build_key` (the
    source with its local headers, the flags, the C++ compiler, the CPU)
    extended with the torch version and the Python ABI, so that it is
    compiled once per machine, torch and Python (20-26 s; torch's headers
    are most of it).

    A build that is in the cache is imported directly, without torch's
    extension builder (whose import prints a notice when it finds a CUDA
    toolkit but no GPU); a new build logs, once, what it built and how long
    it took.

    Args:
        name: the C++ file's name in ``source_dir``.
        source_dir: default :data:`CSRC`.
        isa: one of :data:`ISAS`; default :func:`host_isa`.
        cache_dir: default ``$MMACT_CACHE_DIR`` or ``~/.cache/mmact``.

    Returns:
        The extension module.
    """
    compiler = _gcc('CXX', 'c++')
    isa = host_isa() if isa is None else isa
    flags = _CXX_FLAGS + _ISA_CC_FLAGS[isa] + ['-fopenmp']
    # the library is a CPython extension: one per Python ABI too
    key = hashlib.sha256(' '.join([
        build_key(read_source(name, source_dir), isa, compiler, openmp=True),
        torch.__version__, sys.implementation.cache_tag, *flags
    ]).encode()).hexdigest()
    stem = f'mmact_{name.split(".")[0]}'
    build_dir = osp.join(cache_dir or _cache_dir(), f'{stem}_{isa}_{key[:16]}')
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
            pass  # a damaged library: torch's builder checks and rebuilds
    with contextlib.suppress(FileNotFoundError):
        os.remove(complete)
    os.makedirs(build_dir, exist_ok=True)
    compiles = not osp.exists(built)
    start = time.perf_counter()
    path = os.environ.get('PATH')
    os.environ['PATH'] = _build_path()
    try:
        module = _cpp_extension().load(
            name=stem,
            sources=[osp.join(source_dir, name)],
            extra_cflags=flags,
            extra_ldflags=['-fopenmp'],
            extra_include_paths=[source_dir],
            build_directory=build_dir)
    finally:
        if path is None:
            os.environ.pop('PATH', None)
        else:
            os.environ['PATH'] = path
    with contextlib.suppress(OSError):  # a read-only cache: load it slowly
        open(complete, 'w').close()
    if compiles:
        print_log(
            f'mmact: built the CPU operators {name} ({isa}) in '
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


def get_operators(name: str) -> Optional[ModuleType]:
    """The extension module of ``CSRC/name`` (its torch operators loaded),
    built on first use (:func:`build_operators`); None (with a warning if
    the build failed) when the C kernels are switched off or cannot be
    built; callers then use the ctypes kernels or torch.

    Args:
        name: the C++ file's name in :data:`CSRC` (``'apa_op.cpp'``).
    """
    if not backends.settings().cpu_kernels:
        return None
    if name in _operator_modules:
        return _operator_modules[name]
    with _lock:
        if name not in _operator_modules:
            try:
                _operator_modules[name] = build_operators(name)
            except Exception as e:  # compiler/ninja/loader problems
                warnings.warn(f'mmact: CPU operators {name} unavailable '
                              f'({type(e).__name__}: {str(e)[:300]}); using '
                              'the ctypes kernels (more host time per call)')
                _operator_modules[name] = None
    return _operator_modules[name]
