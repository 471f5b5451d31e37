"""Tests of the APA / AGLU modules (registry, ConvModule, options, errors)."""
import pytest
import torch
from mmengine.registry import MODELS, DefaultScope

import mmact  # noqa: F401  (registers the activations)
from mmact.models.activations import AGLU, APA
from mmact.ops import aglu_reference, apa_reference


@pytest.mark.parametrize('scope', ['mmdet', 'mmpretrain'])
@pytest.mark.parametrize('name', ['APA', 'AGLU'])
def test_build_under_downstream_scopes(scope, name):
    pkg = pytest.importorskip(scope)  # noqa: F841
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    with DefaultScope.overwrite_default_scope(scope):
        module = registry.build(dict(type=name, num_parameters=4))
    assert type(module).__name__ == name
    assert module.kappa_param.shape == (4, )
    assert module(torch.randn(2, 4, 3, 3)).shape == (2, 4, 3, 3)


def test_conv_module_injects_inplace():
    from mmcv.cnn import ConvModule
    conv = ConvModule(3, 8, 3, act_cfg=dict(type='AGLU'))
    assert isinstance(conv.activate, AGLU) and conv.activate.inplace is True
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    y = conv(x)
    y.sum().backward()
    assert y.shape == (2, 8, 7, 7)
    assert conv.activate.kappa_param.grad is not None
    assert conv.activate.lambda_param.grad is not None
    # the activation did not modify its input although inplace=True
    pre = conv.norm(conv.conv(x)) if conv.with_norm else conv.conv(x)
    torch.testing.assert_close(
        y,
        aglu_reference(pre, conv.activate.kappa_param,
                       conv.activate.lambda_param))


def test_defaults_follow_table_xv():
    torch.manual_seed(0)
    aglus = [AGLU() for _ in range(50)]
    apas = [APA() for _ in range(50)]
    ak = torch.cat([m.kappa_param.detach() for m in aglus])
    al = torch.cat([m.lambda_param.detach() for m in aglus])
    pk = torch.cat([m.kappa_param.detach() for m in apas])
    assert ak.min() >= 1.0 and ak.max() <= 1.3 and ak.std() > 0
    assert al.min() >= 0.0 and al.max() <= 1.0 and al.std() > 0
    assert pk.min() >= -1.0 and pk.max() <= 0.0 and pk.std() > 0
    m = AGLU()
    assert m.kappa_param.shape == (1, ) and m.lambda_param.shape == (1, )
    assert m.lambda_min == 1e-4


def test_fixed_and_ranged_init_and_values():
    m = AGLU(num_parameters=3, kappa_init=1.5, lambda_init=(0.2, 0.4))
    assert torch.equal(m.kappa_param.detach(), torch.full((3, ), 1.5))
    assert ((m.lambda_param >= 0.2) & (m.lambda_param <= 0.4)).all()
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    m = m.double()
    want = aglu_reference(x, m.kappa_param.view(1, 3, 1, 1),
                          m.lambda_param.view(1, 3, 1, 1))
    torch.testing.assert_close(m(x), want)
    apa_m = APA(kappa_init=1.0, lambda_init=1.0)
    x = torch.randn(10)
    torch.testing.assert_close(apa_m(x), torch.sigmoid(x))
    torch.testing.assert_close(
        apa_m(x), apa_reference(x, torch.tensor(1.0), torch.tensor(1.0)))


def test_token_layout():
    m = AGLU(num_parameters=6, channel_dim='NLC', kappa_init=(0.5, 1.5))
    assert m.channel_dim == -1
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(
        m(x), aglu_reference(x, m.kappa_param, m.lambda_param))
    with pytest.raises(ValueError, match='num_parameters=6.*5 channels'):
        AGLU(num_parameters=6)(x.transpose(1, 2).contiguous()[:, :5])


def test_per_channel_backward_and_lambda_clamp():
    m = APA(num_parameters=4, lambda_init=0.5)
    with torch.no_grad():
        m.lambda_param[0] = -3.0  # below lambda_min: clamped in forward
    x = torch.randn(3, 4, 5, 5)
    out = m(x)
    ref = APA(num_parameters=4, lambda_init=0.5)
    ref.kappa_param.data.copy_(m.kappa_param.data)
    ref.lambda_param.data.copy_(torch.tensor([1e-4, 0.5, 0.5, 0.5]))
    torch.testing.assert_close(out, ref(x))
    out.sum().backward()
    assert m.kappa_param.grad.shape == (4, )
    assert m.lambda_param.grad[0] == 0 and (m.lambda_param.grad[1:] != 0).all()


@pytest.mark.parametrize('cls,reference', [(APA, apa_reference),
                                           (AGLU, aglu_reference)])
def test_forward_sees_swapped_and_parametrized_parameters(cls, reference):
    """forward reads the parameters from ``_parameters`` (cheaper than
    ``nn.Module.__getattr__``): what ``torch.func.functional_call`` swaps in
    and what a parametrization computes are still the values used."""
    m = cls(num_parameters=3, kappa_init=1.0, lambda_init=0.5)
    x = torch.randn(2, 3, 4)
    kappa, lam = torch.tensor([0.5, 1.5, 2.0]), torch.tensor([0.3, 1.0, 2.0])
    want = reference(x, kappa.view(3, 1), lam.view(3, 1))
    got = torch.func.functional_call(m, {
        'kappa_param': kappa,
        'lambda_param': lam
    }, (x, ))
    torch.testing.assert_close(got, want)

    class Double(torch.nn.Module):

        def forward(self, p):
            return 2 * p

    torch.nn.utils.parametrize.register_parametrization(
        m, 'kappa_param', Double())
    with torch.no_grad():
        m.parametrizations.kappa_param.original.copy_(kappa / 2)
    torch.testing.assert_close(
        m(x), reference(x, kappa.view(3, 1), torch.full((3, 1), 0.5)))


def test_extra_repr_and_state_dict_keys():
    m = AGLU(num_parameters=8, kappa_init=1.0, lambda_init=(0.0, 1.0))
    text = repr(m)
    for part in ('num_parameters=8', 'channel_dim=1', 'kappa_init=1.0',
                 'lambda_init=(0.0, 1.0)', 'lambda_min=0.0001'):
        assert part in text
    assert set(m.state_dict()) == {'kappa_param', 'lambda_param'}


@pytest.mark.parametrize('cls', [APA, AGLU])
def test_bad_arguments(cls):
    with pytest.raises(ValueError, match='lambda_init must be > 0'):
        cls(lambda_init=0.0)
    with pytest.raises(ValueError, match='lambda_init=.*must lie in'):
        cls(lambda_init=(-1.0, -0.5))
    with pytest.raises(ValueError, match='lambda_min must be > 0'):
        cls(lambda_min=0)
    with pytest.raises(ValueError, match='low > high'):
        cls(kappa_init=(1.3, 1.0))
    with pytest.raises(TypeError, match='kappa_init must be a float'):
        cls(kappa_init='uniform')
    with pytest.raises(ValueError, match='num_parameters must be 1'):
        cls(num_parameters=0)
    with pytest.raises(ValueError, match="channel_dim='NWC'.*accepted"):
        cls(channel_dim='NWC')
    with pytest.raises(TypeError, match='kapa_init'):
        MODELS.build(dict(type=cls.__name__, kapa_init=1.0))
    with pytest.raises(TypeError, match='floating-point'):
        cls()(torch.ones(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match='num_parameters=3.*4 channels'):
        cls(num_parameters=3)(torch.randn(2, 4, 5))
