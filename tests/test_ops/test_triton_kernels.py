"""Triton kernels against the float64 reference, in a fresh process.

``TRITON_INTERPRET`` is read when triton compiles a kernel module, so the
cases (``test_*/triton_cases.py``) run in a subprocess (one for every case
file in the interpreter, one per file on a GPU): on the CPU through
Triton's interpreter (``TRITON_INTERPRET=1 MMACT_TRITON=1``, every CI run)
and, where a CUDA GPU is present, compiled on it. The rest of the suite
never sees these variables.
"""
import os
import subprocess
import sys
from pathlib import Path
from typing import List
from xml.etree import ElementTree

import pytest
import torch

from mmact.compat import triton_interpreter_available, triton_version

HERE = Path(__file__).resolve().parent
CASES = [
    'test_apa/triton_cases.py', 'test_apa/triton_glue_cases.py',
    'test_fles/triton_cases.py', 'test_fles/triton_glue_cases.py'
]


def _run_pytest(cases: List[str], device: str,
                *options: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MMACT_TEST_DEVICE=device)
    env.pop('TRITON_INTERPRET', None)
    env.pop('MMACT_TRITON', None)
    if device == 'cpu':
        env.update(TRITON_INTERPRET='1', MMACT_TRITON='1')
    return subprocess.run([
        sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
        *options, *(str(HERE / c) for c in cases)
    ],
                          cwd=HERE.parents[1],
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=1800)


def run_cases(cases: str, device: str) -> None:
    proc = _run_pytest([cases], device, '-x')
    assert proc.returncode == 0, (proc.stdout[-8000:] + proc.stderr[-2000:])
    print(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def interpreter_report(tmp_path_factory):
    """Every case file in one interpreter process (one start-up of the
    stack instead of four): its output and JUnit report."""
    report = tmp_path_factory.mktemp('triton_interpreter') / 'cases.xml'
    proc = _run_pytest(CASES, 'cpu', f'--junitxml={report}')
    tree = ElementTree.parse(report) if report.is_file() else None
    return proc, tree


@pytest.mark.slow
@pytest.mark.parametrize('cases', CASES)
@pytest.mark.skipif(
    not triton_interpreter_available(),
    reason='needs the interpreter of Triton >= 3.0 (Triton '
    f'{".".join(map(str, triton_version())) or "not installed"} here)')
def test_in_triton_interpreter(cases, interpreter_report):
    proc, tree = interpreter_report
    output = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert tree is not None, output
    module = 'tests.test_ops.' + cases[:-len('.py')].replace('/', '.')
    results = [
        case for case in tree.iter('testcase')
        if case.get('classname') == module
    ]
    failed = [
        f'{case.get("name")}: {problem.get("message", "")[:300]}'
        for case in results for problem in case
        if problem.tag in ('failure', 'error')
    ]
    assert results, f'no cases of {cases} ran: {output}'
    assert not failed, '\n'.join(failed)
    skipped = sum(1 for case in results if case.find('skipped') is not None)
    print(f'{len(results) - skipped} passed, {skipped} skipped')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA GPU')
@pytest.mark.parametrize('cases', CASES)
def test_on_cuda(cases):
    run_cases(cases, 'cuda')


def _compile_for_hopper(fn, types: dict, constexprs: dict) -> None:
    """Compile ``fn`` to a Hopper (sm_90) binary; needs no GPU."""
    pytest.importorskip('triton')
    if triton_version() >= (3, 0):
        _compile_triton3(fn, types, constexprs)
    else:
        _compile_triton2(fn, types, constexprs)


def _compile_triton3(fn, types: dict, constexprs: dict) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    signature = dict(types, **{name: 'constexpr' for name in constexprs})
    values = {(fn.arg_names.index(k), ): v for k, v in constexprs.items()}
    triton.compile(
        ASTSource(fn, signature, values), target=GPUTarget('cuda', 90, 32))


def _compile_triton2(fn, types: dict, constexprs: dict) -> None:
    """Triton 2.1's stages one by one: ``triton.compile`` would also build
    the launcher, which links against the CUDA driver."""
    from triton.compiler import compiler
    from triton.compiler.code_generator import ast_to_ttir
    index = fn.arg_names.index
    # in argument order: Triton 2.1 reads the signature in dict order
    signature = dict(sorted((index(k), v) for k, v in types.items()))
    constants = {index(k): v for k, v in constexprs.items()}
    arch = 90
    module = ast_to_ttir(
        fn,
        signature,
        compiler.instance_descriptor(divisible_by_16=set(), equal_to_1=set()),
        constants,
        debug=False,
        arch=arch)
    module = compiler.optimize_ttir(module, arch)
    module = compiler.optimize_ttgir(
        compiler.ttir_to_ttgir(module, num_warps=4), 3, arch)
    ptx = compiler.llir_to_ptx(compiler.ttgir_to_llir(module, {}, arch), arch)
    assert compiler.ptx_to_cubin(ptx, arch)


# which sources the backward rebuilds its input from (none: the plain one)
REBUILD = {
    'none': {},
    'bn':
    dict(HAS_SCALE=True, HAS_SHIFT=True),
    'all':
    dict(
        HAS_SCALE=True,
        SCALE_PER_SAMPLE=True,
        HAS_SHIFT=True,
        HAS_OTHER=True,
        HAS_OTHER_SCALE=True)
}


@pytest.mark.parametrize('rebuild', list(REBUILD))
@pytest.mark.parametrize('axis,per_channel', [(1, 1), (0, 0)])
def test_apa_kernels_compile(axis, per_channel, rebuild):
    """The interpreter does not type-check like the compiler does."""
    pytest.importorskip('triton')
    from mmact.ops.apa import triton_kernels as kernels
    ints = dict(P='i32', Q='i32', C='i32', n_q='i32')
    params = dict(k_ptr='*fp32', l_ptr='*fp32', lambda_min='fp32')
    common = dict(
        AGLU=True,
        K_PER_CHANNEL=per_channel,
        L_PER_CHANNEL=per_channel,
        CHANNEL_AXIS=axis,
        BLOCK_P=1 if not per_channel else 4,
        BLOCK_Q=256,
        WIDE=axis == 0)
    _compile_for_hopper(kernels.eta_fwd_kernel,
                        dict(x_ptr='*bf16', y_ptr='*bf16', **params, **ints),
                        common)
    _compile_for_hopper(
        kernels.eta_bwd_kernel,
        dict(
            x_ptr='*bf16',
            go_ptr='*bf16',
            gx_ptr='*bf16',
            **params,
            part_ptr='*fp32',
            other_ptr='*bf16',
            scale_ptr='*fp32',
            shift_ptr='*fp32',
            oscale_ptr='*fp32',
            **ints,
            n_groups='i32',
            iters='i32',
            part_stride='i32',
            rows_per_sample='i32'),
        dict(
            common,
            NEED_X=True,
            NEED_PARAMS=True,
            **dict(
                dict.fromkeys(('HAS_SCALE', 'SCALE_PER_SAMPLE', 'HAS_SHIFT',
                               'HAS_OTHER', 'HAS_OTHER_SCALE'), False),
                **REBUILD[rebuild])))
    _compile_for_hopper(
        kernels.eta_param_grad_kernel,
        dict(
            part_ptr='*fp32',
            l_ptr='*fp32',
            k_out_ptr='*fp32',
            l_out_ptr='*bf16',
            lambda_min='fp32',
            S='i32',
            C='i32',
            part_stride='i32',
            n_programs='i32',
            iters='i32'),
        dict(
            K_PER_CHANNEL=not per_channel,
            L_PER_CHANNEL=True,
            NEED_K=True,
            NEED_L=True,
            BLOCK_S=64,
            BLOCK_C=64))


# 0 sigmoid, 1 Gaussian CDF (erf: tl.math.erf, which Triton 2.1 has too),
# 2 tanh(softplus)
@pytest.mark.parametrize('gate', [0, 1, 2])
def test_fles_kernels_compile(gate):
    pytest.importorskip('triton')
    from mmact.ops.fles import triton_kernels as kernels
    maps = dict(x_ptr='*bf16', g_ptr='*bf16', gx_ptr='*bf16')
    grids = dict(kv_ptr='*fp32', ko_ptr='*fp32', cst='fp32')
    geometry = {
        name: 'i32'
        for name in ('H', 'W', 'kh', 'kw', 'nh', 'nw', 'n_cb', 'CW')
    }
    blocks = dict(BLOCK_R=16, BLOCK_W=128)
    _compile_for_hopper(
        kernels.fles_grad_kernel,
        dict(
            **maps, **grids, gi_ptr='*fp32', count_ptr='*fp32', **geometry),
        dict(GATE=gate, POSITIVE=True, **blocks))
    sums = dict(blocks, BLOCK_NW=8)
    _compile_for_hopper(
        kernels.fles_gate_sums_kernel,
        dict(
            x_ptr='*bf16',
            g_ptr='*bf16',
            **grids,
            s_ve_ptr='*fp32',
            s_ho_ptr='*fp32',
            **geometry,
            wpb='i32'), dict(GATE=gate, **sums))
    _compile_for_hopper(
        kernels.fles_stats_kernel,
        dict(
            x_ptr='*bf16',
            ind_ptr='*fp32',
            count_ptr='*fp32',
            **geometry,
            wpb='i32'), dict(POSITIVE=gate == 0, **sums))
