"""Model wrapper for distributed training on machines without a GPU."""
import logging
from typing import List, Optional, Sequence

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.registry import MODEL_WRAPPERS

__all__ = ['CPUDistributedDataParallel']


def _sync_bn_layers(module: nn.Module) -> List[str]:
    """Names of the SyncBatchNorm layers (torch's or mmcv's) in ``module``."""
    return [
        name for name, child in module.named_modules()
        if 'SyncBatchNorm' in type(child).__name__
    ]


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for CPU processes (gloo backend).

    mmengine's Runner always passes ``device_ids=[LOCAL_RANK]``, which
    ``DistributedDataParallel`` rejects for a module on the CPU. This wrapper
    accepts the argument and wraps the module without device ids, which is
    how DDP is meant to be used on the CPU.

    ``SyncBN`` layers (torch's ``SyncBatchNorm`` or mmcv's ``MMSyncBN``) only
    run on GPUs; they are converted to plain batch norm with one warning:
    each process then normalises with the statistics of its own batch, as
    mmengine does for ``SyncBN`` in a single process. Parameters and state
    dict keys are unchanged.

    Args:
        module (nn.Module): The model, with every parameter on the CPU.
        device_ids (Sequence[int], optional): Device ids passed by the
            Runner; they name CUDA devices and do not apply to a CPU module.
        **kwargs: Passed to ``MMDistributedDataParallel``.
    """

    def __init__(self,
                 module: nn.Module,
                 device_ids: Optional[Sequence[int]] = None,
                 **kwargs) -> None:
        devices = {p.device.type for p in module.parameters()}
        if devices - {'cpu'}:
            raise ValueError(
                'CPUDistributedDataParallel wraps CPU modules only, got '
                f'parameters on {sorted(devices)}; use '
                'MMDistributedDataParallel for GPU training.')
        synced = _sync_bn_layers(module)
        if synced:
            print_log(
                f'SyncBN needs GPUs; its {len(synced)} layers (first: '
                f'{synced[0]}) are converted to BatchNorm for this CPU '
                'distributed run, so each process normalises with its own '
                'batch statistics (as with SyncBN in one process).',
                logger='current',
                level=logging.WARNING)
            module = revert_sync_batchnorm(module)
        super().__init__(module=module, device_ids=None, **kwargs)
