"""FleSSwinTransformer: FFN activations see the token grid of each block."""
import copy

import pytest
import torch
from mmpretrain.models.backbones.swin_transformer import SwinTransformer

import mmact  # noqa: F401
from mmact.models.activations import FleS
from mmact.models.utils import materialize_lazy_modules
from mmact.models.backbones.fles_swin import FleSSwinTransformer
from mmact.compat import TORCH_VERSION

ARCH = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 1, 2, 2])
FLES = dict(type='FleS', window_size=(2, 3), reduction=4)


def _build(cls=FleSSwinTransformer, **kwargs):
    torch.manual_seed(0)
    model = cls(
        arch=ARCH, out_indices=(0, 1, 2, 3), pad_small_map=True, **kwargs)
    return materialize_lazy_modules(model, torch.zeros(1, 3, 64, 96))


def _fles(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, FleS)]


def test_builds_from_both_registries():
    from mmdet.registry import MODELS as DET
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as CLS
    for registry in (DET, CLS):
        # under the registry's own scope, as its configs set it: an earlier
        # test's Runner may have left mmengine's scope current
        with DefaultScope.overwrite_default_scope(registry.scope):
            model = registry.build(
                dict(type='FleSSwinTransformer', arch=ARCH, act_cfg=FLES))
        assert len(_fles(model)) == 5  # one per block


def test_each_fles_gets_its_stage_grid_and_windows_the_map():
    model = _build(act_cfg=FLES)
    with torch.no_grad():
        for _, m in _fles(model):  # away from the identity-safe init
            m.fc2_weight.normal_(0, 0.5)
    seen = {}

    def record(name):

        def hook(module, args, output):
            seen[name] = (module.token_hw_shape, args[0], output)

        return hook

    for name, m in _fles(model):
        m.register_forward_hook(record(name))
    x = torch.randn(2, 3, 64, 96)
    outs = model(x)
    grids = [tuple(o.shape[-2:]) for o in outs]
    assert grids == [(16, 24), (8, 12), (4, 6), (2, 3)]
    for name, m in _fles(model):
        stage = int(name.split('.')[1])
        hw, tokens, out = seen[name]
        assert hw == grids[stage]
        # the same as FleS on the (N, C, H, W) map of those tokens
        twin = FleS(window_size=(2, 3), reduction=4)
        twin.load_state_dict(m.state_dict())
        twin.token_hw_shape = None
        fmap = tokens.unflatten(1, hw).permute(0, 3, 1, 2)
        want = twin(fmap.contiguous()).permute(0, 2, 3, 1).flatten(1, 2)
        torch.testing.assert_close(out, want)


def test_same_keys_as_stock_swin_and_stock_swin_needs_the_grid():
    ours = _build(act_cfg=FLES)
    stage_cfgs = dict(block_cfgs=dict(ffn_cfgs=dict(act_cfg=FLES)))
    stock = SwinTransformer(
        arch=ARCH,
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
        stage_cfgs=stage_cfgs)
    stock.load_state_dict(ours.state_dict(), strict=True)  # lazy FleS too
    with pytest.raises(ValueError, match='needs a spatial layout'):
        stock(torch.randn(1, 3, 64, 96))
    # a whole-map FleS needs no grid: both backbones agree
    glob = dict(type='FleS', reduction=4)
    a = _build(act_cfg=glob)
    b = SwinTransformer(
        arch=ARCH,
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
        stage_cfgs=dict(block_cfgs=dict(ffn_cfgs=dict(act_cfg=glob))))
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()  # no drop path
    x = torch.randn(1, 3, 64, 96)
    for u, v in zip(a(x), b(x)):
        torch.testing.assert_close(u, v)


def test_act_cfg_merges_into_per_stage_configs():
    stage_cfgs = [dict(block_cfgs=dict(ffn_cfgs=dict(ffn_drop=0.0)))] * 4
    model = FleSSwinTransformer(arch=ARCH, act_cfg=FLES, stage_cfgs=stage_cfgs)
    assert len(_fles(model)) == 5
    gelu = FleSSwinTransformer(arch=ARCH)
    assert not _fles(gelu)
    assert not any(b._forward_pre_hooks for b in gelu.modules())


@pytest.mark.skipif(
    TORCH_VERSION < (2, 4),
    reason='torch 2.1\'s dynamo restarts its analysis without end (100+ '
    'RestartAnalysis) on the block hook that hands FleS the token grid; '
    'verified from torch 2.14')
def test_compiles_as_one_graph():
    """A FleS backbone compiles with ``fullgraph=True``: no graph break
    anywhere, so none inside FleS; dynamo's graph equals eager (float64:
    both run the torch math)."""
    eager = _build(act_cfg=FLES, drop_path_rate=0.0).double()
    eager.train()
    with torch.no_grad():
        for _, m in _fles(eager):  # away from the identity-safe init
            m.fc2_weight.normal_(0, 0.5)
    compiled_model = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(compiled_model, backend='eager', fullgraph=True)
    x = torch.randn(
        2, 3, 64, 96, generator=torch.Generator().manual_seed(0)).double()
    results = []
    for model in (eager, compiled):
        outs = model(x)
        loss = sum(o.square().mean() for o in outs)
        params = [p for p in model.parameters() if p.requires_grad]
        results.append((outs, torch.autograd.grad(loss, params)))
    (want_outs, want_grads), (got_outs, got_grads) = results
    for got, want in zip(got_outs, want_outs):
        torch.testing.assert_close(got, want)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want)
