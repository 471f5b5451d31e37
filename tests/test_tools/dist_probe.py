"""A hook the distributed test loads into train.py's processes."""
import os.path as osp

import torch
from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class DistProbeHook(Hook):
    """Record each rank's parameters and which rank saves checkpoints."""

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        open(osp.join(runner.work_dir, f'saved_by_rank{get_rank()}'),
             'w').close()

    def after_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(
            runner.model) else runner.model
        torch.save({k: v.detach().clone()
                    for k, v in model.named_parameters()},
                   osp.join(runner.work_dir, f'params_rank{get_rank()}.pth'))
