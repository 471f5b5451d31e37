"""Shared method of the CPU benchmarks in ``tools/benchmarks``.

* **Allocator.** glibc serves every large tensor with a fresh ``mmap``
  whose page faults dominate elementwise operators and vary several-fold
  between runs on virtual machines. :func:`use_heap_allocator` re-executes
  the benchmark once with jemalloc or tcmalloc preloaded when one is
  installed, else with glibc settings that keep large blocks on the heap
  (``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296
  MALLOC_TOP_PAD_=268435456``), unless the environment already sets them.
* **Timing.** Candidates and baselines run in interleaved rounds after a
  warm-up (:func:`interleaved`), so load from other processes hits all of
  them alike; tables give the median with the min/max spread, and ratios are
  taken per round (candidate / baseline of the same round) and summarised
  the same way.
* **Page faults.** :func:`interleaved` also counts the minor page faults of
  every call (``getrusage``); the tables print them per call, so that a
  ratio driven by fresh pages rather than compute shows itself (glibc can
  still hand out untouched heap pages when the heap's layout shifts).
* **Context.** Every table carries the CPU model, the vector ISA of the
  mmact kernels and of torch, the thread count, the allocator and the load
  average (:func:`machine_line`).
"""
import ctypes.util
import glob
import os
import resource
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

GLIBC_HEAP = {
    'MALLOC_MMAP_THRESHOLD_': '33554432',
    'MALLOC_TRIM_THRESHOLD_': '4294967296',
    'MALLOC_TOP_PAD_': '268435456',
}
_MARK = 'MMACT_BENCH_ALLOCATOR'


def _find_preloadable() -> Optional[str]:
    """Path of an installed jemalloc or tcmalloc shared library."""
    for name in ('jemalloc', 'tcmalloc_minimal', 'tcmalloc'):
        found = ctypes.util.find_library(name)
        patterns = [
            f'/usr/lib/*/lib{name}.so*', f'/usr/lib/lib{name}.so*',
            f'/usr/local/lib/lib{name}.so*'
        ]
        paths = [p for pat in patterns for p in sorted(glob.glob(pat))]
        if found and not os.path.isabs(found):
            paths = paths or [found]
        if paths:
            return paths[0]
    return None


def allocator() -> str:
    """What serves this process's allocations, in words."""
    preload = os.environ.get('LD_PRELOAD', '')
    for name in ('jemalloc', 'tcmalloc'):
        if name in preload:
            return f'{name} (LD_PRELOAD={preload})'
    if all(os.environ.get(k) == v for k, v in GLIBC_HEAP.items()):
        return 'glibc, large blocks on the heap (' + ' '.join(
            f'{k}={v}' for k, v in GLIBC_HEAP.items()) + ')'
    if any(k in os.environ for k in GLIBC_HEAP):
        return 'glibc (custom ' + ' '.join(f'{k}={os.environ[k]}'
                                           for k in GLIBC_HEAP
                                           if k in os.environ) + ')'
    return 'glibc defaults (large tensors are fresh mmaps)'


def use_heap_allocator(enabled: bool = True) -> None:
    """Re-execute this script once with a heap-friendly allocator.

    Does nothing when disabled, when already re-executed, or when the
    environment already chooses (``LD_PRELOAD`` of jemalloc/tcmalloc or any
    of the glibc ``MALLOC_*_`` settings).
    """
    if not enabled or os.environ.get(_MARK):
        return
    preload = os.environ.get('LD_PRELOAD', '')
    if ('jemalloc' in preload or 'tcmalloc' in preload
            or any(k in os.environ for k in GLIBC_HEAP)):
        return
    env = dict(os.environ)
    env[_MARK] = '1'
    lib = _find_preloadable()
    if lib:
        env['LD_PRELOAD'] = (f'{preload}:{lib}' if preload else lib)
    else:
        env.update(GLIBC_HEAP)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def machine_line(threads: Optional[int] = None) -> str:
    """CPU model, kernel ISA, torch ISA, threads, allocator, load."""
    from mmact.ops.cpu_build import cpu_model, host_isa
    threads = torch.get_num_threads() if threads is None else threads
    try:
        load = '/'.join(f'{v:.2f}' for v in os.getloadavg())
    except OSError:
        load = '?'
    return (f'CPU: {cpu_model()} ({os.cpu_count()} logical cores) | '
            f'ISA: mmact kernels {host_isa()}, torch '
            f'{torch.backends.cpu.get_cpu_capability()} | threads: {threads}'
            f' | allocator: {allocator()} | load average (1/5/15 min): '
            f'{load} | torch {torch.__version__}')


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def interleaved(
        cases: Dict[str, Callable[[], None]],
        repeats: int,
        warmup: int = 2,
        faults: Optional[Dict[str,
                              List[int]]] = None) -> Dict[str, List[float]]:
    """Seconds of every case over ``repeats`` interleaved rounds.

    Args:
        cases: name -> call.
        repeats: timed rounds.
        warmup: untimed rounds first.
        faults: if given, filled with name -> minor page faults of each
            timed call (whole process).
    """
    for _ in range(warmup):
        for call in cases.values():
            call()
    times: Dict[str, List[float]] = {name: [] for name in cases}
    counts: Dict[str, List[int]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, call in cases.items():
            before = _minor_faults()
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
            counts[name].append(_minor_faults() - before)
    if faults is not None:
        faults.update(counts)
    return times


def fmt_faults(counts: Sequence[int]) -> str:
    """``median [max]`` minor page faults per call."""
    return f'{statistics.median(counts):.0f} [{max(counts)}]'


def spread(values: Sequence[float]) -> Tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def round_ratios(times: Dict[str, List[float]], name: str,
                 base: str) -> Tuple[float, float, float]:
    """(median, min, max) of per-round ratios ``name / base``."""
    return spread([a / b for a, b in zip(times[name], times[base])])


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence],
                threads: int) -> None:
    """Markdown table preceded by its title and :func:`machine_line`."""
    print(f'\n### {title}')
    print(machine_line(threads))
    print()
    cells = [[str(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
        for i, h in enumerate(header)
    ]
    print('| ' + ' | '.join(h.ljust(w) for h, w in zip(header, widths)) + ' |')
    print('|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    for row in cells:
        print('| ' + ' | '.join(c.ljust(w)
                                for c, w in zip(row, widths)) + ' |')
    sys.stdout.flush()


def fmt_spread(values: Tuple[float, float, float],
               scale: float = 1.0,
               digits: int = 2) -> str:
    """``median [min-max]``."""
    med, lo, hi = (v * scale for v in values)
    return f'{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]'


# ---------------------------------------------------------------------------
# Device-neutral timing and memory for the GPU benchmarks
# (benchmark_cuda.py, benchmark_mask_rcnn_step.py), so that the same code
# runs on the CPU in tools/gpu/gpu_check.sh's dry run.


class StepClock:
    """Times one region twice: wall clock and device time.

    On CUDA the device time comes from CUDA events recorded around the region
    (the GPU's time from the first to the last kernel the region queued, idle
    gaps included); on the CPU it is the wall clock (the stand-in a dry run
    uses). Both synchronise the device at the start and the end, so each
    region is measured alone.

    Args:
        device (str | torch.device): Where the region runs.
    """

    def __init__(self, device) -> None:
        self.cuda = torch.device(device).type == 'cuda'
        self._start = self._events = None

    def __enter__(self) -> 'StepClock':
        if self.cuda:
            torch.cuda.synchronize()
            self._events = (torch.cuda.Event(enable_timing=True),
                            torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self._events[1].record()
            self._events[1].synchronize()
        self.wall_s = time.perf_counter() - self._start
        self.device_s = (
            self._events[0].elapsed_time(self._events[1]) /
            1e3 if self.cuda else self.wall_s)


def reset_peak_memory(device) -> None:
    """Start a new peak of allocated memory (CUDA; nothing on the CPU)."""
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device) -> Optional[int]:
    """Bytes of ``torch.cuda.max_memory_allocated`` since the last
    :func:`reset_peak_memory`; None on the CPU (torch keeps no such figure
    there)."""
    if torch.device(device).type != 'cuda':
        return None
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def quartiles(values: Sequence[float]) -> Dict[str, float]:
    """Median and interquartile range of ``values``.

    Returns:
        dict: ``median``, ``q25``, ``q75``, ``iqr_rel`` (IQR / median) and
        ``n``.
    """
    vals = sorted(values)
    if len(vals) == 1:
        q25 = med = q75 = vals[0]
    else:
        q25, med, q75 = statistics.quantiles(vals, n=4, method='inclusive')
    return dict(
        median=med,
        q25=q25,
        q75=q75,
        iqr_rel=(q75 - q25) / med if med else None,
        n=len(vals))


def bootstrap_ratio(num: Sequence[float],
                    den: Sequence[float],
                    resamples: int = 2000,
                    seed: int = 0) -> Tuple[float, float]:
    """95 % interval of ``median(num) / median(den)`` by resampling both
    samples (a ratio whose interval excludes 1.05 resolves a 5 %
    difference)."""
    import random
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(num, k=len(num))) /
        statistics.median(rng.choices(den, k=len(den)))
        for _ in range(resamples))
    return (ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1])
