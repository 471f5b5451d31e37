"""swap_activations / untie_activations / ActSwapBackbone."""
import copy

import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS, DefaultScope

import mmact  # noqa: F401
from mmact.models.utils import swap_activations, untie_activations

LEARNABLE = dict(type='AGLU')
LEARNABLE_CLS = 'AGLU'


def _count(model, name):
    return sum(type(m).__name__ == name for m in model.modules())


def test_swap_on_stock_mmdet_resnet_keeps_sharing():
    from mmdet.models.backbones import ResNet
    model = ResNet(depth=50)
    swapped = swap_activations(model, LEARNABLE)
    # stem relu + one shared relu per block (16 blocks)
    assert len(swapped) == 17 and 'layer1.0.relu' in swapped
    assert _count(model, 'ReLU') == 0
    assert _count(model, LEARNABLE_CLS) == 17
    outs = model(torch.rand(1, 3, 64, 64))
    assert outs[-1].shape == (1, 2048, 2, 2)


def test_shared_instance_stays_shared():
    act = nn.ReLU()
    model = nn.Sequential(nn.Linear(4, 4), act, nn.Linear(4, 4), act)
    names = swap_activations(model, LEARNABLE)
    assert names == ['1', '3']
    assert model[1] is model[3] and type(model[1]).__name__ == LEARNABLE_CLS


def test_untie_gives_each_position_its_own_copy():
    from mmdet.models.backbones import ResNet
    torch.manual_seed(0)
    model = ResNet(depth=50, out_indices=(3, ))
    model.eval()  # mmdet's train() returns None: no chaining
    x = torch.rand(1, 3, 64, 64)
    before = model(x)[0]
    assert len(untie_activations(model)) == 16
    torch.testing.assert_close(model(x)[0], before)  # ReLU copies: same math
    swap_activations(model, LEARNABLE)
    block = model.layer1[0]
    acts = [block.act1, block.act2, block.act3]
    assert len({id(a) for a in acts}) == 3
    assert all(type(a).__name__ == LEARNABLE_CLS for a in acts)
    assert _count(model, LEARNABLE_CLS) == 1 + 3 * 16
    keys = model.state_dict()
    assert any(k.startswith('layer1.0.act3.') for k in keys)
    assert not any(k.startswith('layer1.0.relu') for k in keys)
    # each position really is used once per forward, in order
    calls = []
    for i, act in enumerate(acts):
        act.register_forward_hook(lambda m, a, o, i=i: calls.append(i))
    model(x)
    assert calls == [0, 1, 2]
    # deepcopy (EMA hooks do this) keeps the dispatcher on the copies: the
    # copy's forward calls the copy's activations, not the model's
    clone = copy.deepcopy(model)
    copies = [clone.layer1[0].act1, clone.layer1[0].act2, clone.layer1[0].act3]
    ran = []
    for act in acts + copies:
        act.register_forward_hook(lambda m, a, o: ran.append(m))
    clone(x)
    assert len(ran) == 3 and all(a is b for a, b in zip(ran, copies))


def test_untied_keys_match_actresnet():
    from mmpretrain.models.backbones import ResNet
    from mmact.models.backbones import ActResNet
    stock = ResNet(depth=18)
    swap_activations(stock, LEARNABLE, untie=True)
    ours = ActResNet(18, act_cfg=LEARNABLE)
    assert set(stock.state_dict()) == set(ours.state_dict())
    stock.load_state_dict(ours.state_dict(), strict=True)
    stock.eval()
    ours.eval()
    x = torch.rand(1, 3, 64, 64)
    torch.testing.assert_close(stock(x)[0], ours(x)[0])


def test_untie_with_checkpointing_matches():
    from mmdet.models.backbones import ResNet
    torch.manual_seed(0)
    ref = ResNet(depth=18, out_indices=(3, ))
    swap_activations(ref, dict(type='PReLU'), untie=True)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, nn.PReLU):
                m.weight.uniform_(-1, 1)  # make the positions differ
    cp = copy.deepcopy(ref)
    for m in cp.modules():
        if hasattr(m, 'with_cp'):
            m.with_cp = True
    x = torch.rand(1, 3, 64, 64, requires_grad=True)
    ref(x)[0].sum().backward()
    grads = {k: p.grad.clone() for k, p in ref.named_parameters()}
    cp(x)[0].sum().backward()
    for k, p in cp.named_parameters():
        torch.testing.assert_close(p.grad, grads[k], msg=k)


def test_exclude_and_type_names():
    from mmdet.models.backbones import ResNet
    model = ResNet(
        depth=50,
        plugins=[
            dict(
                cfg=dict(type='SEAttention'),
                position='after_conv3',
                stages=(True, True, True, True))
        ])
    swapped = swap_activations(
        model, LEARNABLE, target_types='ReLU', exclude=['*.se.*'])
    assert not any('.se.' in n for n in swapped)
    assert isinstance(model.layer1[0].se.act, nn.ReLU)
    with pytest.raises(KeyError, match='NoSuchType'):
        swap_activations(model, LEARNABLE, target_types='NoSuchType')


@pytest.mark.parametrize('scope', ['mmdet', 'mmpretrain'])
def test_act_swap_backbone_from_config(scope):
    import importlib
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(
            dict(
                type='ActSwapBackbone',
                act_cfg=LEARNABLE,
                untie=True,
                backbone=dict(type='ResNet', depth=18, frozen_stages=1)))
    assert type(model).__name__ == 'ResNet'  # no wrapper, no key prefix
    assert type(model).__module__.startswith(scope)
    assert isinstance(model.layer1[0].act1, type(model.relu))
    assert all(not p.requires_grad for p in model.relu.parameters())
    assert all(not p.requires_grad for p in model.layer1.parameters())
    assert all(p.requires_grad for p in model.layer2.parameters())
