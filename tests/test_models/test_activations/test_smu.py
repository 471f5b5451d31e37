"""Tests of the SMU module."""
import pytest
import torch
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.activations import SMU
from mmact.models.activations.base import no_decay_parameters


def test_smu_module_builds_and_matches_formula():
    # mmcv's ConvModule injects inplace=True; the root registry builds it
    act = build_activation_layer(dict(type='SMU', mu=2.0, inplace=True))
    assert isinstance(act, SMU)
    assert isinstance(MODELS.build(dict(type='SMU')), SMU)
    x = torch.randn(2, 3, 4, 4)
    want = 0.5 * (1.25 * x + 0.75 * x * torch.erf(2.0 * 0.75 * x))
    torch.testing.assert_close(act(x), want)
    # mu is one learnable scalar per layer, without weight decay
    assert [n for n, _ in act.named_parameters()] == ['mu']
    assert [n for n, _ in no_decay_parameters(act)] == ['mu']
    act(x).sum().backward()
    assert act.mu.grad is not None and act.mu.grad.shape == (1, )
    assert set(act.activation_stats()) == {'mu'}


def test_smu_default_start_and_fixed_mu():
    act = SMU()
    x = torch.linspace(-3, 3, 13)
    # the authors' mu = 1e6 starts SMU as Leaky ReLU(0.25)
    torch.testing.assert_close(
        act(x), torch.nn.functional.leaky_relu(x, 0.25), atol=1e-6, rtol=0)
    fixed = SMU(mu=1.5, learnable_mu=False)
    assert not list(fixed.parameters()) and fixed.activation_stats() == {}
    assert 'mu' not in fixed.state_dict()


@pytest.mark.parametrize('kwargs,match', [(dict(alpha=1.0), 'alpha'),
                                          (dict(mu=0.0), 'mu'),
                                          (dict(alpha='a'), 'alpha')])
def test_smu_bad_args(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SMU(**kwargs)
