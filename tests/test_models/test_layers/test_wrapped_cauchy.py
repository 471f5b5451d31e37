"""WrappedCauchyLinear: wrapped Cauchy angular logits (Han, ICML 2023)."""
import math

import pytest
import torch
from mmengine.registry import MODELS

from mmact.models.layers import WrappedCauchyLinear


def wrapped_cauchy_density(theta, gamma):
    """The wrapped Cauchy density as a sum over windings of the Cauchy
    density with scale -ln(gamma) (truncated; converges as 1/k^2)."""
    scale = -torch.log(gamma)
    k = torch.arange(-20000, 20001, dtype=torch.float64)
    angles = theta[..., None] + 2 * math.pi * k
    return (scale[..., None] / (math.pi *
                                (scale[..., None]**2 + angles**2))).sum(-1)


def test_logits_are_the_scaled_density_of_the_angle():
    torch.manual_seed(0)
    layer = WrappedCauchyLinear(6, 4, bias=False, s_trainable=False).double()
    with torch.no_grad():
        layer.concentration_logit.copy_(torch.tensor([-1.0, 0.0, 1.0, 2.5]))
    x = torch.randn(3, 6, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity(
        x[:, None], layer.weight[None], dim=-1)
    gamma = torch.sigmoid(layer.concentration_logit).expand(3, 4)
    density = wrapped_cauchy_density(torch.acos(cos), gamma.detach())
    # the authors' 2 * 3.14 for 2 pi: every logit larger by pi / 3.14
    torch.testing.assert_close(
        layer(x), 300 * density * math.pi / 3.14, rtol=1e-3, atol=0)


def test_learned_scale_bias_and_the_authors_names():
    layer = MODELS.build(
        dict(
            type='WCLinear', in_features=5, out_features=3,
            s_trainable=True))
    assert type(layer) is WrappedCauchyLinear
    assert sorted(layer.state_dict()) == [
        'bias', 'concentration_logit', 'scale', 'weight'
    ]
    assert layer.scale.item() == 50.0
    assert torch.equal(layer.concentration_logit, torch.ones(3))
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer.double(), (x, ))
    fixed = WrappedCauchyLinear(5, 3, s_trainable=False)
    assert 'scale' not in fixed.state_dict()


@pytest.mark.parametrize('bias', [0.0, 0.3])
def test_bias_shifts_the_cosine(bias):
    layer = WrappedCauchyLinear(2, 1, s_trainable=False).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 0.0]]))
        layer.bias.fill_(bias)
        layer.concentration_logit.zero_()  # g = 1/2
    x = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    cos = 1 / math.sqrt(2) + bias
    want = 300 * (1 - 0.25) / (2 * 3.14 * (1 + 0.25 - cos))
    assert layer(x).item() == pytest.approx(want, rel=1e-5)  # eps in norms


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='learnable_init_value .* got -1'):
        WrappedCauchyLinear(4, 2, learnable_init_value=-1)
    with pytest.raises(ValueError, match='eps must be > 0, got 0'):
        WrappedCauchyLinear(4, 2, eps=0)
