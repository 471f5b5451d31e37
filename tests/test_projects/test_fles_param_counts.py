"""FleS parameter counts of the project's ImageNet models.

Every parameter figure of the FleS paper fits one shared ``C -> C/r`` layer
with two ``C/r -> C`` heads per FleS layer (about ``3 C^2 / r``); two full
MLPs (``4 C^2 / r``) overshoot them by a quarter or more. The models built
from the project configs follow the shared-trunk formula exactly.
"""
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS

import mmact  # noqa: F401
from mmact.models.activations import FleS

CONFIGS = Path(__file__).resolve().parents[2] / 'projects' / 'fles' / 'configs'

# config -> (FleS layers, paper's extra parameters in M: FleS total - GELU
# or ReLU total of the FleS paper's Tab. 2 / 3)
MODELS_ = {
    'poolformer-s12_fles_8xb128_in1k.py': (12, 13.8 - 11.9),
    'swin-tiny_fles_16xb64_in1k.py': (12, 31.7 - 28.3),
    'resnet50_fles_8xb32_in1k.py': (49, 28.1 - 25.6),
}


def _shared(c: int, r: int) -> int:
    h = c // r
    return 3 * c * h + h + 2 * c


def _separate(c: int, r: int) -> int:
    h = c // r
    return 4 * c * h + 2 * h + 2 * c


@pytest.mark.parametrize('config', sorted(MODELS_))
def test_extra_parameters_follow_the_shared_trunk(config):
    cfg = Config.fromfile(str(CONFIGS / config))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)  # materialised by a dry run
    fles = [m for m in model.modules() if isinstance(m, FleS)]
    layers, paper = MODELS_[config]
    assert len(fles) == layers
    assert all(m.mlp_layout == 'shared' and m.reduction == 32 for m in fles)
    count = sum(p.numel() for m in fles for p in m.parameters())
    assert count == sum(_shared(m.channels, 32) for m in fles)
    separate = sum(_separate(m.channels, 32) for m in fles)
    # shared: 2-6% below the paper's difference of totals rounded to 0.1M;
    # separate: 25-33% above it. (The ResNet placement is not stated; its
    # figure is 15% above ours, see the README.)
    if 'resnet' not in config:
        assert abs(count / 1e6 - paper) / paper < 0.06
        assert (separate / 1e6 - paper) / paper > 0.2
