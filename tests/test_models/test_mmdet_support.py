"""mmact without mmcv's compiled ops: everything but its mmdet components
works, and those raise an error that names them (mmact.models.mmdet_support,
mmact.models.mmdet_components).

The subprocess tests make ``mmcv._ext`` unimportable with a
``sitecustomize`` on ``PYTHONPATH``, as on a machine with mmcv-lite or mmcv
built without ops.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmact.models.mmdet_support import (INSTALL_COMMAND, MMDET_COMPONENTS,
                                        MmcvOpsMissingError,
                                        importing_mmdet_models, mmcv_ops_error)

REPO = Path(__file__).resolve().parents[2]
NEEDS_MMCV_OPS = ('mmdet.models', 'mmcv.ops')
BLOCKER = '''
import sys

# mmcv without its compiled ops (mmcv-lite, a build without ops): importing
# mmcv._ext fails and importlib.util.find_spec finds no loader for it
# (mmengine's mmcv_full_available asks that).
sys.modules['mmcv._ext'] = None
'''


def _module_level_imports(tree: ast.Module):
    """Imports outside functions and classes (``with`` / ``try`` blocks
    included)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or ''
        elif not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def test_every_module_on_mmdet_models_or_mmcv_ops_is_listed():
    """The modules whose import needs mmcv's compiled ops are exactly those
    of MMDET_COMPONENTS (each of which imports them inside
    importing_mmdet_models)."""
    found = set()
    for path in (REPO / 'mmact').rglob('*.py'):
        parts = path.relative_to(REPO).with_suffix('').parts
        module = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
        tree = ast.parse(path.read_text(), str(path))
        if any(name == prefix or name.startswith(prefix + '.')
               for name in _module_level_imports(tree)
               for prefix in NEEDS_MMCV_OPS):
            found.add(module)
            assert 'with importing_mmdet_models(__name__):' in \
                path.read_text(), module
    assert found == set(MMDET_COMPONENTS)


def test_listed_names_are_what_each_module_registers():
    import importlib

    from mmdet.registry import MODELS

    for module, names in MMDET_COMPONENTS.items():
        importlib.import_module(module)
        registered = sorted(name for name, obj in MODELS.module_dict.items()
                            if obj.__module__ == module)
        assert registered == sorted(names), module


def _mmcv_ext_missing() -> ModuleNotFoundError:
    return ModuleNotFoundError("No module named 'mmcv._ext'", name='mmcv._ext')


def test_mmcv_ops_error_finds_the_failed_import_in_the_chain():
    missing = _mmcv_ext_missing()
    assert mmcv_ops_error(missing) is missing
    try:
        try:
            raise missing
        except ImportError as error:
            raise RuntimeError('while importing mmdet.models') from error
    except RuntimeError as outer:
        assert mmcv_ops_error(outer) is missing
    # compiled ops built for another torch: named by the last component
    undefined = ImportError(
        'undefined symbol: _ZN3c10',
        name='_ext',
        path='/site-packages/mmcv/_ext.cpython-311-x86_64-linux-gnu.so')
    assert mmcv_ops_error(undefined) is undefined
    assert mmcv_ops_error(ModuleNotFoundError(name='mmcv.ops.nms')) \
        is not None
    # other causes are not mmcv's ops
    assert mmcv_ops_error(ModuleNotFoundError(name='pycocotools')) is None
    assert mmcv_ops_error(ImportError(name='_ext', path='/other/_ext.so')) \
        is None
    assert mmcv_ops_error(KeyError('x')) is None


def test_importing_mmdet_models_names_the_module_and_its_components():
    with pytest.raises(MmcvOpsMissingError) as info:
        with importing_mmdet_models('mmact.models.losses.gol'):
            raise _mmcv_ext_missing()
    message = str(info.value)
    assert message.startswith('mmact.models.losses.gol (GOLLoss in '
                              "mmdet's registry) needs mmdet's models")
    assert "mmcv's compiled ops (mmcv._ext)" in message
    assert "No module named 'mmcv._ext'" in message
    assert INSTALL_COMMAND in message
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    # any other import error passes unchanged
    other = ModuleNotFoundError(
        "No module named 'pycocotools'", name='pycocotools')
    with pytest.raises(ModuleNotFoundError) as info:
        with importing_mmdet_models('mmact.models.losses.gol'):
            raise other
    assert info.value is other


def test_install_command_is_the_faq_s():
    faq = (REPO / 'docs/faq.md').read_text()
    section = faq[faq.index("## mmdet's models need mmcv's compiled ops"):]
    block = re.search(r'```bash\n(.*?)```', section, re.S).group(1)
    assert ' && '.join(block.strip().splitlines()) == INSTALL_COMMAND
    # and the FAQ quotes the message mmact prints
    assert INSTALL_COMMAND in ' '.join(section[:section.index('```')].split())


def _run_without_mmcv_ops(tmp_path: Path, args, timeout: int = 600):
    blocker = tmp_path / 'blocker'
    blocker.mkdir(exist_ok=True)
    (blocker / 'sitecustomize.py').write_text(BLOCKER)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(None,
                   [str(blocker), os.environ.get('PYTHONPATH')])),
        PYTHONWARNINGS='ignore',
        # the C kernels need no mmcv; without them no child builds them
        MMACT_DISABLE_CPU_KERNEL='1')
    return subprocess.run([sys.executable, *args],
                          cwd=REPO,
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=timeout)


CHILD = r'''
import importlib
import sys

import torch

try:
    import mmcv._ext  # noqa: F401
except ModuleNotFoundError as error:
    print('blocked:', error)
else:
    raise SystemExit('the blocker did not block mmcv._ext')

import mmact
from mmact.models.activations import AGLU
from mmact.models.mmdet_support import MMDET_COMPONENTS, MmcvOpsMissingError

# AGLU forward and backward against autograd of its formula
x = torch.randn(2, 4, 5, 5, requires_grad=True)
act = AGLU(kappa_init=1.3, lambda_init=0.7)
act(x).square().sum().backward()
x64 = x.detach().double().requires_grad_()
kappa = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
lam = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
ref = x64 * (1 + lam * torch.exp(-kappa * x64)) ** (-1 / lam)
ref.square().sum().backward()
torch.testing.assert_close(act(x).detach(), ref.detach().float())
torch.testing.assert_close(x.grad, x64.grad.float())
torch.testing.assert_close(act.kappa_param.grad, kappa.grad.float().view(1))
torch.testing.assert_close(act.lambda_param.grad, lam.grad.float().view(1))
print('AGLU ok')

# an mmpretrain classifier with ActResNet, from a config
from mmengine.registry import MODELS, DefaultScope
from mmpretrain.registry import MODELS as CLS

with DefaultScope.overwrite_default_scope('mmpretrain'):
    model = MODELS.build(
        dict(type='ImageClassifier',
             backbone=dict(type='ActResNet', depth=18,
                           act_cfg=dict(type='AGLU'),
                           attention_cfg=dict(type='APASELayer')),
             neck=dict(type='GlobalAveragePooling'),
             head=dict(type='LinearClsHead', num_classes=3,
                       in_channels=512,
                       loss=dict(type='CrossEntropyLoss'))))
assert type(model.backbone) is CLS.get('ActResNet')
logits = model(torch.randn(2, 3, 32, 32), mode='tensor')
assert logits.shape == (2, 3)
logits.sum().backward()
assert model.backbone.conv1.weight.grad.abs().sum() > 0
from mmengine.optim import build_optim_wrapper
wrapper = build_optim_wrapper(
    model, dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
                constructor='ActivationOptimWrapperConstructor'))
wrapper.step()
print('classifier ok')

# activations swapped into an mmpretrain ResNet, shared ones untied
from mmact.models.utils import swap_activations
resnet = CLS.build(dict(type='ResNet', depth=18))
assert len(swap_activations(resnet, dict(type='AGLU'), untie=True)) == 17
print('swap ok')

# mmact's mmdet components: a named error, nothing registered
from mmdet.registry import MODELS as DET
names = [n for names in MMDET_COMPONENTS.values() for n in names]
for attempt in range(2):  # the same error each time, not "not registered"
    try:
        with DefaultScope.overwrite_default_scope('mmdet'):
            MODELS.build(dict(type='ActResNet', depth=18))
    except MmcvOpsMissingError as error:
        message = str(error)
    else:
        raise SystemExit('the mmdet ActResNet was built')
    print('build:', message)
assert not set(names) & set(DET.module_dict), DET.module_dict.keys()
for module in MMDET_COMPONENTS:
    try:
        importlib.import_module(module)
    except MmcvOpsMissingError as error:
        print('import:', error)
    else:
        raise SystemExit(f'{module} imported')
    assert module not in sys.modules
try:
    from mmact.models.backbones import DetActResNet  # noqa: F401
except MmcvOpsMissingError as error:
    print('from backbones:', error)
else:
    raise SystemExit('DetActResNet imported')
assert not set(names) & set(DET.module_dict), DET.module_dict.keys()
print('done')
'''


@pytest.mark.slow
def test_without_mmcv_ops(tmp_path):
    from mmact.models.mmdet_support import INSTALL_COMMAND
    result = _run_without_mmcv_ops(tmp_path, ['-c', CHILD])
    assert result.returncode == 0, result.stdout[-3000:] + \
        result.stderr[-3000:]
    out = result.stdout
    assert out.rstrip().endswith('done')
    for line in ('AGLU ok', 'classifier ok', 'swap ok'):
        assert line in out
    builds = [line for line in out.splitlines() if line.startswith('build:')]
    assert len(builds) == 2 and builds[0] == builds[1]
    imports = [
        line for line in out.splitlines()
        if line.startswith(('import:', 'from backbones:'))
    ]
    assert len(imports) == len(MMDET_COMPONENTS) + 1
    blocked = next(line for line in out.splitlines()
                   if line.startswith('blocked:'))[len('blocked: '):]
    for line in builds + imports:
        assert "mmcv's compiled ops (mmcv._ext)" in line
        assert f'(ModuleNotFoundError: {blocked})' in line
        assert INSTALL_COMMAND in line
    # the build names every mmdet component of mmact, an import its own
    for names in MMDET_COMPONENTS.values():
        assert all(name in builds[0] for name in names)
    for module, names in MMDET_COMPONENTS.items():
        line = next(line for line in imports if f' {module} (' in line)
        assert line.split(
            ' (', 1)[1].startswith(f"{', '.join(names)} in mmdet's registry)")
    assert 'ActResNet, ActResNetV1d, ActResNeXt in mmdet' in imports[-1]


@pytest.mark.slow
def test_analysis_tool_without_mmcv_ops(tmp_path):
    """tools/analysis on an mmpretrain config (its freshly initialised
    model; the curves need no data)."""
    config = 'configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py'
    out = tmp_path / 'plots'
    result = _run_without_mmcv_ops(
        tmp_path,
        ['tools/analysis/plot_activations.py', config, '--out-dir', out])
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ('curves.png', 'parameters.png', 'expected_output.png',
                 'activations.json'):
        assert (out / name).stat().st_size > 0, name
    assert 'AGLU' in result.stdout and 'APA' in result.stdout
