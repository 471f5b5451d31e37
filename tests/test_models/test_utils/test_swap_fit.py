"""Function-preserving swap: swap_activations(match=True), ActSwapBackbone
(match=True) and the match protocol of learnable activations."""
import copy

import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS, DefaultScope
from mmengine.runner import save_checkpoint

import mmact  # noqa: F401
from mmact.models.activations.base import PENDING_MATCH
from mmact.models.utils import (input_moments, replace_activations,
                                swap_activations, untie_activations)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _mmdet_resnet(depth=18, seed=0):
    """An mmdet ResNet in eval mode with varied BN affines and running
    statistics that describe noise inputs (a stand-in for a trained one)."""
    from mmdet.models.backbones import ResNet
    torch.manual_seed(seed)
    model = ResNet(depth=depth, zero_init_residual=False, norm_eval=False)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.3, 1.2)
            m.bias.data.normal_(0, 0.3)
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, 64, 64))
    model.eval()
    return model


def test_sigmoid_gates_to_apa_are_exact_in_an_se_resnet():
    from mmpretrain.models.backbones import SEResNet
    torch.manual_seed(0)
    model = SEResNet(depth=50).double()
    model.eval()
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    ref = model(x)[-1]
    names = swap_activations(
        model, dict(type='APA'), 'Sigmoid', match=True,
        example_input=x)
    assert len(names) == 16
    assert _rel(model(x)[-1], ref) < 1e-13


def test_silu_to_aglu_is_exact():
    model = _mmdet_resnet().double()
    swap_activations(model, dict(type='SiLU'))
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    ref = model(x)[-1]
    swap_activations(model, dict(type='AGLU'), 'SiLU', match=True,
                     example_input=x)
    assert _rel(model(x)[-1], ref) < 1e-13


@pytest.mark.parametrize('module,name,kwargs,swapped', [
    ('mmdet.models.backbones', 'ResNeXt', dict(groups=32, base_width=4), 49),
    ('mmpretrain.models.backbones', 'ResNeXt',
     dict(groups=32, width_per_group=4), 49),
    # 16 more: the ReLU inside each SE layer
    ('mmpretrain.models.backbones', 'SEResNeXt',
     dict(groups=32, width_per_group=4), 65),
])
def test_every_activation_of_the_resnext_family_is_matched(
        module, name, kwargs, swapped):
    import importlib
    torch.manual_seed(0)
    model = getattr(importlib.import_module(module), name)(
        depth=50, **kwargs).double()
    model.eval()
    swap_activations(model, dict(type='SiLU'), untie=True)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    ref = model(x)[-1]
    names = swap_activations(
        model, dict(type='AGLU'), 'SiLU', match=True, example_input=x)
    assert len(names) == swapped
    assert _rel(model(x)[-1], ref) < 1e-13


def test_relu_to_aglu_matched_is_far_closer_than_the_init_ranges():
    model = _mmdet_resnet()
    x = torch.randn(4, 3, 64, 64)
    ref = model(x)[-1]
    random_init, matched = copy.deepcopy(model), copy.deepcopy(model)
    torch.manual_seed(0)
    swap_activations(random_init, dict(type='AGLU'), untie=True)
    swap_activations(matched, dict(type='AGLU'), untie=True, match=True)
    far, near = _rel(random_init(x)[-1], ref), _rel(matched(x)[-1], ref)
    assert near < 0.1 and near < far / 5
    # tighter tolerance, closer function and sharper gates
    tight = copy.deepcopy(model)
    swap_activations(tight, dict(type='AGLU'), untie=True, match=True,
                     tolerance=2e-3)
    assert _rel(tight(x)[-1], ref) < near
    assert float(tight.layer1[0].act1.kappa_param) > float(
        matched.layer1[0].act1.kappa_param)


def test_data_free_moments_come_from_the_preceding_bn():
    model = _mmdet_resnet()
    untie_activations(model)
    block = model.layer1[0]
    swaps = [(n, nn.Identity(), m) for n, m in
             [('relu', model.relu), ('act1', block.act1),
              ('act2', block.act2)]]
    moments = input_moments(model, swaps, (4, 3, 64, 64))
    stem = moments[id(model.relu)]
    assert stem.source == 'bn'
    assert torch.allclose(stem.means, model.bn1.bias.double())
    assert torch.allclose(stem.stds, model.bn1.weight.double().abs())
    assert moments[id(block.act1)].source == 'bn'
    assert torch.allclose(moments[id(block.act1)].stds,
                          block.bn1.weight.double().abs())
    # after the residual sum: measured in the batch-statistics forward
    assert moments[id(block.act2)].source == 'propagated'
    # the running statistics are untouched
    assert model.bn1.num_batches_tracked == 3


def test_calibration_batches_measure_the_inputs():
    model = _mmdet_resnet()
    batches = [torch.randn(2, 3, 64, 64) for _ in range(2)]
    captured = []
    handle = model.relu.register_forward_pre_hook(
        lambda m, a: captured.append(a[0].clone()))
    model(torch.cat(batches))
    handle.remove()
    swaps = [('relu', nn.Identity(), model.relu)]
    m = input_moments(model, swaps, calibration=batches)[id(model.relu)]
    x = captured[0].transpose(0, 1).reshape(64, -1).double()
    assert m.source == 'calibration'
    assert torch.allclose(m.means, x.mean(1))
    assert torch.allclose(m.stds, x.std(1, unbiased=False))


def test_a_model_without_bn_is_fitted_under_a_standard_normal():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    swap_activations(model, dict(type='AGLU'), match=True, tolerance=0.01)
    from mmact.ops.apa.gate_fit import fit_gate
    ref = fit_gate('aglu', nn.ReLU(), 'limit', torch.zeros(1),
                   torch.ones(1), tolerance=0.01)
    assert float(model[1].kappa_param) == pytest.approx(
        float(ref.kappa), rel=1e-5)


@pytest.mark.parametrize('act,target', [('AReLU', 'ReLU'), ('APA', 'ReLU'),
                                        ('AGLU', 'Tanh')])
def test_no_declared_fit_names_both_types_and_leaves_the_model(act, target):
    model = nn.Sequential(nn.Linear(4, 4), getattr(nn, target)())
    with pytest.raises(TypeError, match=f'{act} cannot stand in for '
                       f'{target}'):
        swap_activations(model, dict(type=act), target, match=True)
    assert isinstance(model[1], getattr(nn, target))


def test_refusals_come_before_the_model_is_touched():
    from mmdet.models.backbones import ResNet
    model = ResNet(depth=18)
    before = [type(m) for m in model.modules()]
    with pytest.raises(TypeError, match='AReLU cannot stand in for ReLU'):
        swap_activations(model, dict(type='AReLU'), untie=True, match=True)
    for bad in (0, -0.1, 'tight', True):
        with pytest.raises(ValueError, match='tolerance must be a number > 0'):
            swap_activations(model, dict(type='AGLU'), untie=True,
                             match=True, tolerance=bad)
    # not even untied
    assert [type(m) for m in model.modules()] == before
    with pytest.raises(ValueError, match=r"got -1"):
        _act_swap_backbone(tolerance=-1)


def test_unreached_tolerance_warns_with_the_error_per_layer():
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4),
                          nn.GELU())
    with pytest.warns(UserWarning, match=r'above the relative error '
                      r'tolerance 0.001: 1 \(GELU -> AGLU\): 0.010'):
        swap_activations(model, dict(type='AGLU'), 'GELU', match=True,
                         tolerance=1e-3)
    assert float(model[1].kappa_param) == pytest.approx(1.70, abs=0.02)


def test_the_data_free_forward_needs_an_input_shape():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
    with pytest.raises(ValueError, match='pass example_input'):
        swap_activations(model, dict(type='AGLU'), match=True)


def _act_swap_backbone(tolerance=1e-2, **kwargs):
    cfg = dict(
        type='ActSwapBackbone',
        act_cfg=dict(type='AGLU'),
        untie=True,
        match=True,
        tolerance=tolerance,
        backbone=dict(type='ResNet', depth=18, zero_init_residual=False,
                      **kwargs))
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(cfg)


def test_act_swap_backbone_fits_on_the_first_forward_after_pretrained(
        tmp_path):
    source = _mmdet_resnet()
    path = str(tmp_path / 'relu_r18.pth')
    save_checkpoint(dict(state_dict=source.state_dict()), path)
    backbone = _act_swap_backbone(
        init_cfg=dict(type='Pretrained', checkpoint=path))
    act = backbone.layer1[0].act1
    assert PENDING_MATCH in act.__dict__
    backbone.init_weights()  # loads the ReLU weights; AGLU keys missing
    backbone.eval()
    x = torch.randn(2, 3, 64, 64)
    out = backbone(x)[-1]
    assert PENDING_MATCH not in act.__dict__
    # the fit read the loaded BN: the same as matching the loaded model
    expected = copy.deepcopy(source)
    swap_activations(expected, dict(type='AGLU'), untie=True, match=True,
                     example_input=(4, 3, 64, 64))
    assert torch.allclose(act.kappa_param,
                          expected.layer1[0].act1.kappa_param)
    assert _rel(out, source(x)[-1]) < 0.1


def test_act_swap_backbone_keeps_parameters_a_checkpoint_loads():
    backbone = _act_swap_backbone()
    state = backbone.state_dict()
    state['layer1.0.act1.kappa_param'] = torch.tensor([3.0])
    state['layer1.0.act1.lambda_param'] = torch.tensor([0.5])
    fresh = _act_swap_backbone()
    fresh.load_state_dict(state)  # resume / an mmact AGLU checkpoint
    fresh.eval()
    fresh(torch.randn(1, 3, 64, 64))
    assert float(fresh.layer1[0].act1.kappa_param) == 3.0
    assert float(fresh.layer1[0].act1.lambda_param) == 0.5


def test_replace_activations_reports_each_place():
    act = nn.ReLU()
    model = nn.Sequential(nn.Linear(4, 4), act, nn.Linear(4, 4), act)
    swaps = replace_activations(model, dict(type='AGLU'))
    assert [name for name, _, _ in swaps] == ['1', '3']
    assert swaps[0][1] is swaps[1][1] is model[1]
    assert swaps[0][2] is act
