"""The speed guard (tools/benchmarks/bench_guard.py, ``make bench-guard``):
its judging, ceilings per ISA, refusal to judge without the C kernels and
load line, on injected measurements (no timing is asserted), and the
checked-in ceilings file."""
import json
import warnings

import pytest
import torch

GUARD = 'tools/benchmarks/bench_guard.py'


@pytest.fixture
def guard(load_tool):
    return load_tool(GUARD)


def machine(guard, isa='avx2', load=0.5, cores=2):
    return guard.Machine('Test CPU', isa, cores, load, 'machine line')


def ceilings(guard, value):
    return {key: value for key in guard.RATIOS}


def measured(guard, value, **overrides):
    """Every ratio at ``value`` (min and max 0.1 around it), some keys
    replaced by ``overrides``."""
    ratios = {
        key: guard.Ratio(value, value - 0.1, value + 0.1)
        for key in guard.RATIOS
    }
    ratios.update(overrides)
    return ratios


def run(guard, ratios, host, isas, tmp_path, capsys):
    """main() on injected ratios and machine; (status, printed)."""
    path = tmp_path / 'ceilings.json'
    path.write_text(json.dumps({'isas': isas}))
    args = guard.parse_args(['--ceilings', str(path)])
    status = guard.main(
        args,
        measure_fn=lambda rounds, warmup, threads: ratios,
        machine_fn=lambda threads: host)
    return status, capsys.readouterr().out


def entry(guard, value, name='m'):
    return dict(
        machine=name,
        commit='abc1234',
        date='2026-11-28',
        runs=10,
        ceilings=ceilings(guard, value))


def test_ratios_under_their_ceilings_pass(guard, tmp_path, capsys):
    status, out = run(guard, measured(guard, 1.5), machine(guard),
                      {'avx2': entry(guard, 2.0)}, tmp_path, capsys)
    assert status == 0
    assert 'speed guard: passed' in out and 'FAIL' not in out
    # every ratio printed beside its ceiling, with the machine
    for label in guard.RATIOS.values():
        line = next(row for row in out.splitlines() if label in row)
        assert '1.50 [1.40-1.60]' in line and '2.00' in line, line
    assert 'CPU: Test CPU | ISA: avx2' in out


def test_a_ratio_over_its_ceiling_fails_naming_it(guard, tmp_path, capsys):
    slow = guard.Ratio(3.4, 3.1, 3.9)  # FleS 1.7x slower than 2.0
    ratios = measured(guard, 1.5, fles_gelu_8x256x56x56=slow)
    status, out = run(guard, ratios, machine(guard),
                      {'avx2': entry(guard, 2.5)}, tmp_path, capsys)
    assert status == 1
    fails = [line for line in out.splitlines() if line.startswith('FAIL')]
    assert fails == [
        'FAIL: FleS 9x15 / GELU fwd+bwd 8x256x56x56 (fles_gelu_8x256x56x56): '
        '3.40 is over its ceiling 2.50'
    ]
    assert 'speed guard: FAILED' in out


def test_ceiling_is_inclusive(guard):
    rows, failures = guard.judge(measured(guard, 2.0), ceilings(guard, 2.0))
    assert failures == [] and {row[3] for row in rows} == {'ok'}


def test_machine_without_its_isa_takes_the_loosest_and_says_so(guard):
    isas = {'avx2': entry(guard, 2.0), 'avx512': entry(guard, 1.8)}
    isas['avx512']['ceilings']['host_fles_gelu'] = 3.0
    picked, source = guard.pick_ceilings(isas, 'portable')
    assert picked == dict(ceilings(guard, 2.0), host_fles_gelu=3.0)
    assert source.startswith('no ceilings for portable: the loosest of '
                             'avx2, avx512')
    picked, source = guard.pick_ceilings(isas, 'avx512')
    assert picked == isas['avx512']['ceilings']
    assert source == ('ceilings for avx512, set on m at abc1234 '
                      '(2026-11-28)')


def test_report_names_the_fallback(guard, tmp_path, capsys):
    status, out = run(guard, measured(guard,
                                      1.5), machine(guard, isa='avx512'),
                      {'avx2': entry(guard, 2.0)}, tmp_path, capsys)
    assert status == 0
    assert 'no ceilings for avx512: the loosest of avx2 for each ratio' in out


def test_without_the_c_kernels_every_ratio_fails_saying_why(
        guard, tmp_path, capsys):
    from mmact.ops import backends
    with backends.using(cpu_kernels=False):
        ratios = guard.measure(rounds=1, warmup=0, threads=1)
    why = 'the C kernels are switched off (MMACT_DISABLE_CPU_KERNEL=1'
    assert all(
        r.median is None and r.why.startswith(why) for r in ratios.values())
    status, out = run(guard, ratios, machine(guard),
                      {'avx2': entry(guard, 2.0)}, tmp_path, capsys)
    assert status == 1
    fails = [line for line in out.splitlines() if line.startswith('FAIL')]
    assert len(fails) == len(guard.RATIOS)
    for line, (key, label) in zip(fails, guard.RATIOS.items()):
        assert line.startswith(f'FAIL: {label} ({key}): not measured: {why}')


def test_a_failed_build_is_the_reason(guard, monkeypatch):
    from mmact.ops import cpu_build

    def broken():
        warnings.warn('mmact: the CPU kernels are unavailable (RuntimeError: '
                      'no compiler CXX=c++)')

    monkeypatch.setattr(cpu_build, 'extension', broken)
    assert guard.kernel_problem() == (
        'mmact: the CPU kernels are unavailable (RuntimeError: no compiler '
        'CXX=c++)')


def test_a_ratio_measured_off_the_c_kernels_is_not_judged(guard):
    """A case whose call runs no mmact operator is named, not timed as
    the kernels."""
    x = torch.randn(4)
    assert not guard.runs_c_kernels(lambda: torch.sigmoid(x))
    ratios = guard._ratios(
        {
            'a': lambda: torch.sigmoid(x),
            'b': lambda: torch.sigmoid(x)
        }, {'k': ('a', 'b')},
        rounds=2,
        warmup=0)
    assert ratios['k'].why == ('a does not run mmact\'s C kernels (no '
                               'mmact:: operator in its call)')


def test_a_loaded_machine_is_reported_and_still_judged(guard, tmp_path,
                                                       capsys):
    isas = {'avx2': entry(guard, 2.0)}
    status, out = run(guard, measured(guard, 2.5), machine(guard, load=7.3),
                      isas, tmp_path, capsys)
    assert status == 1
    assert ('load average at the start (1 min): 7.30 on 2 cores, LOADED: '
            'above the core count') in out
    assert out.count('is over its ceiling 2.00') == len(guard.RATIOS)
    status, out = run(guard, measured(guard, 1.5), machine(guard, load=1.9),
                      isas, tmp_path, capsys)
    assert status == 0
    assert '1.90 on 2 cores, not above the core count' in out


def test_derive_takes_the_largest_median_with_a_margin(guard):
    runs = [{key: 2.0 for key in guard.RATIOS} for _ in range(3)]
    runs[1]['aglu_silu_16x64x56x56'] = 2.2
    derived, problems = guard.derive(runs)
    assert derived['aglu_silu_16x64x56x56'] == 2.55  # 2.2 * 1.15 -> 2.55
    assert derived['host_fles_gelu'] == 2.3
    assert problems == []
    # a spread so wide that a 1.7x slowdown of the fastest run would pass
    runs[2]['fles_gelu_8x256x56x56'] = 1.3
    derived, problems = guard.derive(runs)
    assert problems == [
        'fles_gelu_8x256x56x56: runs 1.30-2.00, ceiling 2.30 would pass a '
        '1.7x slowdown of 1.30'
    ]


def test_checked_in_ceilings_cover_every_ratio(guard):
    isas = guard.load_ceilings()
    assert isas
    for isa, found in isas.items():
        assert isa in ('avx512', 'avx2', 'portable'), isa
        assert set(found['ceilings']) == set(guard.RATIOS), isa
        assert all(v > 0 for v in found['ceilings'].values())
        for field in ('machine', 'commit', 'date', 'how'):
            assert found[field], (isa, field)
        # an entry not set by guard runs says so, and where it comes from
        assert found['runs'] > 0 or 'provisional' in found['machine'], isa


def test_a_ceiling_of_an_unknown_ratio_is_refused(guard, tmp_path):
    path = tmp_path / 'ceilings.json'
    path.write_text(
        json.dumps({
            'isas': {
                'avx2': dict(entry(guard, 2.0), ceilings={'gelu_x': 1.0})
            }
        }))
    with pytest.raises(
            ValueError,
            match='avx2 has ceilings of unknown '
            r"ratios \['gelu_x'\]"):
        guard.load_ceilings(str(path))
