"""Tests of mmact.ops.cpu_build: ISA choice, build keys, cache refusal,
sources as files, signatures from the headers."""
import ctypes
import os
import os.path as osp
import re

import pytest

from mmact.ops import backends, cpu_build
from mmact.ops.cpu_build import (CSRC, ISAS, BuildKeyMismatch, build_key,
                                 build_library, host_isa, load_library,
                                 parse_prototypes, read_source, supported_isas)

SOURCE = 'int mmact_answer(void) { return 42; }\n'
PROBE_H = '/* the probe */\n#include <stdint.h>\nint64_t mmact_answer(void);\n'
PROBE_C = '#include "probe.h"\nint64_t mmact_answer(void) { return 42; }\n'
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


def test_prototypes_become_ctypes_declarations():
    header = """/* comment with f(int x); inside */
#ifndef X
#include <stdint.h>
void apa_forward(const float* x, float* y, float lmin,
                 int64_t C);  /* spread over lines */
int64_t count(void);
#endif
"""
    found = parse_prototypes(header)
    assert found == {
        'apa_forward':
        (None,
         [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64]),
        'count': (ctypes.c_int64, []),
    }
    with pytest.raises(ValueError, match=r"f\(int h\): C type 'int'"):
        parse_prototypes('void f(int h);')  # no ctypes form: refused


@needs_cc
@pytest.mark.skipif(cpu_build.shutil.which('nm') is None, reason='no nm')
@pytest.mark.parametrize('name', ['apa', 'fles'])
def test_every_exported_function_is_declared_in_the_header(name, tmp_path):
    """The headers are the only declarations: every function the library
    exports (but the two the build adds) is a prototype of its header,
    where Python reads the signatures."""
    import subprocess
    path, _ = build_library(f'mmact_{name}', read_source(name), None,
                            str(tmp_path))
    symbols = subprocess.run(['nm', '-D', '--defined-only', path],
                             capture_output=True,
                             text=True,
                             check=True).stdout.split('\n')
    exported = {
        line.split()[-1]
        for line in symbols if line.split()[1:2] == ['T']
    } - {'mmact_build_key', 'mmact_openmp'}
    with open(osp.join(CSRC, f'{name}.h')) as f:
        assert exported == set(parse_prototypes(f.read()))


def test_sources_inline_their_headers_once():
    source = read_source('apa')
    assert source.count('#define MMACT_PRELUDE_H') == 1
    assert source.count('#define MMACT_APA_H') == 1
    assert '#line 1 "csrc/apa.h"' in source
    assert '#include "' not in source
    # the operators' build key covers the kernels they compile in
    operators = read_source('apa_op.cpp')
    assert operators.count('#define MMACT_APA_H') == 1
    assert 'aglu_backward_rebuilt' in operators
    assert operators.count('#define MMACT_OP_NODE_H') == 1
    fles_operator = read_source('fles_op.cpp')
    assert fles_operator.count('#define MMACT_FLES_H') == 1
    assert fles_operator.count('#define MMACT_OP_NODE_H') == 1


@needs_cc
def test_sources_are_package_data(tmp_path):
    """pip install . ships the C files (setup.py's package_data)."""
    import shutil
    import subprocess
    import sys
    import zipfile
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    # A copy: the build writes build/ and *.egg-info next to setup.py, which
    # must not happen in a checkout another test run may be using.
    source = tmp_path / 'source'
    shutil.copytree(
        root,
        source,
        ignore=shutil.ignore_patterns('.venv*', '.git', 'build', 'data',
                                      'work_dirs', '*.egg-info', '__pycache__',
                                      '.pytest_cache'))
    subprocess.run([
        sys.executable, '-m', 'pip', 'wheel', '--no-deps',
        '--no-build-isolation', '-q', '-w',
        str(tmp_path),
        str(source)
    ],
                   check=True,
                   capture_output=True)
    wheel, = tmp_path.glob('mmact-*.whl')
    names = set(zipfile.ZipFile(wheel).namelist())
    for file in ('apa.c', 'apa.h', 'apa_op.cpp', 'fles.c', 'fles.h',
                 'fles_op.cpp', 'op_node.h', 'prelude.h'):
        assert f'mmact/ops/csrc/{file}' in names


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
    src_dir = tmp_path / 'csrc'
    src_dir.mkdir()
    (src_dir / 'probe.h').write_text(PROBE_H)
    (src_dir / 'probe.c').write_text(PROBE_C)
    monkeypatch.setenv('MMACT_CACHE_DIR', str(tmp_path))
    monkeypatch.setattr(cpu_build, '_libraries', {})
    source = read_source('probe', str(src_dir))
    path, key = build_library('mmact_probe', source)
    # plant a library with another key at this machine's path
    foreign, _ = build_library('mmact_probe', source + '\n', None,
                               str(tmp_path / 'elsewhere'))
    cpu_build.shutil.copy(foreign, path)
    with pytest.raises(BuildKeyMismatch):
        load_library(path, key)
    with backends.using(cpu_kernels=True):
        lib = cpu_build.get_library('probe', str(src_dir))
    # declared from the header: the int64_t comes back whole
    assert lib is not None and lib['mmact_answer']() == 42
    assert load_library(path, key) is not None


@pytest.mark.skipif(
    cpu_build.platform.system() != 'Linux', reason='builds run on Linux only')
def test_clang_or_a_missing_compiler_is_named(tmp_path, monkeypatch):
    """The flags are gcc's and clang's OpenMP runtime is not torch's: CC /
    CXX naming clang (or nothing) is refused with the variable's name, and
    the op falls back to torch with that message."""
    clang = tmp_path / 'clang'
    clang.write_text('#!/bin/sh\necho "Debian clang version 14.0.6"\n')
    clang.chmod(0o755)
    monkeypatch.setenv('CC', str(clang))
    monkeypatch.setenv('CXX', str(clang))
    with pytest.raises(RuntimeError, match=r'CC=.*clang.*set CC=gcc'):
        build_library('probe', SOURCE, 'portable', str(tmp_path))
    with pytest.raises(RuntimeError, match=r'CXX=.*clang.*set CXX=g\+\+'):
        cpu_build.build_operators('apa_op.cpp', cache_dir=str(tmp_path))
    monkeypatch.setattr(cpu_build, '_libraries', {})
    with backends.using(cpu_kernels=True), pytest.warns(
            UserWarning, match='unavailable.*set CC=gcc'):
        assert cpu_build.get_library('apa') is None
    monkeypatch.setenv('CC', str(tmp_path / 'none'))
    with pytest.raises(RuntimeError, match='no compiler CC=.*none'):
        build_library('probe', SOURCE, 'portable', str(tmp_path))


def test_switched_off(monkeypatch):
    monkeypatch.setattr(cpu_build, '_libraries', {})
    with backends.using(cpu_kernels=False):
        assert cpu_build.get_library('apa') is None


def test_build_finds_the_environments_ninja(monkeypatch, tmp_path):
    """pip's ninja in a virtualenv that is not activated is found: the
    Python's scripts directory goes on the build's PATH when ninja is not
    on PATH already."""
    import sys

    from mmact.ops.cpu_build import _build_path
    scripts = tmp_path / 'bin'
    scripts.mkdir()
    ninja = scripts / 'ninja'
    ninja.write_text('#!/bin/sh\n')
    ninja.chmod(0o755)
    monkeypatch.setattr(sys, 'executable', str(scripts / 'python'))
    monkeypatch.setenv('PATH', str(tmp_path / 'elsewhere'))
    assert _build_path().split(os.pathsep)[-1] == str(scripts)
    monkeypatch.setenv('PATH', str(scripts))
    assert _build_path() == str(scripts)


@needs_cc
@pytest.mark.slow
def test_import_and_first_calls_are_quiet():
    """``import mmact`` and the first APA / AGLU / FleS calls print nothing
    on a machine without CUDA once the operators are in the cache (torch's
    extension builder, whose import says that no CUDA runtime was found, is
    not imported then); a run that builds them logs one INFO line per
    operator file, naming it and the time it took."""
    import subprocess
    import sys
    code = ('import mmact\n'
            'import torch\n'
            'from mmact.models.activations import AGLU, APA, FleS\n'
            'x = torch.randn(2, 8, 6, 6, requires_grad=True)\n'
            'for act in (AGLU(), APA(), FleS(8, reduction=4)):\n'
            '    act(x).sum().backward()\n'
            'from mmact.ops import cpu_build\n'
            "assert cpu_build.get_operators('apa_op.cpp') is not None\n"
            "assert cpu_build.get_operators('fles_op.cpp') is not None\n")
    # the second run loads the cached builds without torch's builder
    cached = ('import sys\n'
              "assert 'torch.utils.cpp_extension' not in sys.modules\n")
    runs = [
        subprocess.run([sys.executable, '-c', code + extra],
                       capture_output=True,
                       text=True,
                       timeout=600) for extra in ('', cached)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    first = runs[0].stdout + runs[0].stderr
    assert 'CUDA' not in first
    # what the first run may say: the builds it made, at INFO
    built = re.findall(
        r'INFO - mmact: built the CPU operators (\w+\.cpp) '
        r'\((?:avx512|avx2|portable)\) in [\d.]+ s', first)
    assert len(built) == len(first.splitlines()) and len(
        set(built)) == len(built)
    assert runs[1].stdout + runs[1].stderr == ''


def test_a_new_operator_build_is_logged_once(tmp_path, monkeypatch):
    """build_operators logs what it compiled and how long it took, at INFO,
    and marks the build complete; loading an existing build logs nothing."""
    import importlib.machinery
    import importlib.util
    import logging
    import types
    logged = []
    monkeypatch.setattr(cpu_build, 'print_log',
                        lambda msg, logger, level: logged.append((msg, level)))
    monkeypatch.setattr(cpu_build, '_gcc', lambda *args: COMPILER)
    (tmp_path / 'probe.cpp').write_text('// probe\n')

    def load(name, build_directory, **kwargs):
        # what torch's builder leaves: the library, then the call returns
        open(osp.join(build_directory, f'{name}.so'), 'w').close()
        return types.SimpleNamespace(name=name)

    monkeypatch.setattr(cpu_build, '_cpp_extension',
                        lambda: types.SimpleNamespace(load=load))
    module = cpu_build.build_operators('probe.cpp', str(tmp_path), 'portable',
                                       str(tmp_path / 'cache'))
    assert module.name == 'mmact_probe'
    (msg, level), = logged
    assert level == logging.INFO
    assert re.match(
        r'mmact: built the CPU operators probe\.cpp \(portable\) in '
        r'[\d.]+ s into .*cache/mmact_probe_portable_', msg), msg
    build_dir, = (tmp_path / 'cache').iterdir()
    assert (build_dir / 'mmact-complete').is_file()
    # torch's builder finding the library already there: no log line
    (build_dir / 'mmact-complete').unlink()
    cpu_build.build_operators('probe.cpp', str(tmp_path), 'portable',
                              str(tmp_path / 'cache'))
    assert len(logged) == 1 and (build_dir / 'mmact-complete').is_file()
    # a marked build whose library was removed is built again
    (build_dir / 'mmact_probe.so').unlink()
    cpu_build.build_operators('probe.cpp', str(tmp_path), 'portable',
                              str(tmp_path / 'cache'))
    assert len(logged) == 2 and (build_dir / 'mmact_probe.so').is_file()
    # a damaged library under the mark goes back to torch's builder ...
    (build_dir / 'mmact_probe.so').write_text('not a library')
    assert cpu_build.build_operators('probe.cpp', str(tmp_path), 'portable',
                                     str(tmp_path /
                                         'cache')).name == 'mmact_probe'
    # ... and a whole one is imported without it
    (build_dir / 'mmact_probe.so').write_text('CACHED = True\n')

    def unused():
        raise AssertionError('the builder was imported for a cached build')

    monkeypatch.setattr(cpu_build, '_cpp_extension', unused)
    monkeypatch.setattr(
        cpu_build.importlib.util, 'spec_from_file_location',
        lambda name, path: importlib.util.spec_from_loader(
            name, importlib.machinery.SourceFileLoader(name, path)))
    assert cpu_build.build_operators('probe.cpp', str(tmp_path), 'portable',
                                     str(tmp_path / 'cache')).CACHED


def test_the_builders_cuda_notice_is_silenced(tmp_path):
    """torch's extension builder, imported on a machine with a CUDA toolkit
    (CUDA_HOME) and no GPU, says no CUDA runtime was found; imported by
    mmact to build CPU operators, it says nothing."""
    import subprocess
    import sys

    import torch
    if torch.cuda.is_available():
        pytest.skip('a GPU is present: torch gives no notice')
    env = dict(os.environ, CUDA_HOME=str(tmp_path))

    def output(code):
        run = subprocess.run([sys.executable, '-c', code],
                             env=env,
                             capture_output=True,
                             text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout + run.stderr

    assert 'No CUDA runtime' in output('import torch.utils.cpp_extension')
    assert output('from mmact.ops.cpu_build import _cpp_extension\n'
                  '_cpp_extension()') == ''
