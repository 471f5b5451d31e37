"""Tests of mmact.ops.cuda_build and the MMACT_CUDA_KERNELS setting: the
toolkit found through a wrapper script, the version match, architectures,
the build key, the cache, the lock (one build for ranks starting together,
none blocked by a build that died), the fallback with one log line, and
(slow) the real compile for sm_80 / sm_90."""
import json
import os
import os.path as osp
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from mmact.ops import backends, cpu_build, cuda_build
from mmact.ops.apa import cpu
from mmact.ops.apa.dispatch import implementation
from mmact.ops.cuda_build import (SOURCE, Toolkit, build_key, build_library,
                                  check_toolkit, covers, find_toolkit,
                                  parse_arch)

TORCH_MAJOR = int(torch.version.cuda.split('.')[0]) if torch.version.cuda \
    else None
# the fake nvcc: --version and --list-gpu-arch as nvcc prints them; a
# compile appends its arguments to $FAKE_NVCC_LOG, sleeps $FAKE_NVCC_SLEEP
# seconds, exits $FAKE_NVCC_EXIT (when set) or writes the -o file
FAKE_NVCC = """#!/usr/bin/env python3
import os, sys, time
args = sys.argv[1:]
if args == ['--version']:
    print('nvcc: NVIDIA (R) Cuda compiler driver')
    print('Cuda compilation tools, release {major}.4, V{major}.4.99')
elif args == ['--list-gpu-arch']:
    print('\\n'.join('compute_%d' % a for a in (75, 80, 86, 89, 90, 100)))
else:
    with open(os.environ['FAKE_NVCC_LOG'], 'a') as f:
        f.write(' '.join(args) + '\\n')
    time.sleep(float(os.environ.get('FAKE_NVCC_SLEEP', '0')))
    if os.environ.get('FAKE_NVCC_EXIT'):
        sys.stderr.write('apa_cuda.cu(1): error: a stand-in failure\\n')
        sys.exit(int(os.environ['FAKE_NVCC_EXIT']))
    open(args[args.index('-o') + 1], 'w').close()
"""


def _toolkit(root, major):
    """A stand-in toolkit of CUDA ``major``.4 under ``root``."""
    home = root / f'cuda-{major}.4'
    (home / 'bin').mkdir(parents=True)
    (home / 'include').mkdir()
    (home / 'include' / 'cuda_runtime.h').write_text('')
    nvcc = home / 'bin' / 'nvcc'
    nvcc.write_text(FAKE_NVCC.format(major=major))
    nvcc.chmod(0o755)
    return home


@pytest.fixture
def fake_toolkit(tmp_path, monkeypatch):
    """A toolkit of torch's CUDA major version, reached as the machines
    reach theirs: through an ``nvcc`` wrapper script on PATH outside the
    toolkit; compiles are logged to ``tmp_path/nvcc.log``."""
    if TORCH_MAJOR is None:
        pytest.skip('torch without CUDA: no CUDA version to match')
    home = _toolkit(tmp_path / 'opt', TORCH_MAJOR)
    wrapper = tmp_path / 'bin' / 'nvcc'
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {home}/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv('PATH', f'{wrapper.parent}{os.pathsep}'
                       f'{os.environ["PATH"]}')
    monkeypatch.delenv('CUDA_HOME', raising=False)
    monkeypatch.delenv('CUDA_PATH', raising=False)
    monkeypatch.setenv('FAKE_NVCC_LOG', str(tmp_path / 'nvcc.log'))
    monkeypatch.setenv('MMACT_CACHE_DIR', str(tmp_path / 'cache'))
    return home


def _compiles(tmp_path):
    log = tmp_path / 'nvcc.log'
    return log.read_text().splitlines() if log.exists() else []


def test_toolkit_found_through_the_nvcc_wrapper(fake_toolkit, monkeypatch):
    """The nvcc on PATH is a script outside the toolkit (torch's guess from
    it finds no headers): the toolkit is the one the script runs."""
    toolkit = find_toolkit()
    assert toolkit.home == str(fake_toolkit)
    assert toolkit.nvcc == str(fake_toolkit / 'bin' / 'nvcc')
    assert toolkit.version == (TORCH_MAJOR, 4)
    assert toolkit.version_line == (f'Cuda compilation tools, release '
                                    f'{TORCH_MAJOR}.4, V{TORCH_MAJOR}.4.99')
    check_toolkit(toolkit)  # the major version is torch's
    # CUDA_HOME comes first, and must be a toolkit
    monkeypatch.setenv('CUDA_HOME', str(fake_toolkit.parent))
    with pytest.raises(RuntimeError, match='CUDA_HOME=.* is not a CUDA'):
        find_toolkit()


def test_toolkit_of_another_major_version_is_refused(tmp_path, monkeypatch):
    other = _toolkit(tmp_path, 11)
    monkeypatch.setattr(torch.version, 'cuda', '12.1')
    toolkit = Toolkit(str(other), str(other / 'bin' / 'nvcc'), (11, 4), '')
    with pytest.raises(
            RuntimeError,
            match=r'is CUDA 11\.4, torch .* is built for CUDA 12\.1: set '
            r'CUDA_HOME to a CUDA 12\.x toolkit'):
        check_toolkit(toolkit)
    monkeypatch.setattr(torch.version, 'cuda', None)
    with pytest.raises(RuntimeError, match='built without CUDA'):
        check_toolkit(toolkit)


def test_this_machines_toolkit_against_this_torch():
    """The real toolkit: CUDA 13 builds for torch +cu130 and is refused by
    torch 2.1.2+cu121 (whose stack then runs the Triton row)."""
    try:
        toolkit = find_toolkit()
    except RuntimeError as e:
        pytest.skip(f'no CUDA toolkit here ({e})')
    if TORCH_MAJOR is None:
        pytest.skip('torch without CUDA')
    if toolkit.version[0] == TORCH_MAJOR:
        check_toolkit(toolkit)
    else:
        with pytest.raises(RuntimeError, match='set CUDA_HOME to a CUDA'):
            check_toolkit(toolkit)


def test_architectures():
    assert parse_arch('9.0') == parse_arch('90') == parse_arch('sm_90') \
        == (9, 0)
    assert parse_arch('10.0') == (10, 0) and parse_arch('8.6') == (8, 6)
    with pytest.raises(ValueError, match="arch 'hopper'"):
        parse_arch('hopper')
    # SASS of a major version runs on its higher minor ones; the PTX (of
    # the highest architecture) on anything at or above it
    assert covers('80-90', (8, 6)) and covers('80-90', (9, 0))
    assert covers('80-90', (10, 0)) and covers('80-90', (12, 0))
    assert not covers('80-90', (7, 5)) and not covers('86', (8, 0))
    flags = cuda_build.nvcc_flags([(9, 0), (8, 0)])
    assert [f for f in flags if f.startswith('-gencode')] == [
        '-gencode=arch=compute_80,code=sm_80',
        '-gencode=arch=compute_90,code=sm_90',
        '-gencode=arch=compute_90,code=compute_90'
    ]


def test_build_key(fake_toolkit, monkeypatch):
    """One key per build: the sources with their headers, nvcc's version,
    torch's CUDA version, the flags and the torch install name it."""
    toolkit = find_toolkit()
    source = cpu_build.read_source(SOURCE)
    assert source.count('#define MMACT_APA_MATH_H') == 1  # headers inlined
    base = build_key(source, toolkit)
    others = [
        build_key(source + ' ', toolkit),
        build_key(source, toolkit._replace(version_line='release 99.0')),
        build_key(source, toolkit, cuda='0.0'),
        build_key(source, toolkit, flags=['-O2']),
    ]
    with monkeypatch.context() as patch:
        patch.setattr(torch, '__version__', '0.0.0')
        others.append(build_key(source, toolkit))
    assert base == build_key(source, find_toolkit())
    assert base not in others and len(set(others)) == len(others)


def test_build_cache_and_prebuild(fake_toolkit, tmp_path):
    """A build goes into a folder of its key and architectures, marked
    when whole; a later load with the same or covered architectures
    compiles nothing; the command is nvcc's with torch's headers and
    libraries, SASS per architecture and PTX."""
    built = build_library([(8, 0), (9, 0)])
    folder = osp.dirname(built)
    assert re.fullmatch(r'mmact_cuda_[0-9a-f]{16}_80-90', osp.basename(folder))
    assert osp.dirname(folder) == str(tmp_path / 'cache')
    assert osp.isfile(built) and osp.isfile(osp.join(folder, 'mmact-complete'))
    assert not [f for f in os.listdir(folder) if f.endswith('.tmp')]
    command, = _compiles(tmp_path)
    include = osp.join(osp.dirname(torch.__file__), 'include')
    for word in ('-gencode=arch=compute_80,code=sm_80',
                 '-gencode=arch=compute_90,code=compute_90', f'-I{include}',
                 '-ltorch_cuda', '-cudart shared', cpu_build.CSRC):
        assert word in command
    # a GPU the prebuild covers (SASS or PTX): loaded, not compiled again
    assert build_library([(9, 0)]) == built
    assert build_library([(8, 6), (10, 0)]) == built
    assert len(_compiles(tmp_path)) == 1
    # one it does not cover: a build of its own
    other = build_library([(7, 5)])
    assert osp.basename(osp.dirname(other)).endswith('_75')
    assert len(_compiles(tmp_path)) == 2


def test_missing_architecture_and_failed_build(fake_toolkit, tmp_path,
                                               monkeypatch):
    """An architecture nvcc lacks is named (CUDA 13 has no sm_70); a failed
    nvcc is reported with its message and leaves neither a library nor a
    mark, so the next run builds again."""
    with pytest.raises(RuntimeError,
                       match=r'cannot build for 7\.0 \(its lowest is 7\.5; '
                       r'CUDA 13 dropped sm_70, V100\)'):
        build_library([(7, 0)])
    assert _compiles(tmp_path) == []
    monkeypatch.setenv('FAKE_NVCC_EXIT', '2')
    with pytest.raises(RuntimeError,
                       match=r'nvcc failed \(exit 2\): .*a stand-in failure'):
        build_library([(9, 0)])
    folder, = (tmp_path / 'cache').iterdir()
    assert sorted(os.listdir(folder)) == ['mmact-build.lock']
    monkeypatch.delenv('FAKE_NVCC_EXIT')
    assert osp.isfile(build_library([(9, 0)]))
    assert len(_compiles(tmp_path)) == 2


def test_a_gpu_newer_than_the_toolkit_runs_its_ptx(fake_toolkit, tmp_path):
    """nvcc 12.4 (the stand-in lists compute_75 ... compute_100) and a GPU
    it lacks: a newer one (12.0) is built for nvcc's highest architecture
    below it, whose PTX the driver compiles at load; one between two it has
    (8.7) takes the SASS of its major version below it; one older than the
    lowest (7.0, V100 under CUDA 13) is refused."""
    toolkit = find_toolkit()
    assert cuda_build.build_archs([(12, 0)], toolkit) == [(10, 0)]
    assert cuda_build.build_archs([(8, 0), (12, 0)], toolkit) == [(8, 0),
                                                                  (10, 0)]
    assert cuda_build.build_archs([(8, 7), (9, 0)], toolkit) == [(8, 6),
                                                                 (9, 0)]
    with pytest.raises(RuntimeError, match=r'cannot build for 7\.0 '):
        cuda_build.build_archs([(7, 0), (9, 0)], toolkit)
    built = build_library([(12, 0)])
    assert osp.basename(osp.dirname(built)).endswith('_100')
    command, = _compiles(tmp_path)
    gencode = [w for w in command.split() if w.startswith('-gencode')]
    assert gencode == ['-gencode=arch=compute_100,code=sm_100',
                       '-gencode=arch=compute_100,code=compute_100']
    assert build_library([(12, 0)]) == built  # cached: its PTX covers 12.0
    assert len(_compiles(tmp_path)) == 1


BUILD = """
import sys
from mmact.ops import cuda_build
print(cuda_build.build_library([(9, 0)]))
"""


def test_ranks_starting_together_build_once(fake_toolkit, tmp_path,
                                            monkeypatch):
    """Four processes asking for one build at once: one compiles, the
    others wait for its lock and load its library."""
    monkeypatch.setenv('FAKE_NVCC_SLEEP', '3')
    procs = [
        subprocess.Popen([sys.executable, '-c', BUILD],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         text=True) for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1 and len(_compiles(tmp_path)) == 1


def test_a_build_that_died_blocks_nothing(fake_toolkit, tmp_path,
                                          monkeypatch):
    """A build killed while it holds the lock (and the lock file it leaves)
    does not stop the next run, which builds."""
    monkeypatch.setenv('FAKE_NVCC_SLEEP', '600')
    victim = subprocess.Popen([sys.executable, '-c', BUILD],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.time() + 120
    while not _compiles(tmp_path):  # nvcc runs: the lock is held
        assert time.time() < deadline and victim.poll() is None
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    folder, = (tmp_path / 'cache').iterdir()
    assert (folder / 'mmact-build.lock').exists()
    assert not (folder / 'mmact-complete').exists()
    monkeypatch.setenv('FAKE_NVCC_SLEEP', '0')
    start = time.time()
    assert osp.isfile(build_library([(9, 0)]))
    assert time.time() - start < 60 and len(_compiles(tmp_path)) == 2


def test_library_falls_back_with_one_log_line(tmp_path, monkeypatch):
    """Where the kernels cannot be built (here a toolkit of another major
    version), library() logs one warning saying why and returns None, once
    per process; with MMACT_CUDA_KERNELS off it builds and logs nothing."""
    major = (TORCH_MAJOR or 12) + 1
    home = _toolkit(tmp_path, major)
    monkeypatch.setenv('CUDA_HOME', str(home))
    monkeypatch.setenv('FAKE_NVCC_LOG', str(tmp_path / 'nvcc.log'))
    code = ('from mmact.ops import backends, cuda_build\n'
            'assert cuda_build.library() is None\n'
            'backends.configure(cuda_kernels=True)\n'
            'assert cuda_build.library() is None\n'
            'assert cuda_build.library() is None\n')
    done = subprocess.run([sys.executable, '-c', code],
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln for ln in (done.stdout + done.stderr).splitlines()
             if 'mmact' in ln]
    assert len(lines) == 1, lines
    assert re.search(
        r'WARNING - mmact: the CUDA kernels are not used \(RuntimeError: '
        rf'the CUDA toolkit at .* is CUDA {major}\.4, torch .*\); APA / AGLU '
        r'on CUDA tensors run the Triton row', lines[0]), lines[0]
    assert not _compiles(tmp_path)


def test_prebuild_command_names_what_fails(fake_toolkit, tmp_path):
    """python -m mmact.ops.cuda_build --arch ...: the library's path, or
    exit 1 with the reason."""
    ok = subprocess.run(
        [sys.executable, '-m', 'mmact.ops.cuda_build', '--arch', '8.0', '9.0'],
        capture_output=True,
        text=True,
        timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert re.search(r'mmact_cuda_[0-9a-f]{16}_80-90/mmact_cuda\.so$',
                     ok.stdout.strip())
    bad = subprocess.run(
        [sys.executable, '-m', 'mmact.ops.cuda_build', '--arch', '7.0'],
        capture_output=True,
        text=True,
        timeout=300)
    assert bad.returncode == 1
    assert 'cannot build for 7.0' in bad.stderr and 'V100' in bad.stderr


def test_the_setting_is_opt_in(monkeypatch):
    """MMACT_CUDA_KERNELS: off by default, '1' selects the CUDA row, other
    values are refused naming it; CPU tensors keep their row whichever it
    is, and asking for it on a CPU tensor neither builds nor logs."""
    assert not backends.settings().cuda_kernels
    monkeypatch.setenv('MMACT_CUDA_KERNELS', 'yes')
    with pytest.raises(ValueError, match="MMACT_CUDA_KERNELS='yes': use 1"):
        backends.configure_from_env()
    monkeypatch.setenv('MMACT_CUDA_KERNELS', '1')
    old = backends.configure_from_env()
    try:
        assert backends.settings().cuda_kernels
        x = torch.randn(2, 3, 4)
        k = torch.ones(3)
        want = 'op' if cpu_build.extension() is not None else 'torch'
        assert implementation(x, k, k) == want
    finally:
        backends.configure(cuda_kernels=old.cuda_kernels)
    assert not backends.settings().cuda_kernels
    with pytest.raises(TypeError, match="cuda_kernels='1'"):
        backends.configure(cuda_kernels='1')
    with backends.using(cuda_kernels=True, cpu_kernels=False):
        # the CPU row is off, and no CUDA call asked for the CUDA kernels
        assert implementation(x, k, k) == 'torch'
        assert cpu.operator_entries() is None
    assert not backends.settings().cuda_kernels


@pytest.mark.slow
def test_sources_compile_for_sm80_and_sm90(tmp_path):
    """python -m mmact.ops.cuda_build --arch 8.0 9.0 compiles the CUDA
    kernels with this machine's toolkit (no GPU needed) and the library
    registers the CUDA kernels of every operator (APA / AGLU's, FleS's
    pixel passes; FleS's whole op is the CPU extension's host code)."""
    try:
        toolkit = find_toolkit()
        check_toolkit(toolkit)
    except RuntimeError as e:
        pytest.skip(f'no CUDA toolkit of torch\'s CUDA version here: {e}')
    env = dict(os.environ, MMACT_CACHE_DIR=str(tmp_path))
    start = time.time()
    done = subprocess.run(
        [sys.executable, '-m', 'mmact.ops.cuda_build', '--arch', '8.0', '9.0'],
        env=env,
        capture_output=True,
        text=True,
        timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    library = done.stdout.strip().splitlines()[-1]
    assert library.endswith('_80-90/mmact_cuda.so')
    print(f'compiled for sm_80, sm_90 + PTX in {time.time() - start:.0f} s')
    ops = ['apa', 'aglu', 'apa_backward', 'aglu_backward',
           'apa_backward_rebuilt', 'aglu_backward_rebuilt', 'fles_stats',
           'fles_apply', 'fles_gate_backward', 'fles_indicator_backward',
           'fles_input_backward', 'fles']
    code = ('import json, sys, torch\n'
            'from mmact.ops import cpu_build\n'
            'assert cpu_build.load_extension() is not None\n'
            f'torch.ops.load_library({library!r})\n'
            'has = torch._C._dispatch_has_kernel_for_dispatch_key\n'
            f'print(json.dumps([has("mmact::" + o, "CUDA") for o in {ops}]))\n')
    # the CPU extension from the default cache (the test suite's build)
    loaded = subprocess.run([sys.executable, '-c', code],
                            capture_output=True,
                            text=True,
                            timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    registered = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert registered == [True] * len(ops)
