"""Tests of mmact.ops.cpu_build: ISA choice, build keys, cache refusal."""
import pytest

from mmact.ops import cpu_build
from mmact.ops.cpu_build import (ISAS, BuildKeyMismatch, build_key,
                                 build_library, host_isa, load_library,
                                 split_ranges, supported_isas)

SOURCE = 'int mmact_answer(void) { return 42; }\n'
COMPILER = ('/usr/bin/cc', 'cc 1.0')

needs_cc = pytest.mark.skipif(
    cpu_build._compiler() is None or cpu_build.platform.system() != 'Linux',
    reason='no C compiler on Linux: nothing is built')


def test_supported_isas_follow_cpu_flags(monkeypatch):
    monkeypatch.setattr(cpu_build.platform, 'machine', lambda: 'x86_64')
    avx512 = {'avx512f', 'avx512dq', 'avx512bw', 'avx512vl', 'avx2', 'fma'}
    assert supported_isas(frozenset(avx512)) == list(ISAS)
    assert supported_isas(frozenset({'avx2', 'fma',
                                     'sse2'})) == ['avx2', 'portable']
    assert supported_isas(frozenset({'avx512f', 'avx2'})) == ['portable']
    monkeypatch.setattr(cpu_build.platform, 'machine', lambda: 'aarch64')
    assert supported_isas(frozenset(avx512)) == ['portable']


def test_host_isa_override(monkeypatch):
    monkeypatch.setenv('MMACT_CPU_ISA', 'portable')
    assert host_isa() == 'portable'
    monkeypatch.setenv('MMACT_CPU_ISA', 'sse9')
    with pytest.raises(ValueError, match='MMACT_CPU_ISA'):
        host_isa()
    monkeypatch.delenv('MMACT_CPU_ISA')
    assert host_isa() == supported_isas()[0]


def test_build_key_depends_on_cpu_compiler_source_and_isa():
    base = build_key(SOURCE, 'avx2', COMPILER, 'EPYC', frozenset({'avx2'}))
    assert base == build_key(SOURCE, 'avx2', COMPILER, 'EPYC',
                             frozenset({'avx2'}))
    others = [
        build_key(SOURCE, 'avx2', COMPILER, 'Xeon', frozenset({'avx2'})),
        build_key(SOURCE, 'avx2', COMPILER, 'EPYC',
                  frozenset({'avx2', 'avx512f'})),
        build_key(SOURCE, 'avx2', ('/usr/bin/cc', 'cc 2.0'), 'EPYC',
                  frozenset({'avx2'})),
        build_key(SOURCE + ' ', 'avx2', COMPILER, 'EPYC', frozenset({'avx2'})),
        build_key(SOURCE, 'portable', COMPILER, 'EPYC', frozenset({'avx2'})),
    ]
    assert base not in others and len(set(others)) == len(others)
    with pytest.raises(ValueError, match='isa'):
        build_key(SOURCE, 'sse9', COMPILER)


def test_split_ranges():
    assert split_ranges(10, 100, threads=4) == [(0, 10)]
    ranges = split_ranges(1000, 100, align=64, threads=3)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1000
    assert all(s % 64 == 0 for s, _ in ranges) and len(ranges) <= 3


@needs_cc
def test_library_of_another_machine_is_refused(tmp_path, monkeypatch):
    path, key = build_library('probe', SOURCE, 'portable', str(tmp_path))
    assert load_library(path, key).mmact_answer() == 42
    # the same file looked up by a machine with other CPU flags
    monkeypatch.setattr(cpu_build, 'cpu_flags',
                        lambda: frozenset({'avx2', 'fma', 'other'}))
    other_path, other_key = build_library('probe', SOURCE, 'portable',
                                          str(tmp_path))
    assert other_key != key and other_path != path
    with pytest.raises(BuildKeyMismatch):
        load_library(path, other_key)


@needs_cc
def test_get_library_rebuilds_a_foreign_library(tmp_path, monkeypatch):
    monkeypatch.setenv('MMACT_CACHE_DIR', str(tmp_path))
    monkeypatch.delenv('MMACT_DISABLE_CPU_KERNEL', raising=False)
    monkeypatch.setattr(cpu_build, '_libraries', {})
    path, key = build_library('probe', SOURCE)
    # plant a library with another key at this machine's path
    foreign, _ = build_library('probe', SOURCE + '\n', None,
                               str(tmp_path / 'elsewhere'))
    cpu_build.shutil.copy(foreign, path)
    with pytest.raises(BuildKeyMismatch):
        load_library(path, key)
    lib = cpu_build.get_library('probe', SOURCE)
    assert lib is not None and lib.lib.mmact_answer() == 42
    assert load_library(path, key) is not None


def test_disabled(monkeypatch):
    monkeypatch.setenv('MMACT_DISABLE_CPU_KERNEL', '1')
    monkeypatch.setattr(cpu_build, '_libraries', {})
    assert cpu_build.get_library('probe', SOURCE) is None
