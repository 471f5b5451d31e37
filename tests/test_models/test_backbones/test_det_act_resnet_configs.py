"""Every installed mmdet config's ResNet / ResNetV1d / ResNeXt backbone keeps
its state-dict keys and output shapes when its type becomes ours.

The issue's target (mmact issue 51): a detection researcher changes
``type='ResNet'`` to ``type='ActResNet'`` in any mmdet 3.3 config. The
backbone dicts of the wheel's configs are collected once (``init_cfg`` and
``pretrained`` dropped: they load weights and do not shape the network;
identical dicts once) and each is built both ways with
``act_cfg=dict(type='ReLU')``. Built on the meta device (no weights to
initialise; the forward computes shapes only); DCN has no meta kernel, so
DCN backbones run one zero-filled CPU forward.
"""
import ast
import copy
import hashlib
import inspect
import json
import os
import os.path as osp
import warnings
from glob import glob
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

import mmact  # noqa: F401
from mmact.ops.cpu_build import default_cache_dir

STOCK = ('ResNet', 'ResNetV1d', 'ResNeXt')
NOT_STRUCTURAL = ('init_cfg', 'pretrained')
# the sweep in parts, each well under a minute on two cores
PARTS = 8


def _configs_root() -> str:
    import mmdet
    return osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs')


def _backbones(node, found):
    """Every dict under a ``backbone`` key, at any depth (detectors inside
    trackers too)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'backbone' and isinstance(value, dict):
                found.append(value)
            _backbones(value, found)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _backbones(value, found)


def _collect(root, files):
    """``(configs with a stock ResNet-family backbone, unique backbone
    dicts, configs that do not load)`` of the config ``files`` (paths
    relative to ``root``)."""
    using, unique, broken = [], {}, []
    for path in files:
        name = osp.relpath(path, root)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                cfg = Config.fromfile(path)
        except FileNotFoundError:  # a few tracking configs name missing bases
            broken.append(name)
            continue
        found = []
        _backbones(cfg.to_dict(), found)
        mine = [b for b in found if str(b.get('type')).split('.')[-1] in STOCK
                and not str(b.get('type')).startswith('mmpretrain.')]
        if mine:
            using.append(name)
        for backbone in mine:
            backbone = {
                k: v
                for k, v in backbone.items() if k not in NOT_STRUCTURAL
            }
            backbone['type'] = backbone['type'].split('.')[-1]
            unique.setdefault(
                json.dumps(backbone, sort_keys=True, default=str), backbone)
    return using, list(unique.values()), broken


def _cache_file(root: str) -> Path:
    """Where the parsed result is kept: named by the mmdet and mmengine
    versions, every config file's path and contents (``_base_`` included)
    and the code that collects it. Parsing runs no torch, so the torch 2.1.2
    suite reads what the default one parsed (about a minute)."""
    import mmdet
    import mmengine
    digest = hashlib.sha256(
        f'{mmdet.__version__} {mmengine.__version__} {STOCK} '
        f'{NOT_STRUCTURAL}'.encode())
    for name in (_backbones, _collect):
        digest.update(inspect.getsource(name).encode())
    for path in sorted(glob(osp.join(root, '**', '*.py'), recursive=True)):
        digest.update(osp.relpath(path, root).encode())
        digest.update(Path(path).read_bytes())
    return Path(default_cache_dir()) / \
        f'mmdet_stock_backbones_{digest.hexdigest()[:16]}.txt'


@pytest.fixture(scope='module')
def stock_backbones():
    """``_collect`` over mmdet's configs outside ``_base_``, from the cache
    when it holds this parse. Only Python literals are kept (read back with
    ``ast.literal_eval``: tuples stay tuples, nothing is executed)."""
    root = _configs_root()
    cache = _cache_file(root)
    if cache.is_file():
        return ast.literal_eval(cache.read_text())
    files = sorted(
        f for f in glob(osp.join(root, '**', '*.py'), recursive=True)
        if '_base_' not in f.split(os.sep))
    found = _collect(root, files)
    text = repr(found)
    try:
        literal = ast.literal_eval(text) == found
    except (ValueError, SyntaxError):  # a value that is not a literal
        literal = False
    if literal:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f'{cache.name}.{os.getpid()}.tmp')
        partial.write_text(text)
        os.replace(partial, cache)
    return found


def test_the_parse_cache_is_named_by_every_config_file(tmp_path, monkeypatch):
    """A changed config, ``_base_`` file included, or a new one names
    another cache file: a stale parse is never read."""
    monkeypatch.setenv('MMACT_CACHE_DIR', str(tmp_path / 'cache'))
    root = tmp_path / 'configs'
    (root / '_base_').mkdir(parents=True)
    (root / 'a.py').write_text("_base_ = ['_base_/b.py']\n")
    (root / '_base_' / 'b.py').write_text('x = 1\n')
    first = _cache_file(str(root))
    assert first.parent == tmp_path / 'cache'
    assert _cache_file(str(root)) == first
    (root / '_base_' / 'b.py').write_text('x = 2\n')
    second = _cache_file(str(root))
    (root / 'c.py').write_text('')
    assert len({first, second, _cache_file(str(root))}) == 3


def test_the_sweep_covers_the_installed_configs(stock_backbones):
    using, unique, broken = stock_backbones
    # mmdet 3.3.0: 823 configs outside _base_, 547 of them with a stock
    # ResNet / ResNeXt backbone (none names ResNetV1d), 4 tracking configs
    # whose _base_ files the wheel lacks.
    assert len(using) >= 500, len(using)
    assert len(broken) <= 4, broken
    types = {b['type'] for b in unique}
    assert types <= set(STOCK) and {'ResNet', 'ResNeXt'} <= types
    assert any(b.get('dcn') for b in unique)
    assert any(b.get('plugins') for b in unique)


def _signature(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _output_shapes(model, cfg):
    model.eval()
    shape = (1, cfg.get('in_channels', 3), 128, 128)
    dcn = cfg.get('dcn') is not None
    if dcn:
        # mmcv's deformable convolution has no meta kernel: real memory,
        # zeros (shapes are what is compared; DCN needs 128 px at stage 4)
        model.to_empty(device='cpu')
        with torch.no_grad():
            for tensor in model.state_dict().values():
                tensor.zero_()
        x = torch.zeros(shape)
    else:
        x = torch.zeros(shape, device='meta')
    with torch.no_grad():
        return [tuple(out.shape) for out in model(x)]


@pytest.mark.slow
@pytest.mark.parametrize('part', range(PARTS))
def test_changing_the_type_keeps_keys_and_output_shapes(stock_backbones, part):
    from mmdet.registry import MODELS
    _, unique, _ = stock_backbones
    failures = []
    with DefaultScope.overwrite_default_scope('mmdet'), \
            warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for stock_cfg in unique[part::PARTS]:
            ours_cfg = dict(
                copy.deepcopy(stock_cfg),
                type='Act' + stock_cfg['type'],
                act_cfg=dict(type='ReLU'))
            with torch.device('meta'):
                stock = MODELS.build(copy.deepcopy(stock_cfg))
                ours = MODELS.build(ours_cfg)
            if _signature(ours) != _signature(stock):
                failures.append((stock_cfg, 'state dict'))
            elif _output_shapes(ours, stock_cfg) != _output_shapes(
                    stock, stock_cfg):
                failures.append((stock_cfg, 'output shapes'))
    assert not failures, failures
