"""mmact.compat: the supported range, and the one place that asks."""
import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from mmact import compat
from mmact.ops import backends

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('text,want', [('2.1.2+cu121', (2, 1, 2)),
                                       ('2.14.1', (2, 14, 1)),
                                       ('2.6.0a0+git1234', (2, 6, 0)),
                                       ('3.0.0', (3, 0, 0)), ('2.1', (2, 1))])
def test_parse_version(text, want):
    assert compat.parse_version(text) == want


@pytest.mark.parametrize('version', ['2.1.0', '2.1.2+cu118', '2.14.1'])
def test_supported_torch_passes(version):
    compat.check_torch(version)


@pytest.mark.parametrize('version', ['2.0.1', '1.13.1+cu117'])
def test_old_torch_is_refused_naming_both_versions(version):
    with pytest.raises(ImportError) as info:
        compat.check_torch(version)
    message = str(info.value)
    assert f'torch {version} is installed' in message
    assert 'torch>=2.1' in message and '2.1.2 and 2.14.1' in message


def test_import_mmact_refuses_an_old_torch():
    """The floor holds for ``import mmact`` itself, before any registry."""
    code = ('import torch; torch.__version__ = "2.0.1"\n'
            'try:\n    import mmact\n'
            'except ImportError as e:\n    print("refused:", e)\n')
    out = subprocess.run([sys.executable, '-c', code],
                         cwd=REPO,
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert 'refused: mmact needs torch>=2.1; torch 2.0.1 is installed' in (
        out.stdout)


def test_installed_torch_is_in_the_tested_range():
    assert compat.TORCH_VERSION[:2] >= compat.TORCH_MIN
    assert compat.TORCH_VERSION <= compat.parse_version(
        compat.TORCH_TESTED[-1])


@pytest.mark.parametrize('backend', ['eager', 'aot_eager'])
def test_is_tracing_under_torch_compile(backend):
    """True while dynamo traces (also with fullgraph: no graph break on
    torch 2.1, where torch.compiler.is_compiling does not exist)."""

    def f(x):
        return x + 1 if compat.is_tracing() else x - 1

    x = torch.zeros(3)
    assert not compat.is_tracing()
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    assert torch.equal(compiled(x), x + 1)
    assert torch.equal(f(x), x - 1)


def test_is_tracing_under_jit_trace():
    seen = []

    def f(x):
        seen.append(compat.is_tracing())
        return x * 2

    torch.jit.trace(f, torch.ones(2), check_trace=False)
    assert seen == [True]


def _versioned_api_uses(paths):
    """``path:line: api (where)`` for every listed API written in ``paths``."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for api, where in compat.VERSIONED_APIS.items():
                if api in line:
                    found.append(f'{path}:{number}: {api} ({where})')
    return found


def test_versioned_apis_are_used_only_through_mmact_compat():
    """A version-dependent API (see ``VERSIONED_APIS``) written anywhere but
    in mmact/compat.py breaks one of the supported stacks."""
    allowed = {REPO / 'mmact' / 'compat.py', Path(__file__).resolve()}
    sources = [
        path for folder in ('mmact', 'tools', 'tests', 'configs', 'projects')
        for path in (REPO / folder).rglob('*.py') if path not in allowed
    ]
    assert len(sources) > 100
    assert not _versioned_api_uses(sources)


def test_the_api_check_finds_a_direct_use(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text('import torch\n\n'
                   'if torch.compiler.is_compiling():\n'
                   '    torch.onnx.export(m, x, f, dynamo=False)\n')
    found = _versioned_api_uses([bad])
    assert [f.split(': ', 1)[1].split(' (')[0]
            for f in found] == ['compiler.is_compiling', 'dynamo=']


@pytest.fixture
def installed_triton(monkeypatch):
    """``installed_triton(version)`` makes the package metadata say that
    Triton ``version`` is installed (what :func:`mmact.compat.
    triton_version` reads, once per process: its cache is cleared before
    and after; nothing of mmact is patched)."""
    find_spec = importlib.util.find_spec
    metadata_version = importlib.metadata.version

    def install(version: str) -> None:
        monkeypatch.setattr(
            importlib.util, 'find_spec', lambda name, *args: object()
            if name == 'triton' else find_spec(name, *args))
        monkeypatch.setattr(
            importlib.metadata, 'version', lambda name: version
            if name == 'triton' else metadata_version(name))
        compat.triton_version.cache_clear()

    yield install
    compat.triton_version.cache_clear()


def test_interpreter_error_names_the_triton_it_needs(monkeypatch,
                                                     installed_triton):
    installed_triton('2.1.0')
    monkeypatch.setenv('MMACT_TRITON', '1')
    monkeypatch.setenv('TRITON_INTERPRET', '1')
    with pytest.raises(
            RuntimeError,
            match=r'MMACT_TRITON=1: .*Triton >= 3\.0; '
            r'Triton 2\.1\.0 is installed'):
        backends.configure_from_env()


@pytest.mark.skipif(
    compat.triton_interpreter_available() or not compat.triton_version(),
    reason='the installed Triton has the interpreter (Triton >= 3.0) or no '
    'Triton is installed')
def test_this_triton_has_no_interpreter(monkeypatch):
    """On the torch 2.1 stack (Triton 2.1) the real refusal."""
    monkeypatch.setenv('MMACT_TRITON', '1')
    monkeypatch.setenv('TRITON_INTERPRET', '1')
    with pytest.raises(RuntimeError, match=r'Triton >= 3\.0; Triton 2\.'):
        backends.configure_from_env()


def test_triton_below_the_floor_warns_once_and_takes_the_torch_path(
        installed_triton):
    installed_triton('2.0.0')
    backends.triton_launchable.cache_clear()
    try:
        with pytest.warns(
                UserWarning,
                match=r'Triton 2\.0\.0 is older than '
                r'the 2\.1 its kernels need'):
            assert not backends.triton_launchable()
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            assert not backends.triton_launchable()  # no second warning
    finally:
        backends.triton_launchable.cache_clear()


def test_weights_only_flags_match_this_torch():
    # torch 2.6 flipped torch.load's default to weights_only=True
    assert compat.WEIGHTS_ONLY_BY_DEFAULT == (compat.TORCH_VERSION >= (2, 6))
    assert (compat.TORCHSCRIPT_ONNX_EXPORT == {}) == (
        compat.TORCH_VERSION < (2, 5))


def test_cpu_autocast_float16_flag_matches_this_torch():
    """The flag says what torch.autocast does on this torch (torch 2.1
    refuses float16 on the CPU)."""
    x = torch.ones(2, 2)
    if not compat.CPU_AUTOCAST_FLOAT16:
        with pytest.raises(RuntimeError, match='only support Bfloat16'):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                with torch.autocast('cpu', dtype=torch.float16):
                    pass
        return
    with torch.autocast('cpu', dtype=torch.float16):
        assert torch.nn.functional.linear(x, x).dtype == torch.float16


def test_the_triton_check_traces_without_a_graph_break():
    """torch 2.1's dynamo cannot trace os.environ, and dynamo's strict
    backward mode bans x.layout: use_triton asks is_tracing first and reads
    no environment (the settings were made at import)."""
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda x: x * 2 if not backends.use_triton(x) else x,
        backend='eager',
        fullgraph=True)
    assert torch.equal(compiled(torch.ones(2)), torch.full((2, ), 2.0))


def test_fake_tensors_never_reach_the_kernels():
    """AOTAutograd runs autograd.Functions on fake tensors (on torch 2.1
    with is_compiling False): the ops take the torch path there."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mmact.ops import aglu, apa
    with FakeTensorMode():
        assert compat.is_tracing()
        x = torch.empty(4, 64, 32, 32)  # large enough for the C kernel
        k, lam = torch.ones(64), torch.ones(64)
        assert aglu(x, k, lam).shape == x.shape
        assert apa(x, 1.0, 0.5).shape == x.shape
    assert not compat.is_tracing()


@pytest.mark.parametrize('channels', [None, 8])
def test_lazy_activations_are_built_without_warnings(channels):
    """torch 2.1 warns at every LazyModuleMixin construction; FleS and
    Meta-ACON (lazy by design) are built without it, on every torch."""
    from mmact.models.activations import FleS, MetaACON
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        FleS(channels, reduction=4)
        MetaACON(channels, reduction=4, min_hidden=2)
    # what is silenced is only that warning
    with pytest.warns(UserWarning, match='other'):
        with compat.lazy_module_init():
            warnings.warn('other', UserWarning)
