"""PreemptionHook's resume in the middle of an epoch (the stop itself is
tested end to end in tests/test_tools/test_preemption.py)."""
from types import SimpleNamespace

import pytest
import torch
from mmengine.runner import EpochBasedTrainLoop
from torch.utils.data import DataLoader

from mmact.engine.hooks import PreemptionHook
from mmact.engine.hooks.preemption import ResumedEpoch


def test_a_resumed_epoch_skips_trained_batches_by_index_without_randomness():
    loaded = []

    class Numbers(torch.utils.data.Dataset):

        def __len__(self):
            return 10

        def __getitem__(self, index):
            loaded.append(index)
            return index

    loader = DataLoader(Numbers(), batch_size=2, shuffle=False)
    resumed = ResumedEpoch(loader, skip=2)
    assert len(resumed) == 5 and resumed.dataset is loader.dataset
    state = torch.get_rng_state()
    iterator = iter(resumed)  # a DataLoader iterator draws its base seed
    assert torch.equal(torch.get_rng_state(), state)
    assert [batch.tolist() for batch in iterator] == [[4, 5], [6, 7], [8, 9]]
    assert loaded == [4, 5, 6, 7, 8, 9]  # the skipped samples not loaded


def test_a_checkpoint_from_a_longer_epoch_is_refused():
    loop = object.__new__(EpochBasedTrainLoop)
    loop.dataloader = [0, 1]  # 2 batches per epoch here
    runner = SimpleNamespace(train_loop=loop, iter=5, epoch=1)
    with pytest.raises(ValueError, match='after 5 iterations in epoch 2, '
                       'which has only 2 batches here'):
        PreemptionHook()._resume_in_epoch(runner)
