from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseTTAModel

import mmact  # noqa: F401
from mmact.engine.hooks import (CheckpointKeysHook, CheckpointMismatchError,
                                checkpoint_mismatch)
from mmact.models.activations import AGLU


class Net(nn.Module):

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.act = AGLU()
        self.fc = nn.Linear(4, classes)

    def test_step(self, data):
        return data


class TTA(BaseTTAModel):

    def merge_preds(self, data_samples_list):
        return data_samples_list


class FakeRunner:

    def __init__(self, model):
        self.model = model


def test_exact_checkpoint_fits():
    net = Net()
    # mmengine writes wrapped models with a 'module.' prefix.
    state = OrderedDict(
        (f'module.{k}', v) for k, v in Net().state_dict().items())
    assert not checkpoint_mismatch(net, {'state_dict': state})
    # BN counters are not required (mmengine does not require them either).
    state = {
        k: v
        for k, v in net.state_dict().items() if 'num_batches_tracked' not in k
    }
    assert not checkpoint_mismatch(net, state)


def test_plain_weights_leave_activation_parameters_unloaded():
    net = Net()
    state = {
        k: v
        for k, v in net.state_dict().items() if not k.startswith('act.')
    }
    mismatch = checkpoint_mismatch(net, {'state_dict': state})
    assert mismatch.missing == [
        f'act.{name}' for name, _ in net.act.named_parameters()
    ] and len(mismatch.missing) == 2
    assert mismatch.unexpected == [] and mismatch.shape == []
    assert f'2 of {len(net.state_dict())} model keys are missing' in \
        mismatch.describe()


def test_foreign_checkpoint_names_counts_and_first_keys():
    net = Net()
    state = dict(Net(classes=5).state_dict())
    state.update({f'head.extra{i}': torch.zeros(1) for i in range(7)})
    mismatch = checkpoint_mismatch(net, state)
    assert mismatch.missing == []
    assert len(mismatch.unexpected) == 7
    assert mismatch.shape == [
        'fc.weight: checkpoint (5, 4) vs model (3, 4)',
        'fc.bias: checkpoint (5,) vs model (3,)'
    ]
    text = mismatch.describe(first=3)
    assert '7 checkpoint keys are not in the model: head.extra0, ' \
        'head.extra1, head.extra2, ...' in text
    assert '2 keys have another shape' in text


def test_tta_model_is_unwrapped():
    tta = TTA(module=Net())
    assert tta.state_dict().keys() != Net().state_dict().keys()
    assert not checkpoint_mismatch(tta, Net().state_dict())


def test_hook_raises_or_warns(capsys):
    runner = FakeRunner(Net())
    state = {'state_dict': {'conv.weight': torch.zeros(4, 3, 3, 3)}}
    with pytest.raises(CheckpointMismatchError, match='missing'):
        CheckpointKeysHook().after_load_checkpoint(runner, state)
    CheckpointKeysHook(strict=False).after_load_checkpoint(runner, state)
    CheckpointKeysHook().after_load_checkpoint(
        runner, {'state_dict': Net().state_dict()})


def test_activations_waiting_for_their_fit_are_not_missing():
    """A ReLU checkpoint is what a match=True swap starts from; once fitted,
    the activations' keys count again."""
    from mmact.models.utils import defer_match, replace_activations
    relu = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    state = relu.state_dict()
    swaps = replace_activations(relu, dict(type='AGLU'))
    defer_match(relu, swaps)
    assert not checkpoint_mismatch(relu, state)
    relu.eval()
    relu(torch.randn(1, 3, 8, 8))  # fits
    assert checkpoint_mismatch(relu, state).missing == [
        '2.kappa_param', '2.lambda_param'
    ]


# ---------------------------------------------------------------------------
# weights trained with another activation (torchvision's ReLU ResNet-50)
# ---------------------------------------------------------------------------
@pytest.fixture
def logged(monkeypatch):
    """The hook's log lines ('LEVEL message'); the logger's stream is
    bound to the stdout of the test that created it."""
    import logging

    from mmact.engine.hooks import checkpoint_keys
    lines = []
    monkeypatch.setattr(
        checkpoint_keys, 'print_log', lambda msg, logger=None, level=logging.
        INFO: lines.append(f'{logging.getLevelName(level)} {msg}'))
    return lines


def _torchvision_relu_weights(tmp_path) -> str:
    """torchvision's ResNet-50 layout (random weights, no download)."""
    import torchvision
    path = tmp_path / 'resnet50_relu.pth'
    torch.save(torchvision.models.resnet50().state_dict(), path)
    return str(path)


def _build_backbone(cfg: dict) -> nn.Module:
    from mmengine.registry import MODELS, DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(cfg)


def _aglu_resnet(init_cfg=None) -> nn.Module:
    return _build_backbone(
        dict(
            type='ActResNet',
            depth=50,
            act_cfg=dict(type='AGLU'),
            attention_cfg=dict(type='APASELayer'),
            init_cfg=init_cfg))


def test_relu_weights_in_an_aglu_resnet_warn_naming_the_activations(
        tmp_path, logged):
    """The headline example's case: a Pretrained init with ReLU weights
    under an AGLU + APA* ActResNet is logged, not refused."""
    from mmact.engine.hooks import (activation_mismatch,
                                    describe_activation_mismatch)
    checkpoint = _torchvision_relu_weights(tmp_path)
    backbone = _aglu_resnet(dict(type='Pretrained', checkpoint=checkpoint))
    found = activation_mismatch(backbone, torch.load(checkpoint))
    assert list(found) == ['AGLU', 'APA']
    assert found['AGLU'][:3] == ['relu', 'layer1.0.act1', 'layer1.0.act2']
    assert len(found['AGLU']) == 1 + 3 * 16 and len(found['APA']) == 16
    assert found['APA'][0] == 'layer1.0.attn.gate'
    text = describe_activation_mismatch(found)
    assert '49 AGLU: relu, layer1.0.act1' in text
    assert '16 APA: layer1.0.attn.gate' in text

    CheckpointKeysHook(strict=False).before_run(FakeRunner(backbone))
    out = '\n'.join(logged)
    assert 'WARNING' in out and f'Pretrained {checkpoint}' in out
    assert 'trained with other activations' in out and 'AGLU' in out
    assert 'ActSwapBackbone(match=True)' in out
    backbone.init_weights()  # a warning only: the init still loads


def test_a_detector_names_its_backbone_init(tmp_path, logged):
    checkpoint = _torchvision_relu_weights(tmp_path)
    detector = nn.Module()
    detector.backbone = _aglu_resnet(
        dict(type='Pretrained', checkpoint=checkpoint))
    CheckpointKeysHook(strict=False).before_run(FakeRunner(detector))
    out = '\n'.join(logged)
    assert '(backbone.init_cfg)' in out and 'layer1.0.act1' in out


def test_load_from_relu_weights_warns_too(tmp_path, logged):
    from mmact.engine.hooks import activation_mismatch
    backbone = _aglu_resnet()
    relu = torch.load(_torchvision_relu_weights(tmp_path))
    state = {'state_dict': {f'module.{k}': v for k, v in relu.items()}}
    assert activation_mismatch(backbone, state)
    CheckpointKeysHook(strict=False).after_load_checkpoint(
        FakeRunner(backbone), state)
    assert '49 AGLU: relu' in '\n'.join(logged)
    with pytest.raises(CheckpointMismatchError, match='other activations'):
        CheckpointKeysHook().after_load_checkpoint(FakeRunner(backbone), state)


def test_matched_swap_or_mmact_weights_give_no_warning(tmp_path, logged):
    from mmact.engine.hooks import activation_mismatch
    checkpoint = _torchvision_relu_weights(tmp_path)
    init_cfg = dict(type='Pretrained', checkpoint=checkpoint)
    matched = _build_backbone(
        dict(
            type='ActSwapBackbone',
            act_cfg=dict(type='AGLU'),
            untie=True,
            match=True,
            backbone=dict(type='ResNet', depth=50, init_cfg=init_cfg)))
    assert not activation_mismatch(matched, torch.load(checkpoint))
    CheckpointKeysHook(strict=False).before_run(FakeRunner(matched))
    # an mmact checkpoint of the same model, with and without a prefix
    backbone = _aglu_resnet()
    own = tmp_path / 'aglu.pth'
    torch.save({'state_dict': backbone.state_dict()}, own)
    assert not activation_mismatch(backbone, torch.load(own))
    detector_state = {
        f'backbone.{k}': v
        for k, v in backbone.state_dict().items()
    }
    assert not activation_mismatch(backbone, detector_state, 'backbone')
    backbone.init_cfg = dict(type='Pretrained', checkpoint=str(own))
    CheckpointKeysHook(strict=False).before_run(FakeRunner(backbone))
    assert 'other activations' not in '\n'.join(logged)


def test_load_from_or_resume_skip_the_init_check(tmp_path, logged):
    """The checkpoint loaded after the init is what the model starts from:
    after_load_checkpoint checks it instead."""
    backbone = _aglu_resnet(
        dict(type='Pretrained',
             checkpoint=_torchvision_relu_weights(tmp_path)))
    runner = FakeRunner(backbone)
    runner._load_from = 'work_dirs/x/epoch_1.pth'
    CheckpointKeysHook(strict=False).before_run(runner)
    assert 'other activations' not in '\n'.join(logged)
