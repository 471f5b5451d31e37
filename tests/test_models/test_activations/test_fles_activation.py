"""FleS module: registry, lazy channels, init, batch independence, layouts,
low precision, errors, and a real mmpretrain PoolFormer-S12."""
import math
import warnings

import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS
from torch.nn.parameter import UninitializedParameter

import mmact  # noqa: F401
from mmact.models.activations import FleS
from mmact.ops import backends
from mmact.ops.fles import cpu as fles_cpu
from mmact.ops.fles import fles_gate

K0 = math.log1p(math.exp(0.6))  # softplus(0.6) ~= 1.0375


def randomize(m: FleS, seed=0):
    """Move the module away from its init so the MLP matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return m


# ---------------------------------------------------------------- building
def test_registered_in_root_registry_and_builds_via_mmcv():
    from mmcv.cnn import ConvModule, build_activation_layer
    assert MODELS.get('FleS') is FleS
    act = build_activation_layer(dict(type='FleS', reduction=4))
    assert isinstance(act, FleS)
    # ConvModule injects inplace=True into act_cfg; FleS accepts it
    conv = ConvModule(
        3, 8, 3, padding=1, act_cfg=dict(type='FleS', reduction=4))
    y = conv(torch.randn(2, 3, 6, 6))
    assert y.shape == (2, 8, 6, 6) and conv.activate.channels == 8


def test_registered_names_resolve_under_downstream_scopes():
    from mmengine.registry import DefaultScope
    for scope in ('mmpretrain', 'mmdet'):
        pytest.importorskip(scope)
        import importlib
        registry = importlib.import_module(f'{scope}.registry').MODELS
        with DefaultScope.overwrite_default_scope(scope):
            act = registry.build(dict(type='FleS', channels=8, reduction=4))
        assert isinstance(act, FleS)


def test_lazy_materialises_on_first_forward():
    m = FleS(window_size=(3, 4), reduction=4)
    assert m.channels is None
    assert all(isinstance(p, UninitializedParameter) for p in m.parameters())
    m(torch.randn(1, 16, 5, 6))
    assert m.channels == 16
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    # shared trunk C -> C/r, two heads C/r -> C (k_ve, k_ho)
    assert shapes == {
        'fc1_weight': (4, 16),
        'fc1_bias': (4, ),
        'fc2_weight': (2, 16, 4),
        'fc2_bias': (2, 16)
    }
    with pytest.raises(ValueError, match='built for 16 channels.*has 8'):
        m(torch.randn(1, 8, 5, 6))


def test_explicit_channels_and_softplus_indicator_params():
    m = FleS(channels=32, indicator='softplus')
    names = dict(m.named_parameters())
    assert names['fc1_weight'].shape == (1, 32)  # 32 // 32
    assert names['ind_gamma'].shape == (32, )
    assert torch.equal(names['ind_gamma'], torch.ones(32))
    assert torch.equal(names['ind_beta'], torch.zeros(32))
    with pytest.raises(ValueError, match='built for 32 channels.*has 31'):
        m(torch.randn(1, 31, 4, 4))


@pytest.mark.parametrize('kwargs,match', [
    (dict(channels=16,
          reduction=32), 'reduction=32 is larger than the channel count 16'),
    (dict(channels=0), 'channels must be a positive int, got 0'),
    (dict(reduction=0), 'reduction must be a positive int, got 0'),
    (dict(window_size=(0, 3)), r'window_size must be positive, got \(0, 3\)'),
    (dict(window_size=3,
          stride=(3, -1)), r'stride must be positive, got \(3, -1\)'),
    (dict(window_size=3, stride=4), r'stride \(4, 4\) must not exceed'),
    (dict(gate='relu'), "unknown gate 'relu'"),
    (dict(indicator='max'), "unknown indicator 'max'"),
    (dict(proto=True, window_size=3), r'proto=True.*window_size=3'),
    (dict(proto=True, window_grid=3), r'proto=True.*window_grid=3'),
    (dict(window_grid=(9, 15), window_size=3), 'takes no window_size'),
    (dict(window_grid=(9, 15), stride=3), 'takes no window_size or stride'),
    (dict(window_grid=(0, 15)), r'window_grid must be positive'),
    (dict(mlp_layout='joint'), "mlp_layout must be one of.*'joint'"),
    (dict(data_format='NCHW'), "data_format must be one of.*'NCHW'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FleS(**kwargs)


def test_lazy_reduction_error_names_values():
    m = FleS()  # r = 32
    msg = 'reduction=32 is larger than the channel count 8'
    with pytest.raises(ValueError, match=msg):
        m(torch.randn(1, 8, 4, 4))


@pytest.mark.parametrize('shape', [(4, 8), (2, 8, 3, 3, 3), (8, )])
def test_unsupported_rank(shape):
    m = FleS(channels=8, reduction=4)
    with pytest.raises(ValueError, match=r'4-D feature map.*got a \d-D input'):
        m(torch.randn(*shape))


def test_window_on_tokens_without_hw_shape_is_an_error():
    m = FleS(channels=8, reduction=4, window_size=3)
    with pytest.raises(ValueError, match=r'needs a spatial layout.*hw_shape'):
        m(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r'hw_shape=\(2, 3\) has 6'):
        m(torch.randn(2, 5, 8), hw_shape=(2, 3))


def test_window_larger_than_map_is_clamped_with_one_warning():
    torch.manual_seed(0)
    m = randomize(FleS(channels=8, reduction=4, window_size=(9, 15)))
    g = FleS(channels=8, reduction=4)
    g.load_state_dict(m.state_dict())
    x = torch.randn(2, 8, 4, 6)
    with pytest.warns(UserWarning, match=r'clamped to \(4, 6\)'):
        y = m(x)
    torch.testing.assert_close(y, g(x))  # clamped window == whole map
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        m(x)  # warned once only


# ---------------------------------------------------------------- behaviour
@pytest.mark.parametrize('gate',
                         ['sigmoid', 'erf', 'tanh_softplus', 'tanh_gate'])
@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(window_size=(3, 4)),
    dict(window_size=(3, 4), stride=(2, 2)),
    dict(indicator='softplus'),
    dict(indicator='quasi_linear', window_size=3),
    dict(indicator='mean'),
    dict(proto=True),
    dict(fused=False, window_size=(2, 3)),
    dict(mlp_layout='separate', window_grid=(2, 3)),
])
def test_identity_safe_init(gate, kwargs):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 7, 9) * 3
    m = FleS(reduction=4, gate=gate, **kwargs)
    expected = K0 * fles_gate(K0 * x, gate) * x
    if kwargs.get('proto'):
        # paper init alpha = 1e-3: k = softplus(1e-3 * mu + 0.6), close to K0
        assert torch.equal(m.proto_alpha, torch.full((2, ), 1e-3))
        torch.testing.assert_close(m(x), expected, rtol=2e-3, atol=1e-3)
        with torch.no_grad():
            m.proto_alpha.zero_()
    torch.testing.assert_close(m(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(window_size=(3, 4)),
    dict(window_size=(3, 4), stride=(1, 2)),
    dict(indicator='softplus', window_size=2),
])
@pytest.mark.parametrize('training', [False, True])
def test_batch_independence(kwargs, training):
    torch.manual_seed(1)
    m = randomize(FleS(channels=8, reduction=4, **kwargs))
    m.train(training)
    x = torch.randn(4, 8, 6, 7)
    full = m(x)
    for i in range(4):
        torch.testing.assert_close(m(x[i:i + 1]), full[i:i + 1])
    # changing other samples does not change sample 0
    other = x.clone()
    other[1:] = torch.randn(3, 8, 6, 7) * 10
    torch.testing.assert_close(m(other)[0], full[0])


def test_proto_depends_on_batch_documented_exception():
    torch.manual_seed(2)
    m = FleS(proto=True)
    with torch.no_grad():
        m.proto_alpha.fill_(1.0)
    m.eval()
    x = torch.randn(4, 8, 5, 5)
    other = x.clone()
    other[1:] *= torch.rand(3, 8, 1, 1) * 10
    assert not torch.allclose(m(x)[0], m(other)[0])


def test_token_and_channels_last_layouts_match_nchw():
    torch.manual_seed(3)
    ref = randomize(FleS(channels=8, reduction=4))
    x = torch.randn(2, 8, 5, 6)
    y = ref(x)
    # tokens (B, L, C): global over L, same as an (N, C, L, 1) map
    tok = FleS(channels=8, reduction=4)
    tok.load_state_dict(ref.state_dict())
    t = x.flatten(2).transpose(1, 2)  # (B, 30, 8)
    torch.testing.assert_close(tok(t), y.flatten(2).transpose(1, 2))
    # (B, C, L) with channels_first
    seq = FleS(channels=8, reduction=4, data_format='channels_first')
    seq.load_state_dict(ref.state_dict())
    torch.testing.assert_close(seq(x.flatten(2)), y.flatten(2))
    # (N, H, W, C) with windows
    win = randomize(FleS(channels=8, reduction=4, window_size=(2, 4)))
    last = FleS(
        channels=8,
        reduction=4,
        window_size=(2, 4),
        data_format='channels_last')
    last.load_state_dict(win.state_dict())
    torch.testing.assert_close(
        last(x.permute(0, 2, 3, 1)),
        win(x).permute(0, 2, 3, 1))
    # lazy channels_last reads C from the last dim
    lazy = FleS(reduction=4, data_format='channels_last')
    lazy(x.permute(0, 2, 3, 1))
    assert lazy.channels == 8


def test_fused_and_composite_agree_in_module():
    torch.manual_seed(4)
    m = randomize(FleS(channels=8, reduction=4, window_size=(3, 3)))
    x = torch.randn(2, 8, 7, 8, requires_grad=True)
    y1 = m(x)
    g1 = torch.autograd.grad(y1.square().sum(), [x, *m.parameters()])
    m.fused = False
    y2 = m(x)
    g2 = torch.autograd.grad(y2.square().sum(), [x, *m.parameters()])
    torch.testing.assert_close(y1, y2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(
    fles_cpu.operator_entry() is None,
    reason='no C++ compiler or ninja: the CPU extension is not built')
def test_layer_remembers_the_shapes_that_took_the_operator():
    """A map shape whose call took the C++ operator is remembered in the
    layer's cache of the table's ``operator`` row, whose call (the
    operator's entry) gives the same values and gradients; other shapes,
    layouts and dtypes are not remembered, a backends change drops the
    entry and a config change the shapes."""
    torch.manual_seed(6)
    m = randomize(FleS(channels=8, reduction=4, window_size=(3, 4)))
    x = torch.randn(2, 8, 6, 8, requires_grad=True)
    y1 = m(x)
    windows = m.operator_windows
    assert windows.windows == {x.shape: (3, 4)}
    assert windows.entry is not None
    params = [m.fc1_weight, m.fc1_bias, m.fc2_weight, m.fc2_bias]
    g1 = torch.autograd.grad(y1.square().sum(), [x, *m.parameters()])
    y2 = windows(x, params, m.gate, m.indicator)
    assert y2.grad_fn.name() == 'mmact::fles_backward'
    g2 = torch.autograd.grad(y2.square().sum(), [x, *m.parameters()])
    torch.testing.assert_close(y2, y1)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(m(x), y1)
    m(x[:, :, :5])  # another shape, a view (not contiguous)
    m(x.detach().double())  # declined by the entry
    assert windows(x.detach().double(), params, m.gate, m.indicator) is None
    assert list(windows.windows) == [x.shape]
    with backends.using(cpu_kernels=False):
        assert windows.entry is None
        assert windows(x, params, m.gate, m.indicator) is None
        torch.testing.assert_close(m(x), y1)
    m(x)  # takes the operator again through the table
    assert windows.entry is not None
    m.fused = False
    assert windows.windows == {}
    torch.testing.assert_close(m(x), y1)
    assert windows.windows == {}
    # tokens and channels_last maps are never remembered
    tokens = FleS(channels=8, reduction=4)
    tokens(torch.randn(2, 12, 8))
    last = FleS(channels=8, reduction=4, data_format='channels_last')
    last(torch.randn(2, 6, 8, 8))
    assert not tokens.operator_windows.windows
    assert not last.operator_windows.windows


@pytest.mark.skipif(
    fles_cpu.operator_entry() is None,
    reason='no C++ compiler or ninja: the CPU extension is not built')
@pytest.mark.parametrize('channels,remembered', [(8, True), (64, False)])
def test_operator_entry_ignores_autocast(channels, remembered,
                                         cpu_autocast_dtype):
    """Under CPU autocast the layer's result is float32 and the same as
    without it: through the operator's entry (a shape that took it: the
    operator leaves autocast) and, for an MLP over LOOP_MACS, through the
    C passes and the torch MLP (which the layer runs with autocast off)."""
    torch.manual_seed(7)
    m = FleS(channels=channels, reduction=4, window_size=(2, 2))
    m = randomize(m).eval()
    x = torch.randn(2, channels, 16, 16)
    # n * windows * C * hidden * 2 multiply-adds in the MLP
    macs = 2 * 64 * channels * (channels // 4) * 2
    assert (macs <= fles_cpu.LOOP_MACS) == remembered
    with torch.no_grad():
        want = m(x)
        assert list(
            m.operator_windows.windows) == ([x.shape] if remembered else [])
        with torch.autocast('cpu', dtype=cpu_autocast_dtype):
            got = m(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_module_gradcheck_float64():
    torch.manual_seed(5)
    m = randomize(FleS(channels=4, reduction=2, window_size=(2, 3))).double()
    x = torch.randn(1, 4, 3, 4, dtype=torch.float64, requires_grad=True)
    params = list(m.parameters())

    def fn(x, *ps):
        return torch.func.functional_call(
            m, dict(zip([n for n, _ in m.named_parameters()], ps)), (x, ))

    assert torch.autograd.gradcheck(fn, (x, *params), fast_mode=True)


def test_autocast_and_low_precision_finite(cpu_autocast_dtype):
    dtype = cpu_autocast_dtype
    torch.manual_seed(6)
    conv = nn.Conv2d(3, 16, 3, padding=1)
    m = FleS(reduction=4, window_size=(3, 3))
    x = torch.randn(2, 3, 8, 8) * 50
    with torch.autocast('cpu', dtype=dtype):
        m(conv(x))  # lazy materialisation from a low-precision input
    assert all(p.dtype == torch.float32 for p in m.parameters())
    randomize(m)
    with torch.autocast('cpu', dtype=dtype):
        h = conv(x)
        y = m(h)
    assert y.dtype == h.dtype
    y.float().sum().backward()
    assert torch.isfinite(y.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())
    # a low-precision input without autocast keeps its dtype
    z = m(torch.randn(2, 16, 8, 8).to(dtype) * 100)
    assert z.dtype == dtype and torch.isfinite(z.float()).all()


# ------------------------------------------------------------ lazy module
def test_lazy_module_loads_checkpoint_strictly_without_forward():
    torch.manual_seed(7)
    src = randomize(
        FleS(channels=16, reduction=4, window_size=3, indicator='softplus'))
    dst = FleS(reduction=4, window_size=3, indicator='softplus')
    dst.load_state_dict(src.state_dict(), strict=True)
    assert dst.channels == 16
    x = torch.randn(2, 16, 5, 5)
    torch.testing.assert_close(dst(x), src(x))  # forward keeps loaded values


# ------------------------------------------------------------ PoolFormer
def _poolformer_cfg(input_shape):
    return dict(
        type='MaterializedModel',
        input_shape=input_shape,
        model=dict(
            type='ImageClassifier',
            backbone=dict(
                type='PoolFormer',
                arch='s12',
                frozen_stages=-1,  # default 0 freezes the patch embedding
                act_cfg=dict(type='FleS')),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(
                type='LinearClsHead',
                num_classes=10,
                in_channels=512,
                loss=dict(type='CrossEntropyLoss'))))


def test_poolformer_s12_trains_and_reloads_strictly(tmp_path):
    pytest.importorskip('mmpretrain')
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    from mmengine.runner import load_checkpoint, save_checkpoint
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    from mmpretrain.structures import DataSample

    torch.manual_seed(0)
    size = 64
    cfg = Config(dict(model=_poolformer_cfg((1, 3, size, size))))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = PRETRAIN_MODELS.build(cfg.model)
        model.init_weights()
        fles = [m for m in model.modules() if isinstance(m, FleS)]
        assert len(fles) == 12  # one per PoolFormer block (2+2+6+2)
        assert sorted({m.channels for m in fles}) == [256, 512, 1280, 2048]
        assert not any(
            isinstance(p, UninitializedParameter) for p in model.parameters())
        # init_weights (TruncNormal on Linear/Conv2d) left FleS identity-safe
        assert all(torch.count_nonzero(m.fc2_weight) == 0 for m in fles)

        optim = build_optim_wrapper(
            model,
            dict(
                optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
                paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0)))
        in_optim = {
            id(p)
            for group in optim.optimizer.param_groups
            for p in group['params']
        }
        assert in_optim == {id(p) for p in model.parameters()}
        assert all(id(p) in in_optim for m in fles for p in m.parameters())

        data = dict(
            inputs=[
                torch.randint(0, 256, (3, size, size), dtype=torch.uint8)
                for _ in range(2)
            ],
            data_samples=[DataSample().set_gt_label(i) for i in (1, 7)])
        before = fles[0].fc2_weight.detach().clone()
        model.train()
        losses = model.train_step(data, optim)
        assert torch.isfinite(losses['loss'])
        assert not torch.equal(fles[0].fc2_weight.detach(), before)

        path = str(tmp_path / 'poolformer_fles.pth')
        save_checkpoint(model.state_dict(), path)
        fresh = PRETRAIN_MODELS.build(cfg.model.model)  # lazy, no dry run
        load_checkpoint(fresh, path, strict=True)
        model.eval()
        fresh.eval()
        x = torch.randn(1, 3, size, size)
        torch.testing.assert_close(
            fresh(x, mode='tensor'), model(x, mode='tensor'))


def test_explicit_channels_inside_a_model():
    net = nn.Sequential(
        nn.Conv2d(3, 64, 1), FleS(channels=64, window_size=(9, 15)))
    assert not any(
        isinstance(p, UninitializedParameter) for p in net.parameters())
    y = net(torch.randn(1, 3, 20, 30))
    assert y.shape == (1, 64, 20, 30)


def test_materialized_model_takes_the_runner_data_preprocessor():
    # Runner hands a config's top-level data_preprocessor to the outermost
    # model config, which here is the MaterializedModel builder.
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    cfg = _poolformer_cfg((1, 3, 32, 32))
    cfg['data_preprocessor'] = dict(
        type='ClsDataPreprocessor', mean=[1., 2., 3.], std=[4., 5., 6.])
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = PRETRAIN_MODELS.build(cfg)
    assert model.data_preprocessor.mean.flatten().tolist() == [1., 2., 3.]
    assert all(not isinstance(p, torch.nn.parameter.UninitializedParameter)
               for p in model.parameters())
