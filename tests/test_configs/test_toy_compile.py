"""mmengine's ``compile=True`` with the toy LVIS APA* config's optimizer.

The Runner compiles ``model.train_step``, the optimizer step included
(``Runner._maybe_compile``). Here a small APA*/AGLU model takes the toy
config's optim wrapper (SGD with momentum, mmact's constructor, gradient
clipping) and trains three steps compiled as the Runner does, against eager.
"""
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import BaseModel
from mmengine.optim import build_optim_wrapper

import mmact  # noqa: F401
from mmact.models.activations import AGLU, APA
from mmact.compat import TORCH_VERSION

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / 'configs/toy/apa_mrcnn_r50_toy.py'


class Net(BaseModel):
    """Conv, BN and learnable activations; the loss is a mean square."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = AGLU(num_parameters=8)
        self.gate = APA()
        self.head = nn.Linear(8, 2)

    def forward(self, inputs, mode='loss'):
        x = self.gate(self.act(self.bn(self.conv(inputs))))
        return dict(loss=self.head(x.mean((2, 3))).square().mean())


def _optim_wrapper(model):
    optim_wrapper = Config.fromfile(str(CONFIG)).optim_wrapper
    optim_wrapper.pop('_scope_', None)
    return build_optim_wrapper(model, optim_wrapper)


def test_param_groups_are_plain_dicts():
    """mmengine builds the optimizer from a ConfigDict, whose groups were
    ConfigDicts; dynamo's optimizer support (torch 2.14) fails on those."""
    optim_wrapper = _optim_wrapper(Net())
    groups = optim_wrapper.optimizer.param_groups
    assert len(groups) > 1
    assert all(type(group) is dict for group in groups)
    assert all(type(group['params']) is list for group in groups)


@pytest.mark.skipif(
    TORCH_VERSION < (2, 4),
    reason='torch 2.1\'s dynamo fails on the first step of SGD with '
    'momentum (pytorch/pytorch#116061), and on mmengine\'s stack_batch in '
    'a detector (open-mmlab/mmdetection#11398); verified on torch 2.14')
def test_compiled_train_step_trains_as_eager():
    torch.manual_seed(0)
    eager, compiled = Net(), Net()
    compiled.load_state_dict(eager.state_dict())
    eager_wrapper = _optim_wrapper(eager)
    compiled_wrapper = _optim_wrapper(compiled)
    torch._dynamo.reset()
    # what Runner._maybe_compile('train_step') does
    compiled.train_step = torch.compile(compiled.train_step, backend='eager')
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        data = dict(inputs=torch.randn(2, 3, 16, 16, generator=generator))
        want = eager.train_step(data, eager_wrapper)['loss']
        got = compiled.train_step(data, compiled_wrapper)['loss']
        assert torch.isfinite(got)
        torch.testing.assert_close(got, want)
    for (name, got), want in zip(compiled.named_parameters(),
                                 eager.parameters()):
        torch.testing.assert_close(got, want, msg=name)
    assert compiled_wrapper.optimizer.state_dict()['state'].keys() == \
        eager_wrapper.optimizer.state_dict()['state'].keys()
