"""Build, cache and load small C kernels for the host's vector ISA.

The fused CPU kernels (:mod:`mmact.ops.apa_cpu_kernel`,
:mod:`mmact.ops.fles.cpu_kernel`) are plain C compiled on first use with the
system compiler (``$CC``, default ``cc``) and loaded with :mod:`ctypes`.

* **ISA.** The library is built for the best vector ISA the running CPU
  supports (``avx512`` > ``avx2`` > ``portable``, read from the CPU flags);
  ``MMACT_CPU_ISA`` selects a lower one (e.g. to compare builds).
* **Cache.** Libraries live in ``$MMACT_CACHE_DIR`` (default
  ``~/.cache/mmact``) under a name derived from a *build key*: a hash of the
  source, the compiler flags, the compiler's version, and the CPU's model
  name and flags. A home directory shared by machines with different CPUs
  therefore holds one library per CPU, and the key is also compiled into the
  library (``mmact_build_key()``): a library whose key does not match the
  running machine is refused (:class:`BuildKeyMismatch`) and rebuilt.
* **Threads.** Kernels work on index ranges ``[s, e)`` (thread index
  ``t``). Built with OpenMP (``-fopenmp``; the library then shares the
  ``libgomp`` runtime, and so the thread team, that torch already loaded),
  ``NAME_mt`` runs the ranges on OpenMP threads; without OpenMP
  :meth:`KernelLibrary.launch` splits them over Python threads (ctypes
  releases the GIL). ``MMACT_CPU_OPENMP=0`` builds without OpenMP.

Nothing here is required: without a compiler, on other platforms than
Linux, or with ``MMACT_DISABLE_CPU_KERNEL=1``, :func:`get_library` returns
None and the ops use their torch path.
"""
import ctypes
import hashlib
import json
import os
import os.path as osp
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import torch

__all__ = [
    'ISAS', 'BuildKeyMismatch', 'cpu_model', 'cpu_flags', 'supported_isas',
    'host_isa', 'build_key', 'build_library', 'load_library', 'get_library',
    'KernelLibrary', 'split_ranges', 'run_parallel', 'PRELUDE'
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

#: Prepended to every kernel source. ``MMACT_PARALLEL(NAME, (params),
#: (args))`` defines ``NAME_mt(params, nt, total, step)`` running
#: ``NAME(args, s, e, t)`` on the ranges ``[t step, (t + 1) step)`` of
#: ``[0, total)`` for ``t < nt`` on OpenMP threads (only with OpenMP).
PRELUDE = r"""
#include <stdint.h>
#define MMACT_UNPAREN(...) __VA_ARGS__
#ifdef _OPENMP
#include <omp.h>
int mmact_openmp(void) { return 1; }
#define MMACT_PARALLEL(NAME, PARAMS, ARGS)                                 \
void NAME##_mt(MMACT_UNPAREN PARAMS, int64_t nt, int64_t total,            \
               int64_t step) {                                             \
    _Pragma("omp parallel num_threads(nt) if(nt > 1)")                     \
    {                                                                      \
        const int64_t nteam = omp_get_num_threads();                       \
        for (int64_t t = omp_get_thread_num(); t < nt; t += nteam) {       \
            const int64_t s = t * step;                                    \
            const int64_t e = s + step < total ? s + step : total;         \
            if (s < e) NAME(MMACT_UNPAREN ARGS, s, e, t);                  \
        }                                                                  \
    }                                                                      \
}
#else
int mmact_openmp(void) { return 0; }
#define MMACT_PARALLEL(NAME, PARAMS, ARGS)
#endif
"""


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


def _compiler() -> Optional[Tuple[str, str]]:
    """(path, version line) of ``$CC`` (default ``cc``), or None."""
    path = shutil.which(os.environ.get('CC', 'cc'))
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
    """Compile :data:`PRELUDE` + ``source`` for ``isa`` unless the cache has
    it.

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
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError(f'no C compiler ({os.environ.get("CC", "cc")})')
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
            f.write(PRELUDE + source)
            f.write(f'\nconst char *{_KEY_SYMBOL}(void) '
                    f'{{ return "{key}"; }}\n')
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
    """A loaded kernel library and how to launch its range kernels.

    Args:
        lib: from :func:`load_library`.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.mmact_openmp.restype = ctypes.c_int
        self.openmp = bool(lib.mmact_openmp())

    def declare(self, name: str, argtypes: Sequence) -> None:
        """Declare ``name(*argtypes, s, e, t)`` (and its ``_mt`` form)."""
        i64 = ctypes.c_int64
        fn = getattr(self.lib, name)
        fn.argtypes, fn.restype = list(argtypes) + [i64] * 3, None
        if self.openmp:
            fn = getattr(self.lib, f'{name}_mt')
            fn.argtypes, fn.restype = list(argtypes) + [i64] * 3, None

    def launch(self, name: str, args: tuple,
               ranges: Sequence[Tuple[int, int]]) -> None:
        """Run ``name(*args, s, e, t)`` for every ``(s, e)`` of ``ranges``
        (from :func:`split_ranges`), ``t`` being the range's index."""
        if len(ranges) > 1 and self.openmp:
            step = ranges[0][1] - ranges[0][0]
            getattr(self.lib, f'{name}_mt')(*args, len(ranges), ranges[-1][1],
                                            step)
            return
        run_parallel(
            getattr(self.lib, name), ranges, lambda t, s, e: args + (s, e, t))


_lock = threading.Lock()
_libraries: Dict[str, Optional[KernelLibrary]] = {}


def get_library(name: str, source: str) -> Optional[KernelLibrary]:
    """The library of ``source`` for this machine, built on first use.

    Returns None (with a warning if a build was attempted and failed) when
    kernels are disabled or cannot be built; callers then use torch.

    Args:
        name: file name stem of the library (also the in-process cache key).
        source: the C source.
    """
    if name in _libraries:
        return _libraries[name]
    with _lock:
        if name in _libraries:
            return _libraries[name]
        lib = None
        if os.environ.get('MMACT_DISABLE_CPU_KERNEL', '0') in ('', '0'):
            try:
                path, key = build_library(name, source)
                try:
                    lib = KernelLibrary(load_library(path, key))
                except BuildKeyMismatch:
                    os.remove(path)  # stale or foreign: rebuild once
                    lib = KernelLibrary(
                        load_library(*build_library(name, source)))
            except Exception as e:  # compiler/loader problems -> torch path
                warnings.warn(f'mmact: CPU kernel {name} unavailable '
                              f'({type(e).__name__}: {str(e)[:300]}); using '
                              'the slower torch implementation')
        _libraries[name] = lib
    return lib


_pool: Optional[ThreadPoolExecutor] = None


def _reset_pool_after_fork() -> None:
    global _pool
    _pool = None  # threads do not survive fork(); a child starts its own


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_reset_pool_after_fork)


def split_ranges(n: int,
                 min_per_thread: int,
                 align: int = 1,
                 threads: Optional[int] = None) -> List[Tuple[int, int]]:
    """Split ``range(n)`` into at most ``threads`` (default torch's thread
    count) contiguous ranges of at least ``min_per_thread`` items, each
    starting at a multiple of ``align``."""
    threads = torch.get_num_threads() if threads is None else threads
    threads = max(1, min(threads, n // max(min_per_thread, 1)))
    step = -(-n // threads)
    step = -(-step // align) * align
    return [(s, min(s + step, n)) for s in range(0, n, max(step, 1))]


def run_parallel(fn: Callable, ranges: Sequence[Tuple[int, int]],
                 make_args: Callable[[int, int, int], tuple]) -> None:
    """Call ``fn(*make_args(t, start, end))`` for every range, in threads.

    Args:
        fn: a ctypes function (releases the GIL while it runs).
        ranges: from :func:`split_ranges`.
        make_args: ``(thread index, start, end) -> arguments``.
    """
    global _pool
    if len(ranges) > 1:
        if _pool is None or _pool._max_workers < len(ranges) - 1:
            _pool = ThreadPoolExecutor(len(ranges) - 1)
        futures = [
            _pool.submit(fn, *make_args(t, s, e))
            for t, (s, e) in enumerate(ranges) if t
        ]
    fn(*make_args(0, *ranges[0]))  # the calling thread takes a share
    if len(ranges) > 1:
        for f in futures:
            f.result()
