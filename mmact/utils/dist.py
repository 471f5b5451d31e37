"""Distributed set-up for machines without a GPU."""
import os
from datetime import timedelta

import torch
import torch.distributed as torch_dist
from mmengine.config import Config


def setup_cpu_distributed(cfg: Config, launcher: str) -> bool:
    """Prepare ``cfg`` for distributed training when CUDA is absent.

    mmengine's ``init_dist`` calls ``torch.cuda.set_device`` and its Runner
    wraps the model with ``device_ids=[LOCAL_RANK]``; both fail without a GPU.
    On such a machine this initialises the process group with gloo itself
    (the Runner then skips its own initialisation) and selects
    :class:`CPUDistributedDataParallel`. With CUDA available nothing changes.

    Args:
        cfg (Config): The config the Runner will be built from (updated in
            place).
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.

    Returns:
        bool: Whether the CPU path was taken.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return False
    if launcher != 'pytorch':
        raise RuntimeError(
            f'launcher={launcher!r} on a machine without a GPU is not '
            "supported; use launcher='pytorch' (tools/dist_train.sh, torchrun).")
    dist_cfg = cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(
            backend='gloo',
            rank=int(os.environ['RANK']),
            world_size=int(os.environ['WORLD_SIZE']),
            timeout=timedelta(seconds=dist_cfg.get('timeout', 1800)))
    wrapper = cfg.get('model_wrapper_cfg') or {}
    if wrapper.get('type', 'MMDistributedDataParallel') not in (
            'MMDistributedDataParallel', 'CPUDistributedDataParallel'):
        raise RuntimeError(
            f'model_wrapper_cfg type {wrapper["type"]!r} needs a GPU; only '
            'MMDistributedDataParallel is replaced for CPU training.')
    cfg.model_wrapper_cfg = dict(wrapper, type='CPUDistributedDataParallel')
    return True


def release_distributed() -> None:
    """Destroy the default process group after a finished run.

    Left to interpreter shutdown, gloo's worker threads can be torn down
    while still joinable, which aborts a rank ("terminate called without an
    active exception") after training has succeeded.
    """
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.destroy_process_group()
