"""A Runner that trains in milliseconds, for tests of hooks and checkpoints."""
from pathlib import Path
from typing import Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel
from mmengine.runner import Runner

__all__ = ['tiny_runner']


class _Regression(BaseModel):
    """y = w x + b on scalars, enough for the Runner to save a checkpoint."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, inputs, targets, mode='tensor'):
        out = self.fc(torch.stack(inputs)).flatten()
        if mode == 'loss':
            return dict(loss=F.mse_loss(out, torch.stack(targets)))
        return out


class _Points(torch.utils.data.Dataset):
    """Four points on y = 2x."""
    metainfo = dict(classes=('point', ))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return dict(
            inputs=torch.tensor([float(i)]), targets=torch.tensor(2.0 * i))


def tiny_runner(work_dir: Union[str, Path], max_epochs: int,
                **kwargs) -> Runner:
    """A Runner of a one-weight regression: 2 iterations per epoch, SGD
    with momentum and a step schedule (so that a checkpoint holds optimizer
    and scheduler state), a logger every iteration.

    Args:
        work_dir (str | Path): The run's work dir; its name is the
            experiment name.
        max_epochs (int): Epochs to train.
        **kwargs: ``Runner`` arguments that replace the defaults or add to
            them (``default_hooks``, ``optim_wrapper``, ``resume``, ...).
            A ``val_evaluator`` adds validation on the same points every
            epoch.
    """
    args = dict(
        model=_Regression(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=_Points(),
            sampler=dict(type='DefaultSampler', shuffle=False),
            batch_size=2),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        param_scheduler=dict(type='MultiStepLR', milestones=[1]),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1)),
        default_scope='mmengine',
        experiment_name=Path(work_dir).name)
    if 'val_evaluator' in kwargs:
        args.update(
            val_dataloader=dict(args['train_dataloader']), val_cfg=dict())
    args.update(kwargs)
    return Runner(**args)
