import glob
import json
import os.path as osp

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.registry import HOOKS, MODELS
from mmengine.runner import Runner
from torch.utils.data import Dataset

import mmact  # noqa: F401
from mmact.engine.hooks import ActivationStatsHook
from mmact.models.activations import IGLU, AReLU, FleS
from mmact.models.layers import APASELayer


class TinyActNet(BaseModel):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.aglu = MODELS.build(dict(type='AGLU', num_parameters=8))
        self.attention = APASELayer(8, ratio=4)
        self.fles = FleS(channels=8, reduction=4, window_size=2)
        self.arelu = AReLU()
        self.iglu = IGLU(learnable_sigma=True)
        self.fixed_iglu = IGLU()
        self.head = nn.Linear(8, 2)

    def forward(self, inputs, labels, mode='loss'):
        x = self.attention(self.aglu(self.conv(inputs)))
        x = self.fixed_iglu(self.iglu(self.arelu(self.fles(x))))
        logits = self.head(x.mean(dim=(2, 3)))
        if mode == 'loss':
            return dict(loss=nn.functional.cross_entropy(logits, labels))
        return logits


class RandomImages(Dataset):

    def __len__(self):
        return 8

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(3, 6, 6, generator=g),
                    labels=torch.tensor(index % 2))


def train_two_iterations(work_dir, **hook_kwargs):
    runner = Runner(
        model=TinyActNet(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=RandomImages(),
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate'),
            batch_size=4,
            num_workers=0),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=2),
        custom_hooks=[dict(type='ActivationStatsHook', **hook_kwargs)],
        visualizer=dict(type='Visualizer',
                        vis_backends=[dict(type='LocalVisBackend')]),
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1)),
        default_scope=None,
        # unique: mmengine keys its logger/visualizer instances by this name
        experiment_name=osp.basename(str(work_dir)))
    runner.train()
    scalars = glob.glob(osp.join(str(work_dir), '*', 'vis_data',
                                 'scalars.json'))
    assert len(scalars) == 1
    with open(scalars[0]) as f:
        records = [json.loads(line) for line in f]
    logs = glob.glob(osp.join(str(work_dir), '*', '*.log'))
    with open(logs[0]) as f:
        log_text = f.read()
    return runner, [r for r in records if 'act/AGLU.kappa_mean' in r], \
        log_text


def test_hook_logs_expected_keys_every_iteration(tmp_path):
    runner, records, log_text = train_two_iterations(tmp_path, interval=1)
    assert [r['step'] for r in records] == [1, 2]
    expected = {
        f'act/{kind}_{stat}'
        for kind in ('AGLU.kappa', 'AGLU.lambda', 'APA.kappa', 'APA.lambda',
                     'AReLU.alpha', 'AReLU.beta', 'IGLU.sigma')
        for stat in ('mean', 'min', 'max')
    } | {
        'act/FleS.k_ve_mean', 'act/FleS.k_ho_mean',
        'act/FleS.k_ve_top10_mean', 'act/FleS.saturation'
    }
    last = records[-1]
    assert expected <= set(last)
    # only the learnable IGLU sigma is reported; values are the live ones
    model = runner.model
    assert last['act/IGLU.sigma_mean'] == pytest.approx(
        model.iglu.sigma.item())
    kappa = model.aglu.kappa_param.detach()
    assert last['act/AGLU.kappa_mean'] == pytest.approx(kappa.mean().item())
    assert last['act/AGLU.kappa_max'] == pytest.approx(kappa.max().item())
    assert 0 <= last['act/FleS.saturation'] <= 1
    assert last['act/FleS.k_ve_mean'] > 0
    assert log_text.count('Activation stats: ') == 2
    assert 'act/AGLU.kappa_mean' in log_text
    # the FleS hooks are gone after the logging iteration
    assert not model.fles._forward_pre_hooks


def test_hook_interval_and_per_layer(tmp_path):
    _, records, log_text = train_two_iterations(
        tmp_path, interval=2, per_layer=True, forward_stats=False)
    assert [r['step'] for r in records] == [2]
    assert 'act/aglu.kappa' in records[0]
    assert 'act/attention.gate.lambda' in records[0]
    assert not any(key.startswith('act/FleS') for key in records[0])
    assert log_text.count('Activation stats: ') == 1


def test_hook_builds_from_every_scope_and_checks_interval():
    from mmdet.registry import HOOKS as DET_HOOKS
    from mmpretrain.registry import HOOKS as CLS_HOOKS
    for registry in (HOOKS, DET_HOOKS, CLS_HOOKS):
        hook = registry.build(dict(type='ActivationStatsHook', interval=5))
        assert isinstance(hook, ActivationStatsHook)
    with pytest.raises(ValueError, match='interval must be a positive int'):
        ActivationStatsHook(interval=0)
