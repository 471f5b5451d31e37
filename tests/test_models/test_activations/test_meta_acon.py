"""Tests of the Meta-ACON module."""
import pytest
import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer

import mmact  # noqa: F401
from mmact.models.activations import MetaACON
from mmact.models.utils import materialize_lazy_modules
from mmact.models.activations.base import no_decay_parameters


def _reference(module, x):
    """The authors' layer composition with torch layers, same weights."""
    c, h = module.channels, module.hidden(module.channels)
    fc1, fc2 = nn.Linear(c, h).double(), nn.Linear(h, c).double()
    bn1, bn2 = nn.BatchNorm1d(h).double(), nn.BatchNorm1d(c).double()
    with torch.no_grad():
        fc1.weight.copy_(module.fc1_weight)
        fc1.bias.copy_(module.fc1_bias)
        fc2.weight.copy_(module.fc2_weight)
        fc2.bias.copy_(module.fc2_bias)
    beta = torch.sigmoid(bn2(fc2(bn1(fc1(x.mean(dim=(2, 3)))))))[..., None,
                                                                 None]
    p1, p2 = module.p1.view(1, -1, 1, 1), module.p2.view(1, -1, 1, 1)
    return (p1 - p2) * x * torch.sigmoid(beta * (p1 - p2) * x) + p2 * x


def test_meta_acon_matches_the_reference_composition():
    torch.manual_seed(0)
    act = build_activation_layer(dict(type='MetaACON', inplace=True))
    assert isinstance(act, MetaACON) and act.channels is None  # lazy
    x = torch.randn(4, 40, 5, 6, dtype=torch.float64)
    act = act.double()
    y = act(x)  # training mode: batch statistics
    assert act.channels == 40 and act.hidden(40) == 16  # max(16, 40 // 16)
    torch.testing.assert_close(y, _reference(act, x))
    # running statistics moved once; eval uses them
    assert not torch.equal(act.bn2_running_mean, torch.zeros(40))
    act.eval()
    beta = act.beta(x)
    h = torch.nn.functional.linear(
        x.mean(dim=(2, 3)), act.fc1_weight, act.fc1_bias)
    h = (h - act.bn1_running_mean) / (act.bn1_running_var + act.eps).sqrt()
    b = torch.nn.functional.linear(h, act.fc2_weight, act.fc2_bias)
    b = (b - act.bn2_running_mean) / (act.bn2_running_var + act.eps).sqrt()
    torch.testing.assert_close(beta, torch.sigmoid(b))


def test_meta_acon_parameters_and_decay_policy():
    act = MetaACON(channels=512)
    h = 512 // 16
    counts = {n: p.numel() for n, p in act.named_parameters()}
    assert counts == dict(
        p1=512,
        p2=512,
        fc1_weight=h * 512,
        fc1_bias=h,
        fc2_weight=512 * h,
        fc2_bias=512,
        bn1_weight=h,
        bn1_bias=h,
        bn2_weight=512,
        bn2_bias=512)
    no_decay = {n for n, _ in no_decay_parameters(act)}
    assert no_decay == set(counts) - {'fc1_weight', 'fc2_weight'}
    plain = MetaACON(channels=8, norm=False)
    assert not [n for n, _ in plain.named_parameters() if 'bn' in n]
    assert set(plain.activation_stats()) == {'p1', 'p2'}


def test_meta_acon_without_norm_is_per_sample_and_gradchecks():
    act = MetaACON(channels=6, min_hidden=2, reduction=2, norm=False)
    act.double()
    x = torch.randn(3, 6, 4, 4, dtype=torch.float64, requires_grad=True)
    # each sample's output depends on that sample only
    torch.testing.assert_close(act(x)[1:2], act(x[1:2]))
    assert torch.autograd.gradcheck(act, (x, ))


def test_meta_acon_lazy_checkpoint_and_probe():
    src = MetaACON()
    materialize_lazy_modules(src, torch.randn(2, 24, 4, 4))
    state = src.state_dict()
    assert 'bn1_running_var' in state
    fresh = MetaACON()
    fresh.load_state_dict(state, strict=True)
    assert fresh.channels == 24
    for key, value in state.items():
        assert torch.equal(fresh.state_dict()[key], value), key
    # the statistics probe leaves the running statistics untouched
    before = fresh.bn1_running_mean.clone()
    stats = fresh.forward_stats(torch.randn(2, 24, 4, 4))
    assert set(stats) == {'beta_mean', 'beta_std'}
    assert 0 < stats['beta_mean'] < 1
    assert torch.equal(fresh.bn1_running_mean, before)


def test_meta_acon_errors():
    act = MetaACON(channels=8)
    with pytest.raises(ValueError, match='at least 2 samples'):
        act(torch.randn(1, 8, 3, 3))
    with pytest.raises(ValueError, match='built for 8 channels'):
        act(torch.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match='reduction'):
        MetaACON(reduction=0)
    act.eval()
    assert act(torch.randn(1, 8, 3, 3)).shape == (1, 8, 3, 3)


def test_meta_acon_norm_eval_uses_frozen_statistics_in_training():
    torch.manual_seed(1)
    act = MetaACON(channels=8, norm_eval=True)
    with torch.no_grad():
        act.bn1_running_mean.normal_()
        act.bn2_running_var.uniform_(0.5, 2.0)
    stats = {k: v.clone() for k, v in act.state_dict().items()}
    x = torch.randn(3, 8, 4, 4)
    y = act.train()(x)  # batch statistics are not used: any batch size
    assert act(x[:1]).shape == (1, 8, 4, 4)
    torch.testing.assert_close(act.eval()(x), y)
    for key, value in act.state_dict().items():
        assert torch.equal(value, stats[key]), key
    # each sample's output depends on that sample only
    torch.testing.assert_close(act.train()(x[1:2]), y[1:2])
