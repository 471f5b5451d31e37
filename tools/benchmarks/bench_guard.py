"""Speed guard: the C kernels' speed ratios against their ceilings.

Measures, in one process and by the CPU benchmarks' method (heap
settings, interleaved rounds, the median of per-round ratios; see
``bench_utils``), the ratios of mmact's C kernels to the native
activation of the same round:

- AGLU / SiLU and APA / Sigmoid forward+backward
  (``benchmark_activations.py``'s scalar-parameter rows),
- FleS 9x15 / GELU forward+backward (``benchmark_fles.py``),

each on the benchmarks' shapes 16x64x56x56 and 8x256x56x56, and the host
cost per call of AGLU / SiLU, APA / Sigmoid and FleS (global) / GELU,
forward+backward on (2, 32, 4, 4) (``benchmark_overhead.py``). It prints
every ratio beside its ceiling, with the CPU model, the kernels' vector ISA,
the threads and the load average, and exits 1 naming every ratio over its
ceiling or not measured (without the C kernels nothing is measured: each
ratio says why). A load average above the core count at the start is
printed as such; the ratios are judged all the same.

Ceilings are per vector ISA in ``bench_guard_ceilings.json`` beside this
script, each set with the machine it names; a machine whose ISA has none
is held to the loosest ceiling of each ratio, and the report says so.
``--json`` writes the measured ratios; ``--derive`` turns such files from
runs in a row into ceilings for the host's ISA (the rule is in
:func:`derive`).

Example::

    python tools/benchmarks/bench_guard.py
    for i in $(seq 10); do python tools/benchmarks/bench_guard.py \\
        --json guard_$i.json; done
    python tools/benchmarks/bench_guard.py --derive guard_*.json
"""
import argparse
import gc
import json
import math
import os
import os.path as osp
import sys
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import bench_utils  # noqa: E402

CEILINGS = osp.join(
    osp.dirname(osp.abspath(__file__)), 'bench_guard_ceilings.json')
#: The CPU benchmarks' shapes.
SHAPES = ((16, 64, 56, 56), (8, 256, 56, 56))
HOST_SHAPE = (2, 32, 4, 4)
FLES_WINDOW = (9, 15)


def _dims(shape: Sequence[int]) -> str:
    return 'x'.join(map(str, shape))


#: The kernels' ratios at the benchmarks' shapes: key stem -> what.
_KERNEL_RATIOS = (
    ('aglu_silu', 'AGLU / SiLU'),
    ('apa_sigmoid', 'APA / Sigmoid'),
    ('fles_gelu', 'FleS 9x15 / GELU'),
)
#: key -> what the ratio is, in the guard's order.
RATIOS = {
    f'{stem}_{_dims(shape)}': f'{what} fwd+bwd {_dims(shape)}'
    for stem, what in _KERNEL_RATIOS
    for shape in SHAPES
}
RATIOS.update(
    host_aglu_silu='host cost AGLU / SiLU (2, 32, 4, 4)',
    host_apa_sigmoid='host cost APA / Sigmoid (2, 32, 4, 4)',
    host_fles_gelu='host cost FleS (global) / GELU (2, 32, 4, 4)')

#: :func:`derive`'s rule: a ceiling is the runs' largest median times
#: MARGIN, and must stay below SLOWDOWN times their smallest, so that a
#: kernel that slows down by SLOWDOWN fails.
MARGIN = 1.15
SLOWDOWN = 1.7


class Ratio(NamedTuple):
    """A measured ratio (median, min, max of its per-round ratios), or
    ``why`` it was not measured."""
    median: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    why: Optional[str] = None


class Machine(NamedTuple):
    """What the report says about the machine."""
    cpu: str
    isa: str
    cores: int
    load: Optional[float]  # 1-minute load average at the start
    line: str  # bench_utils.machine_line


def machine(threads: int) -> Machine:
    """This machine, its load average taken now."""
    from mmact.ops.cpu_build import cpu_model, host_isa
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return Machine(cpu_model(), host_isa(),
                   os.cpu_count() or 1, load,
                   bench_utils.machine_line(threads))


def kernel_problem() -> Optional[str]:
    """Why the C kernels cannot run here, or None when they can."""
    from mmact.ops import backends, cpu_build
    if not backends.settings().cpu_kernels:
        return ('the C kernels are switched off (MMACT_DISABLE_CPU_KERNEL=1 '
                'or mmact.ops.backends.configure(cpu_kernels=False))')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        built = cpu_build.extension()
    if built is None:
        said = ' '.join(str(w.message) for w in caught)
        return said or 'the CPU extension could not be built or loaded'
    return None


def runs_c_kernels(call: Callable[[], None]) -> bool:
    """Whether ``call`` runs one of mmact's C++ operators (the C kernels;
    not a Triton launcher, ``mmact::triton_*``), as the profiler records
    the dispatcher's calls."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    return any(
        e.key.startswith('mmact::') and not e.key.startswith('mmact::triton_')
        for e in prof.key_averages())


def _ratios(cases: Dict[str, Callable[[], None]], pairs: Dict[str, tuple],
            rounds: int, warmup: int) -> Dict[str, Ratio]:
    """``pairs``: key -> (case, baseline case). A key whose case reaches
    no C kernel is named; the others' cases run in one interleaved run,
    then each key's per-round ratios."""
    out = {}
    for key, (name, _) in pairs.items():
        if not runs_c_kernels(cases[name]):
            out[key] = Ratio(why=f'{name} does not run mmact\'s C kernels '
                             '(no mmact:: operator in its call)')
    timed = {k: pair for k, pair in pairs.items() if k not in out}
    if timed:
        times = bench_utils.interleaved(
            {n: cases[n]
             for pair in timed.values()
             for n in pair}, rounds, warmup)
        for key, (name, base) in timed.items():
            out[key] = Ratio(*bench_utils.round_ratios(times, name, base))
    return {key: out[key] for key in pairs}


def _fwd_bwd(fn: Callable, x: torch.Tensor,
             grad: torch.Tensor) -> Callable[[], None]:

    def run():
        x.grad = None
        fn(x).backward(grad)

    return run


def measure(rounds: int, warmup: int, threads: int) -> Dict[str, Ratio]:
    """Every ratio of :data:`RATIOS` on this machine."""
    problem = kernel_problem()
    if problem is not None:
        return {key: Ratio(why=problem) for key in RATIOS}
    import benchmark_activations
    import benchmark_fles
    import benchmark_overhead
    import torch.nn as nn
    torch.set_num_threads(threads)
    out: Dict[str, Ratio] = {}
    for shape in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(*shape, requires_grad=True)
        grad = torch.randn(*shape)
        ops = benchmark_activations.build_ops(shape[1], core=True)
        cases = {
            n: _fwd_bwd(ops[n], x, grad)
            for n in ('SiLU', 'Sigmoid', 'mmact AGLU', 'mmact APA')
        }
        out.update(
            _ratios(
                cases, {
                    f'aglu_silu_{_dims(shape)}': ('mmact AGLU', 'SiLU'),
                    f'apa_sigmoid_{_dims(shape)}': ('mmact APA', 'Sigmoid'),
                }, rounds, warmup))
        x, grad, fles = benchmark_fles._setup(shape, FLES_WINDOW)
        cases = {
            'FleS': benchmark_fles._fwd_bwd(fles, x, grad),
            'GELU': benchmark_fles._fwd_bwd(nn.GELU(), x, grad),
        }
        out.update(
            _ratios(cases, {f'fles_gelu_{_dims(shape)}': ('FleS', 'GELU')},
                    rounds, warmup))
    torch.manual_seed(0)
    x = torch.randn(*HOST_SHAPE, requires_grad=True)
    grad = torch.randn(*HOST_SHAPE)
    modules = benchmark_overhead.build_modules(HOST_SHAPE[1], 'cpu')
    names = ('SiLU', 'AGLU', 'Sigmoid', 'APA', 'GELU', 'FleS (global)')
    gc.collect()
    gc.freeze()  # benchmark_overhead's reason: no full passes in a round
    calls = 200
    cases = {
        n:
        benchmark_overhead._calls(_fwd_bwd(modules[n], x, grad), calls, False)
        for n in names
    }
    out.update(
        _ratios(
            cases, {
                'host_aglu_silu': ('AGLU', 'SiLU'),
                'host_apa_sigmoid': ('APA', 'Sigmoid'),
                'host_fles_gelu': ('FleS (global)', 'GELU'),
            }, rounds, warmup))
    return out


def _read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def load_ceilings(path: str = CEILINGS) -> Dict[str, dict]:
    """The ceilings file's ``isas``: ISA -> its entry (``machine``,
    ``commit``, ``date``, ``runs``, ``ceilings``: key -> ceiling).

    Raises:
        ValueError: a ceiling of a ratio the guard does not measure.
    """
    isas = _read_json(path)['isas']
    for isa, entry in isas.items():
        unknown = set(entry['ceilings']) - set(RATIOS)
        if unknown:
            raise ValueError(f'{path}: {isa} has ceilings of unknown ratios '
                             f'{sorted(unknown)}; the guard measures '
                             f'{list(RATIOS)}')
    return isas


def pick_ceilings(isas: Dict[str, dict], isa: str) -> tuple:
    """(key -> ceiling, where they come from) for a machine of ``isa``:
    its ISA's entry, else the loosest ceiling of each ratio over all
    entries, said as such."""
    if isa in isas:
        entry = isas[isa]
        return dict(entry['ceilings']), (
            f'ceilings for {isa}, set on {entry["machine"]} at '
            f'{entry["commit"]} ({entry["date"]})')
    loosest: Dict[str, float] = {}
    for entry in isas.values():
        for key, value in entry['ceilings'].items():
            loosest[key] = max(value, loosest.get(key, value))
    return loosest, (f'no ceilings for {isa}: the loosest of '
                     f'{", ".join(sorted(isas)) or "none"} for each ratio')


def judge(ratios: Dict[str, Ratio], ceilings: Dict[str, float]) -> tuple:
    """(table rows, failures): each ratio against its ceiling; a failure
    names the ratio and why (over its ceiling, not measured, no ceiling)."""
    rows, failures = [], []
    for key, label in RATIOS.items():
        ratio = ratios.get(key, Ratio(why='not measured by this run'))
        ceiling = ceilings.get(key)
        shown = ('-' if ceiling is None else f'{ceiling:.2f}')
        if ratio.why is not None:
            verdict = f'not measured: {ratio.why}'
        elif ceiling is None:
            verdict = 'no ceiling'
        elif ratio.median > ceiling:
            verdict = 'OVER'
        else:
            verdict = 'ok'
        if verdict == 'OVER':
            failures.append(f'{label} ({key}): {ratio.median:.2f} is over '
                            f'its ceiling {ceiling:.2f}')
        elif verdict != 'ok':
            failures.append(f'{label} ({key}): {verdict}')
        measured = ('-' if ratio.why is not None else bench_utils.fmt_spread(
            (ratio.median, ratio.low, ratio.high)))
        rows.append((label, measured, shown, verdict))
    return rows, failures


def load_note(host: Machine) -> str:
    """The load line: the 1-minute load average against the cores."""
    if host.load is None:
        return 'load average: unknown'
    state = ('LOADED: above the core count, ratios are noisier (judged all '
             'the same)' if host.load > host.cores else 'not above the core '
             'count')
    return (f'load average at the start (1 min): {host.load:.2f} on '
            f'{host.cores} cores, {state}')


def derive(runs: List[Dict[str, float]]) -> tuple:
    """(key -> ceiling, problems) from the ratios of runs in a row on an
    idle machine: the largest median times :data:`MARGIN`, rounded up to
    0.05; a problem where that ceiling would let a :data:`SLOWDOWN` of the
    smallest median pass (the ratio is too noisy to guard: more rounds)."""
    ceilings, problems = {}, []
    for key in RATIOS:
        values = [r[key] for r in runs if r.get(key) is not None]
        if not values:
            problems.append(f'{key}: measured in none of the runs')
            continue
        ceiling = math.ceil(max(values) * MARGIN * 20) / 20
        ceilings[key] = ceiling
        if ceiling >= SLOWDOWN * min(values):
            problems.append(
                f'{key}: runs {min(values):.2f}-{max(values):.2f}, ceiling '
                f'{ceiling:.2f} would pass a {SLOWDOWN}x slowdown of '
                f'{min(values):.2f}')
    return ceilings, problems


def report(ratios: Dict[str, Ratio], host: Machine, isas: Dict[str, dict],
           rounds: int) -> int:
    """Print the judged table; 0 when every ratio is under its ceiling."""
    ceilings, source = pick_ceilings(isas, host.isa)
    rows, failures = judge(ratios, ceilings)
    bench_utils.print_table(
        f'Speed guard: ratios to the native op, median [min-max] of '
        f'{rounds} interleaved rounds',
        ('ratio', 'measured', 'ceiling', 'verdict'), rows,
        torch.get_num_threads())
    print(f'\nCPU: {host.cpu} | ISA: {host.isa} | {load_note(host)}')
    print(source)
    for failure in failures:
        print(f'FAIL: {failure}')
    print('speed guard: ' + ('FAILED' if failures else 'passed'))
    return 1 if failures else 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--rounds', type=int, default=21, help='interleaved timed rounds')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch threads (default 1, as the ceilings were set)')
    parser.add_argument(
        '--ceilings', default=CEILINGS, help='the ceilings file')
    parser.add_argument('--json', help='write the measured ratios here')
    parser.add_argument(
        '--derive',
        nargs='+',
        metavar='JSON',
        help='print ceilings for the host ISA from --json files of runs in '
        'a row (measures nothing)')
    parser.add_argument(
        '--no-allocator',
        action='store_true',
        help='keep the current allocator settings (no re-exec)')
    return parser.parse_args(argv)


def main(args, measure_fn=measure, machine_fn=machine) -> int:
    from mmact.utils.refusal import refusing
    host = machine_fn(args.threads)
    if args.derive:
        with refusing():
            runs = [_read_json(path)['ratios'] for path in args.derive]
        ceilings, problems = derive(runs)
        print(
            json.dumps(
                {
                    host.isa:
                    dict(
                        machine=f'{host.cpu} ({host.cores} cores)',
                        commit='<commit>',
                        date='<date>',
                        runs=len(runs),
                        ceilings=ceilings)
                },
                indent=1))
        for problem in problems:
            print(f'too noisy: {problem}')
        return 1 if problems else 0
    with refusing():
        isas = load_ceilings(args.ceilings)
    ratios = measure_fn(args.rounds, args.warmup, args.threads)
    status = report(ratios, host, isas, args.rounds)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(
                dict(
                    machine=host.line,
                    load=host.load,
                    rounds=args.rounds,
                    ratios={
                        k: r.median
                        for k, r in ratios.items()
                    }),
                f,
                indent=1)
    return status


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    cli_args = parse_args()
    bench_utils.use_heap_allocator(not cli_args.no_allocator)
    run_tool(main, cli_args)
