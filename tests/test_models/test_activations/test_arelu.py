"""Tests of the AReLU module."""
import pytest
import torch
from mmengine.registry import MODELS, DefaultScope

import mmact  # noqa: F401
from mmact.models.activations import AReLU


@pytest.mark.parametrize('scope', ['mmdet', 'mmpretrain'])
def test_build_under_scopes_and_values(scope):
    pytest.importorskip(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    with DefaultScope.overwrite_default_scope(scope):
        m = registry.build(dict(type='AReLU'))
    assert isinstance(m, AReLU)
    assert m.alpha.item() == pytest.approx(0.9)
    assert m.beta.item() == pytest.approx(2.0)
    x = torch.tensor([-2.0, -0.5, 0.0, 1.0, 3.0])
    pos = 1 + torch.sigmoid(torch.tensor(2.0))
    want = torch.where(x < 0, 0.9 * x, pos * x)
    torch.testing.assert_close(m(x), want)


def test_learns_both_parameters_and_conv_module():
    from mmcv.cnn import ConvModule
    conv = ConvModule(3, 4, 3, act_cfg=dict(type='AReLU'))
    conv(torch.randn(2, 3, 8, 8)).sum().backward()
    assert conv.activate.alpha.grad is not None
    assert conv.activate.beta.grad is not None
    assert 'alpha=0.9' in repr(conv.activate)


def test_bad_arguments():
    with pytest.raises(TypeError, match='alpha must be a float'):
        AReLU(alpha='0.9')
    with pytest.raises(TypeError, match='unexpected keyword'):
        MODELS.build(dict(type='AReLU', gamma=1.0))
    with pytest.raises(TypeError, match='floating-point'):
        AReLU()(torch.arange(4))
