"""Tests of mmact.ops.cpu_build: ISA choice, build keys, sources as files
and package data, the compiler, the cache and a quiet build of the CPU
extension."""
import os
import os.path as osp
import platform
import re
import shutil
import subprocess
import sys
import types

import pytest

from mmact.ops import cpu_build
from mmact.ops.cpu_build import (CSRC, ISAS, SOURCES, build_extension,
                                 build_key, compiler_flags, host_isa,
                                 read_source, supported_isas)

SOURCES_TEXT = ('// one unit\n', '// another unit\n')
COMPILER = ('/usr/bin/c++', 'c++ 1.0')
FAKE_GCC = 'c++ (GCC) 0.0, a stand-in'

needs_cxx = pytest.mark.skipif(
    shutil.which(os.environ.get('CXX', 'c++')) is None
    or platform.system() != 'Linux',
    reason='no C++ compiler on Linux: nothing is built')


def _python(code: str, env: dict) -> str:
    """stdout + stderr of ``python -c code`` under ``env``, which must
    succeed."""
    done = subprocess.run([sys.executable, '-c', code],
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _executable(path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_supported_isas_follow_cpu_flags(monkeypatch):
    monkeypatch.setattr(platform, 'machine', lambda: 'x86_64')
    avx512 = {'avx512f', 'avx512dq', 'avx512bw', 'avx512vl', 'avx2', 'fma'}
    assert supported_isas(frozenset(avx512)) == list(ISAS)
    assert supported_isas(frozenset({'avx2', 'fma',
                                     'sse2'})) == ['avx2', 'portable']
    assert supported_isas(frozenset({'avx512f', 'avx2'})) == ['portable']
    monkeypatch.setattr(platform, 'machine', lambda: 'aarch64')
    assert supported_isas(frozenset(avx512)) == ['portable']


def test_host_isa_override(monkeypatch):
    monkeypatch.setenv('MMACT_CPU_ISA', 'portable')
    assert host_isa() == 'portable'
    monkeypatch.setenv('MMACT_CPU_ISA', 'sse9')
    with pytest.raises(ValueError, match='MMACT_CPU_ISA'):
        host_isa()
    monkeypatch.delenv('MMACT_CPU_ISA')
    assert host_isa() == supported_isas()[0]


def test_build_key_depends_on_sources_isa_flags_compiler_cpu_and_torch(
        monkeypatch):
    """One key per build: every source text, the ISA and compiler flags,
    the compiler, the CPU, the torch version, install and C++ ABI and the
    Python ABI name it."""

    def key(sources=SOURCES_TEXT,
            isa='avx2',
            compiler=COMPILER,
            model='EPYC',
            flags=frozenset({'avx2'}),
            cc_flags=None):
        return build_key(sources, isa, compiler, model, flags, cc_flags)

    base = key()
    assert base == key(list(SOURCES_TEXT))
    assert base == key(cc_flags=compiler_flags('avx2'))
    one, two = SOURCES_TEXT
    others = [
        key(model='Xeon'),
        key(flags=frozenset({'avx2', 'avx512f'})),
        key(compiler=('/usr/bin/c++', 'c++ 2.0')),
        key((one + ' ', two)),
        key((one, two + ' ')),
        key((one, )),
        key(isa='portable'),
        key(cc_flags=compiler_flags('avx2') + ['-O2']),
    ]
    patches = [
        (cpu_build.torch, '__version__', '0.0.0'),
        (cpu_build.torch, '__file__', '/elsewhere/torch/__init__.py'),
        (cpu_build.torch._C, '_GLIBCXX_USE_CXX11_ABI',
         not cpu_build.torch._C._GLIBCXX_USE_CXX11_ABI),
        (cpu_build.sys.implementation, 'cache_tag', 'cpython-00'),
    ]
    for owner, name, value in patches:
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, value)
            others.append(key())
    assert base == key()  # the patches are undone
    assert base not in others and len(set(others)) == len(others)
    # this CPU's model and flags by default
    assert build_key(SOURCES_TEXT, 'portable', COMPILER) == key(
        isa='portable',
        model=cpu_build.cpu_model(),
        flags=cpu_build.cpu_flags())
    with pytest.raises(ValueError, match='isa'):
        build_key(SOURCES_TEXT, 'sse9', COMPILER)


def test_sources_inline_their_headers_once():
    source = read_source('apa')
    assert source.count('#define MMACT_PRELUDE_H') == 1
    assert source.count('#define MMACT_APA_H') == 1
    assert '#line 1 "csrc/apa.h"' in source
    assert '#include "' not in source
    # the build key covers the kernels each unit compiles in, every local
    # header once (op_node.h: included by the unit and by fles_mlp.h)
    operators = read_source('apa_op.cpp')
    assert operators.count('#define MMACT_APA_H') == 1
    assert 'aglu_backward_rebuilt' in operators
    assert operators.count('#define MMACT_OP_NODE_H') == 1
    fles_operator = read_source('fles_op.cpp')
    assert fles_operator.count('#define MMACT_FLES_H') == 1
    assert fles_operator.count('#define MMACT_FLES_MLP_H') == 1
    assert fles_operator.count('#define MMACT_OP_NODE_H') == 1
    assert 'int64_t fles_stats_run(' in fles_operator  # fles.c
    assert '#include "' not in fles_operator
    assert operators.count('#define MMACT_PYTHON_ENTRIES_H') == 1
    # the module's unit declares the entries without torch's headers
    module = read_source('module.cpp')
    assert module.count('#define MMACT_PYTHON_ENTRIES_H') == 1
    assert 'MMACT_OP_NODE_H' not in module and '#include <torch' not in module
    assert 'python_fles' in module
    assert SOURCES == ('apa_op.cpp', 'fles_op.cpp', 'module.cpp')


def test_sources_are_package_data(tmp_path):
    """pip install . ships every file of csrc (setup.py's package_data):
    the extension's units and every header they include."""
    import shutil
    import subprocess
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
    prefix = 'mmact/ops/csrc/'
    shipped = {
        name[len(prefix):]
        for name in zipfile.ZipFile(wheel).namelist()
        if name.startswith(prefix)
    }
    assert {*SOURCES, 'fles_mlp.h', 'op_node.h', 'prelude.h'} <= shipped
    assert set(os.listdir(CSRC)) <= shipped


FAILED_BUILD = """
import warnings
from mmact.ops import backends, cpu_build
warnings.simplefilter('always')
with backends.using(cpu_kernels=False):
    with warnings.catch_warnings(record=True) as off:
        assert cpu_build.extension() is None
with backends.using(cpu_kernels=True):
    with warnings.catch_warnings(record=True) as first:
        assert cpu_build.extension() is None
    with warnings.catch_warnings(record=True) as again:
        assert cpu_build.extension() is None
for caught in (off, first, again):
    print(len(caught), *(str(w.message) for w in caught))
"""


@pytest.mark.skipif(
    platform.system() != 'Linux', reason='builds run on Linux only')
def test_clang_or_a_missing_compiler_is_named(tmp_path, monkeypatch):
    """The flags are gcc's and clang's OpenMP runtime is not torch's: CXX
    naming clang (or nothing) is refused with the variable's name, and the
    ops fall back to torch with that message, warned once; with the C
    kernels switched off nothing is built or remembered (a fresh process,
    started with them off: its first call with them on tries the build)."""
    clang = _executable(tmp_path / 'clang',
                        '#!/bin/sh\necho "Debian clang version 14.0.6"\n')
    monkeypatch.setenv('CXX', clang)
    with pytest.raises(RuntimeError, match=r'CXX=.*clang.*set CXX=g\+\+'):
        build_extension('portable', str(tmp_path))
    cache = tmp_path / 'cache'
    out = _python(
        FAILED_BUILD,
        dict(
            os.environ,
            CXX=clang,
            MMACT_CACHE_DIR=str(cache),
            MMACT_DISABLE_CPU_KERNEL='1'))
    # stdout first; torch 2.1 adds a ResourceWarning of its own at exit
    off, first, again = out.splitlines()[:3]
    assert off == '0' and again == '0'
    assert re.fullmatch(
        r'1 mmact: the CPU kernels are unavailable \(RuntimeError: '
        r'CXX=.*clang.*set CXX=g\+\+.*', first), first
    assert not cache.exists()
    monkeypatch.setenv('CXX', str(tmp_path / 'none'))
    with pytest.raises(RuntimeError, match='no compiler CXX=.*none'):
        build_extension('portable', str(tmp_path))
    assert not list(tmp_path.glob('mmact_cpu_*'))  # nothing was started


@pytest.fixture
def fake_builder(tmp_path, monkeypatch):
    """torch's extension builder stood in for: its ``load`` records what it
    was given (the sources, the ``PATH`` it ran under, whether the library
    was there), writes the library and returns; ``$CXX`` is a script that
    says it is a gcc. Returns ``(compiler, loads)``."""
    from torch.utils import cpp_extension
    gcc = _executable(tmp_path / 'g++', f'#!/bin/sh\necho "{FAKE_GCC}"\n')
    monkeypatch.setenv('CXX', gcc)
    loads = []

    def load(name, sources, build_directory, **kwargs):
        # what torch's builder leaves: the library, then the call returns
        library = osp.join(build_directory, f'{name}.so')
        loads.append((sources, os.environ['PATH'], osp.exists(library)))
        open(library, 'w').close()
        return types.SimpleNamespace(name=name)

    monkeypatch.setattr(cpp_extension, 'load', load)
    return (gcc, FAKE_GCC), loads


def _fake_sources(tmp_path):
    source_dir = tmp_path / 'csrc'
    source_dir.mkdir()
    for name in SOURCES:
        (source_dir / name).write_text(f'// {name}\n')
    return str(source_dir)


def test_build_finds_the_environments_ninja(monkeypatch, tmp_path,
                                            fake_builder):
    """pip's ninja in a virtualenv that is not activated is found: the
    Python's scripts directory goes on the build's PATH when ninja is not
    on PATH already, and PATH is restored after."""
    _, loads = fake_builder
    source_dir = _fake_sources(tmp_path)
    scripts = tmp_path / 'bin'
    scripts.mkdir()
    _executable(scripts / 'ninja', '#!/bin/sh\n')
    monkeypatch.setattr(sys, 'executable', str(scripts / 'python'))
    elsewhere = str(tmp_path / 'elsewhere')
    monkeypatch.setenv('PATH', elsewhere)
    build_extension('portable', str(tmp_path / 'a'), source_dir)
    monkeypatch.setenv('PATH', str(scripts))
    build_extension('portable', str(tmp_path / 'b'), source_dir)
    assert [path for _, path, _ in loads] == [
        elsewhere + os.pathsep + str(scripts),
        str(scripts)
    ]
    assert os.environ['PATH'] == str(scripts)


def _objects_of_the_suites_build(cache) -> None:
    """Copy the compiled objects and ninja's records (not the library or
    its marks) of the extension the suite runs (the default cache's, built
    once per run) into ``cache``, under the same folder name: a build there
    links them, where compiling would repeat the suite's build. The folder
    is named by the build key, so objects of other sources, flags or torch
    are never met: a build of another key compiles from scratch."""
    module = cpu_build.load_extension()
    if module is None:
        return
    suites = osp.dirname(osp.abspath(module.__file__))
    folder = cache / osp.basename(suites)
    folder.mkdir()
    with cpu_build.build_lock(suites):  # whole, not mid-build
        for name in os.listdir(suites):
            if name.endswith('.o') or name in ('build.ninja', '.ninja_log',
                                               '.ninja_deps'):
                shutil.copy2(osp.join(suites, name), folder / name)


@needs_cxx
@pytest.mark.slow
def test_import_and_first_calls_are_quiet(tmp_path):
    """``import mmact`` and the first APA / AGLU / FleS calls print nothing
    on a machine without CUDA once the extension is in the cache (torch's
    extension builder, whose import says that no CUDA runtime was found, is
    not imported then); the run that builds it logs one INFO line, naming
    the ISA, the time it took and the folder. The cache starts with the
    compiled objects of the suite's own build and no library
    (:func:`_objects_of_the_suites_build`): torch's builder runs as on a
    first use, and links."""
    code = ('import mmact\n'
            'import torch\n'
            'from mmact.models.activations import AGLU, APA, FleS\n'
            'x = torch.randn(2, 8, 6, 6, requires_grad=True)\n'
            'for act in (AGLU(), APA(), FleS(8, reduction=4)):\n'
            '    act(x).sum().backward()\n'
            'from mmact.ops import cpu_build\n'
            'assert cpu_build.extension() is not None\n')
    # the second run loads the cached build without torch's builder
    cached = ('import sys\n'
              "assert 'torch.utils.cpp_extension' not in sys.modules\n")
    env = dict(os.environ, MMACT_CACHE_DIR=str(tmp_path))

    def run(code):
        return _python(code, env)

    _objects_of_the_suites_build(tmp_path)
    isa = host_isa()
    built = (r'.* INFO - mmact: built the CPU extension \(' + isa +
             r'\) in [\d.]+ s into ' + re.escape(str(tmp_path)) +
             r'/mmact_cpu_' + isa + r'_[0-9a-f]{16}\n')
    first = run(code)
    assert 'CUDA' not in first and re.fullmatch(built, first), first
    assert run(code + cached) == ''
    # a damaged library in the cache: linked again, with the log line
    library, = tmp_path.glob('mmact_cpu_*/mmact_cpu.so')
    library.write_text('not a library')
    again = run(code)
    assert re.fullmatch(built, again), again


def test_a_new_build_is_logged_once(tmp_path, monkeypatch, fake_builder):
    """build_extension hands torch's builder the sources, logs what it
    compiled and how long it took, at INFO, and marks the build complete;
    loading an existing build logs nothing, a removed or damaged library
    goes back to the builder, a cache where the mark cannot be written
    still loads, and a CPU with other flags gets a build of its own."""
    import importlib.machinery
    import importlib.util
    import logging

    from torch.utils import cpp_extension
    compiler, loads = fake_builder
    logged = []
    monkeypatch.setattr(cpu_build, 'print_log',
                        lambda msg, logger, level: logged.append((msg, level)))
    source_dir = _fake_sources(tmp_path)
    cache = str(tmp_path / 'cache')

    def build():
        return build_extension('portable', cache, source_dir)

    assert build().name == 'mmact_cpu'
    (msg, level), = logged
    assert level == logging.INFO
    build_dir, = (tmp_path / 'cache').iterdir()
    assert re.fullmatch(
        r'mmact: built the CPU extension \(portable\) in [\d.]+ s into ' +
        re.escape(str(build_dir)), msg), msg
    key = build_key([read_source(name, source_dir) for name in SOURCES],
                    'portable', compiler)
    assert build_dir.name == f'mmact_cpu_portable_{key[:16]}'
    assert (build_dir / 'mmact-complete').is_file()
    sources = [osp.join(source_dir, name) for name in SOURCES]
    assert [(s, exists) for s, _, exists in loads] == [(sources, False)]
    # torch's builder finding the library already there: no log line
    (build_dir / 'mmact-complete').unlink()
    build()
    assert len(logged) == 1 and (build_dir / 'mmact-complete').is_file()
    # a marked build whose library was removed is built again
    (build_dir / 'mmact_cpu.so').unlink()
    build()
    assert len(logged) == 2 and (build_dir / 'mmact_cpu.so').is_file()
    # a cache where the mark cannot be written (read-only): still loaded
    (build_dir / 'mmact-complete').unlink()

    def unwritable(file, *args, **kwargs):
        if osp.basename(file) == 'mmact-complete':
            raise PermissionError(13, 'Read-only file system', file)
        return open(file, *args, **kwargs)

    monkeypatch.setattr(cpu_build, 'open', unwritable, raising=False)
    assert build().name == 'mmact_cpu'
    assert not (build_dir / 'mmact-complete').exists() and len(loads) == 4
    monkeypatch.delattr(cpu_build, 'open')
    # a CPU with other flags (a shared home directory): a build of its own
    with monkeypatch.context() as patch:
        patch.setattr(cpu_build, 'cpu_flags', lambda: frozenset({'other'}))
        build()
    assert len(logged) == 3 and len(list((tmp_path / 'cache').iterdir())) == 2
    build()
    assert len(loads) == 6 and (build_dir / 'mmact-complete').is_file()
    # a damaged library under the mark goes back to torch's builder,
    # removed (ninja would keep a library newer than its objects) ...
    (build_dir / 'mmact_cpu.so').write_text('not a library')
    assert build().name == 'mmact_cpu' and len(loads) == 7
    assert not loads[-1][2] and len(logged) == 4
    # ... and a whole one is imported without it
    (build_dir / 'mmact_cpu.so').write_text('CACHED = True\n')

    def unused(*args, **kwargs):
        raise AssertionError('the builder ran for a cached build')

    monkeypatch.setattr(cpp_extension, 'load', unused)
    monkeypatch.setattr(
        importlib.util, 'spec_from_file_location',
        lambda name, path: importlib.util.spec_from_loader(
            name, importlib.machinery.SourceFileLoader(name, path)))
    assert build().CACHED
    assert len(logged) == 4


MODULE_CPP = """#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "mmact_cpu"};
PyMODINIT_FUNC PyInit_mmact_cpu(void) { return PyModule_Create(&def); }
"""


@needs_cxx
def test_the_builders_cuda_notice_is_silenced(tmp_path):
    """torch's extension builder, imported on a machine with a CUDA toolkit
    (CUDA_HOME) and no GPU, says no CUDA runtime was found; imported by
    mmact to build its CPU extension (here a small stand-in), it says
    nothing: the build's log line is all."""
    import torch
    if torch.cuda.is_available():
        pytest.skip('a GPU is present: torch gives no notice')
    source_dir = tmp_path / 'csrc'
    source_dir.mkdir()
    for name in SOURCES:
        (source_dir / name).write_text(
            MODULE_CPP if name == 'module.cpp' else f'// {name}\n')
    cache = tmp_path / 'cache'
    env = dict(os.environ, CUDA_HOME=str(tmp_path))
    assert 'No CUDA runtime' in _python('import torch.utils.cpp_extension',
                                        env)
    out = _python(
        'from mmact.ops.cpu_build import build_extension\n'
        f'build_extension("portable", {str(cache)!r}, {str(source_dir)!r})',
        env)
    assert re.fullmatch(
        r'.* INFO - mmact: built the CPU extension \(portable\) in [\d.]+ '
        r's into ' + re.escape(str(cache)) + r'/mmact_cpu_portable_\w+\n',
        out), out
