"""CPU benchmarks in tools/benchmarks: smoke runs on tiny shapes (no timed
assertions: the tables' structure, ratio columns that parse as numbers and
the targets they print being the scripts' own constants) and the shared
method in bench_utils."""
import importlib.util
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / 'tools/benchmarks'


def _glibc_heap() -> dict:
    spec = importlib.util.spec_from_file_location('mmact_bench_utils',
                                                  TOOLS / 'bench_utils.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GLIBC_HEAP


def run(script, *args, fresh=False):
    """A benchmark script's output. ``fresh``: a new interpreter without
    allocator settings, which the script sets by executing itself again
    (bench_utils.use_heap_allocator); else forked from a warm interpreter
    whose environment has the heap settings already (the script then runs
    once)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith('MALLOC_') and k != 'MMACT_BENCH_ALLOCATOR'
    }
    if fresh:
        proc = subprocess.run(
            [sys.executable, str(TOOLS / script), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600)
    else:
        proc = run_python([TOOLS / script, *args],
                          cwd=REPO,
                          env=dict(env, **_glibc_heap()),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def tables(out, titles=None):
    """[(machine line, header cells, rows of cells)] of printed tables; their
    titles appended to ``titles`` when given."""
    found = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('### '):
            header = [c.strip() for c in lines[i + 3].strip('|').split('|')]
            rows = []
            for row in lines[i + 5:]:
                if not row.startswith('|'):
                    break
                rows.append([c.strip() for c in row.strip('|').split('|')])
            found.append((lines[i + 1], header, rows))
            if titles is not None:
                titles.append(line[4:])
    return found


def spread(cell):
    """(median, min, max) of a ``median [min-max]`` cell, which must parse
    and be ordered."""
    match = re.fullmatch(r'([\d.]+) \[([\d.]+)-([\d.]+)\]', cell)
    assert match, cell
    med, lo, hi = map(float, match.groups())
    assert lo <= med <= hi, cell
    return med, lo, hi


def targets(title):
    """The numbers a title gives as targets (``... <= 1.5``)."""
    return [float(t) for t in re.findall(r'<= ([\d.]+)', title)]


def check_machine_line(line, threads):
    assert line.startswith('CPU: ')
    assert re.search(r'ISA: mmact kernels (avx512|avx2|portable)', line)
    assert f'threads: {threads}' in line
    # the benchmark re-executed itself with a heap-friendly allocator
    assert 'allocator: glibc, large blocks on the heap' in line \
        or 'allocator: jemalloc' in line or 'allocator: tcmalloc' in line


@pytest.mark.slow
def test_activation_benchmark_table():
    # a fresh interpreter: the one script run here that sets its allocator
    size = ('--shape', '2', '4', '8', '8', '--threads', '1', '2', '--repeats',
            '2', '--warmup', '1', '--ops', 'core')
    out = run('benchmark_activations.py', *size, fresh=True)
    found = tables(out)
    assert len(found) == 2
    for (line, header, rows), threads in zip(found, (1, 2)):
        check_machine_line(line, threads)
        assert {'ISA', 'threads', 'baseline'} <= set(header)
        ratio = header.index('ratio median [min-max]')
        names = [r[0] for r in rows]
        assert {'SiLU', 'Sigmoid', 'mmact AGLU', 'mmact APA'} <= set(names)
        faults = header.index('page faults/call median [max]')
        for row in rows:
            assert row[header.index('threads')] == str(threads)
            spread(row[ratio])
            assert re.fullmatch(r'\d+ \[\d+\]', row[faults])
        silu = rows[names.index('SiLU')]
        assert spread(silu[ratio]) == (1.0, 1.0, 1.0)  # its own baseline
        apa = rows[names.index('mmact APA')]
        assert apa[header.index('baseline')] == 'Sigmoid'


@pytest.mark.slow
def test_overhead_benchmark_tables(load_tool):
    """Each module against its baseline, with the script's target (train:
    TARGETS, eval: EVAL_TARGET; none for the references)."""
    tool = load_tool('tools/benchmarks/benchmark_overhead.py')
    out = run('benchmark_overhead.py', '--calls', '3', '--repeats', '2',
              '--warmup', '1')
    titles = []
    found = tables(out, titles)
    assert len(found) == 2  # train, eval
    assert 'forward + backward' in titles[0]
    assert 'eval() + no_grad' in titles[1]
    for (line, header, rows), mode in zip(found, ('train', 'eval')):
        check_machine_line(line, 1)
        names = [r[0] for r in rows]
        assert names == ['SiLU', 'Sigmoid', 'GELU', *tool.TARGETS]
        ratio = header.index('ratio median [min-max]')
        for row in rows:
            base, target = tool.TARGETS.get(row[0], ('', None))
            assert row[header.index('baseline')] == base
            if base:
                spread(row[ratio])
            if target and mode == 'eval':
                target = tool.EVAL_TARGET
            printed = row[header.index('target')]
            assert targets(printed) == ([target] if target else []), printed
    assert tool.TARGETS['PReLU'][1] is None  # a reference, without target


@pytest.mark.slow
def test_fles_benchmark_table_and_profile():
    out = run('benchmark_fles.py', '--shape', '2', '32', '12', '20',
              '--threads', '1', '--repeats', '2', '--warmup', '1', '--profile',
              '--skip-poolformer')
    (line, header, rows), (pline, pheader, prows) = tables(out)
    check_machine_line(line, 1)
    check_machine_line(pline, 1)
    assert {
        'ISA', 'threads', 'ratio to GELU median [min-max]',
        'page faults/call median [max]'
    } <= set(header)
    assert [r[0] for r in rows] == ['GELU', 'FleS']
    ratio = header.index('ratio to GELU median [min-max]')
    assert spread(rows[0][ratio]) == (1.0, 1.0, 1.0)
    spread(rows[1][ratio])
    stages = [r[1] for r in prows]
    for key in ('fles.stats', 'fles.mlp', 'fles.apply', 'fles.bwd.gate',
                'fles.bwd.indicator', 'fles.total', 'gelu.total'):
        assert key in stages
    # the staged rows and "other" add up to the total
    ms = {r[0]: float(r[2]) for r in prows}
    staged = sum(float(r[2]) for r in prows[:-2])
    assert staged == pytest.approx(ms['FleS fwd+bwd total'], abs=0.05)


@pytest.mark.slow
def test_backbone_benchmark_table(load_tool):
    tool = load_tool('tools/benchmarks/benchmark_backbone.py')
    out = run('benchmark_backbone.py', '--depth', '18', '--batch', '2',
              '--size', '64', '--steps', '1', '--warmup', '0', '--threads',
              '1')
    titles = []
    ((line, header, rows), ) = tables(out, titles)
    check_machine_line(line, 1)
    assert targets(titles[0]) == [tool.TIME_TARGET, tool.MEMORY_TARGET]
    assert {
        'ISA', 'threads', 'peak memory ratio', 'page faults/step median [max]'
    } <= set(header)
    assert [r[0] for r in rows] == list(tool.CONFIGS)
    assert list(tool.CONFIGS) == [
        'SE-ResNet ReLU', 'APA*+AGLU (saves inputs)', 'APA*+AGLU (memory-lean)'
    ]
    ratio = header.index('ratio to SE-ResNet ReLU median [min-max]')
    assert spread(rows[0][ratio]) == (1.0, 1.0, 1.0)
    for row in rows:
        spread(row[ratio])
        float(row[header.index('peak memory ratio')])
    saved = header.index('saved-for-backward ratio')
    assert float(rows[2][saved]) < float(rows[1][saved])


@pytest.mark.slow
def test_backbone_benchmark_compile_table():
    """``--compile``: eager against compiled per model (dynamo's eager
    backend here; inductor takes minutes on two cores)."""
    out = run('benchmark_backbone.py', '--depth', '18', '--batch', '2',
              '--size', '32', '--steps', '1', '--warmup', '1', '--threads',
              '1', '--compile', '--compile-backend', 'eager')
    ((line, header, rows), ) = tables(out)
    check_machine_line(line, 1)
    assert [(r[0], r[1]) for r in rows] == [
        ('SE-ResNet ReLU, compiled', 'SE-ResNet ReLU'),
        ('APA*+AGLU (memory-lean), compiled', 'APA*+AGLU (memory-lean)'),
        ('APA*+AGLU (memory-lean), compiled', 'SE-ResNet ReLU, compiled'),
    ]
    assert 'backend eager' in out


@pytest.mark.slow
def test_safe_load_benchmark_table(load_tool):
    tool = load_tool('tools/benchmarks/benchmark_safe_load.py')
    out = run('benchmark_safe_load.py', '--repeats', '1')
    titles = []
    ((line, header, rows), ) = tables(out, titles)
    check_machine_line(line, 1)
    assert targets(titles[0]) == [tool.TARGET]
    assert [r[0] for r in rows] == [
        'torch.load(weights_only=False)', 'mmact safe_load',
        'torch.load(weights_only=True)'
    ]
    ratio = header.index('x baseline: median [min-max]')
    assert spread(rows[0][ratio]) == (1.0, 1.0, 1.0)
    for row in rows:
        spread(row[ratio])


def test_interleaved_counts_page_faults(load_tool):
    bench = load_tool('tools/benchmarks/bench_utils.py')
    pages = 256

    def touch_fresh_pages():
        # a new anonymous mapping faults once per page touched
        with mmap.mmap(-1, pages * mmap.PAGESIZE) as m:
            for i in range(pages):
                m[i * mmap.PAGESIZE] = 1

    faults = {}
    times = bench.interleaved(
        {
            'fresh': touch_fresh_pages,
            'none': lambda: None
        },
        repeats=3,
        warmup=1,
        faults=faults)
    assert len(times['fresh']) == len(faults['fresh']) == 3
    assert min(faults['fresh']) >= pages
    assert max(faults['none']) < pages
    assert bench.fmt_faults([3, 1, 7]) == '3 [7]'


def test_round_ratios_and_spread(load_tool):
    bench = load_tool('tools/benchmarks/bench_utils.py')
    times = {'a': [1.0, 2.0, 4.0], 'b': [2.0, 2.0, 2.0]}
    assert bench.round_ratios(times, 'b', 'a') == (1.0, 0.5, 2.0)
    assert bench.fmt_spread((1.0, 0.5, 2.0)) == '1.00 [0.50-2.00]'


def test_allocator_choice(load_tool, monkeypatch):
    bench = load_tool('tools/benchmarks/bench_utils.py')
    calls = []
    monkeypatch.setattr(bench.os, 'execve', lambda *a: calls.append(a[2]))
    for key in list(os.environ):
        if key.startswith('MALLOC_') or key == 'MMACT_BENCH_ALLOCATOR':
            monkeypatch.delenv(key)
    monkeypatch.delenv('LD_PRELOAD', raising=False)
    monkeypatch.setattr(bench, '_find_preloadable', lambda: None)
    bench.use_heap_allocator()
    (env, ) = calls
    assert {k: env[k] for k in bench.GLIBC_HEAP} == bench.GLIBC_HEAP
    monkeypatch.setattr(bench, '_find_preloadable',
                        lambda: '/usr/lib/libjemalloc.so.2')
    bench.use_heap_allocator()
    assert calls[1]['LD_PRELOAD'] == '/usr/lib/libjemalloc.so.2'
    assert 'MALLOC_MMAP_THRESHOLD_' not in calls[1]
    # already chosen by the user, already re-executed, or disabled: no exec
    monkeypatch.setenv('MALLOC_TOP_PAD_', '0')
    bench.use_heap_allocator()
    monkeypatch.delenv('MALLOC_TOP_PAD_')
    monkeypatch.setenv('MMACT_BENCH_ALLOCATOR', '1')
    bench.use_heap_allocator()
    monkeypatch.delenv('MMACT_BENCH_ALLOCATOR')
    bench.use_heap_allocator(enabled=False)
    assert len(calls) == 2
    monkeypatch.setenv('LD_PRELOAD', '/usr/lib/libjemalloc.so.2')
    assert bench.allocator().startswith('jemalloc')


def test_mask_rcnn_protocol_batch_and_class_counts(load_tool):
    """The LVIS Mask R-CNN step protocol's inputs: LVIS v1's split of the
    1203 classes by image count, and a batch as mmdet's loader yields it."""
    tool = load_tool('tools/benchmarks/benchmark_mask_rcnn_step.py')
    counts = tool.lvis_shaped_counts(1203)
    assert len(counts) == 1203
    rare = [c for c in counts if c <= 10]
    common = [c for c in counts if 10 < c <= 100]
    assert (len(rare), len(common)) == (337, 461)
    assert min(counts) == 1 and max(counts) == 50000
    assert len(tool.lvis_shaped_counts(8)) == 8
    spec = dict(images=2, height=40, width=56, instances=4, classes=8)
    batch = tool.synthetic_batch(spec)
    assert [tuple(x.shape) for x in batch['inputs']] == [(3, 40, 56)] * 2
    for sample in batch['data_samples']:
        gt = sample.gt_instances
        assert gt.bboxes.shape == (4, 4) and gt.labels.max() < 8
        assert gt.masks.masks.shape == (4, 40, 56)
        # each mask lies inside its box and is not empty
        for box, mask in zip(gt.bboxes, gt.masks.masks):
            ys, xs = mask.nonzero()
            assert len(xs) > 0
            assert xs.min() >= int(box[0]) and xs.max() <= int(box[2])
            assert ys.min() >= int(box[1]) and ys.max() <= int(box[3])
    # the same seed gives the same batch (every model sees one batch)
    again = tool.synthetic_batch(spec)
    assert all(
        (a == b).all() for a, b in zip(batch['inputs'], again['inputs']))


def test_mask_rcnn_protocol_saved_bytes_by_part_and_dtype(load_tool):
    """The protocol's memory breakdown: bytes autograd saves, by the part of
    the model that saved them and by dtype; parameters left out, a storage
    counted once, the model's outputs unchanged."""
    tool = load_tool('tools/benchmarks/benchmark_mask_rcnn_step.py')
    model = torch.nn.Sequential()
    model.add_module('stem', torch.nn.Linear(8, 16))
    model.add_module('head', torch.nn.Sequential(torch.nn.Linear(16, 4)))
    x = torch.randn(32, 8)
    expected = model(x)

    def step():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            y = model(x)
            assert y.shape == expected.shape  # hooks leave outputs alone
        y.float().sum().backward()

    saved = tool.saved_by_part(model, step)
    # the stem saves x (32x8) cast to bfloat16 for its weight's gradient (x
    # needs none, so no weight copy); the head saves its input (32x16) and
    # its weight's bfloat16 copy (4x16); float32 parameters are not counted
    assert saved['stem'] == {'bfloat16': 32 * 8 * 2}
    assert saved['head.0'] == {'bfloat16': (32 * 16 + 4 * 16) * 2}
    # the hooks are gone afterwards
    assert not any(m._forward_hooks or m._forward_pre_hooks
                   for m in model.modules())


def test_step_clock_and_stats_on_the_cpu(load_tool):
    utils = load_tool('tools/benchmarks/bench_utils.py')
    with utils.StepClock('cpu') as clock:
        sum(range(1000))
    # the CPU stand-in: the device time is the wall time
    assert clock.device_s == clock.wall_s > 0
    utils.reset_peak_memory('cpu')
    assert utils.peak_memory('cpu') is None
    q = utils.quartiles([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (q['median'], q['q25'], q['q75'], q['n']) == (3.0, 2.0, 4.0, 5)
    assert utils.quartiles([2.0])['iqr_rel'] == 0
    lo, hi = utils.bootstrap_ratio([2.0, 2.1, 1.9, 2.0], [1.0, 1.0, 1.0])
    assert 1.9 <= lo <= 2.0 <= hi <= 2.1
