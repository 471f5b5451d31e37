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
