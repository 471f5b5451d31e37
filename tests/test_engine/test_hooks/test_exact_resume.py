import random

import numpy as np
import torch
from mmengine.dataset import DefaultSampler

import mmact  # noqa: F401
from mmact.engine.hooks.exact_resume import (capture_random_state,
                                             restore_random_state)


class Loader:

    def __init__(self, seed: int) -> None:
        self.sampler = DefaultSampler(list(range(10)), seed=seed)


def _draw():
    return (random.random(), np.random.rand(), torch.rand(1).item(),
            torch.randn(3))


def test_capture_restore_round_trip_through_weights_only_load(tmp_path):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    _draw()
    state = capture_random_state(Loader(seed=7))
    torch.save({'random_state': [state]}, tmp_path / 'ckpt.pth')
    expected = _draw()

    random.seed(2)
    np.random.seed(2)
    torch.manual_seed(2)
    loader = Loader(seed=3)
    # Only plain types and tensors: loads with torch's safe default.
    loaded = torch.load(tmp_path / 'ckpt.pth', weights_only=True)
    restore_random_state(loaded['random_state'][0], loader)
    got = _draw()
    assert got[:3] == expected[:3]
    assert torch.equal(got[3], expected[3])
    assert loader.sampler.seed == 7
