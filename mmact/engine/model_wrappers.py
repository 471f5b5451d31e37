"""Model wrapper for distributed training on machines without a GPU."""
from typing import Optional, Sequence

import torch.nn as nn
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for CPU processes (gloo backend).

    mmengine's Runner always passes ``device_ids=[LOCAL_RANK]``, which
    ``DistributedDataParallel`` rejects for a module on the CPU. This wrapper
    accepts the argument and wraps the module without device ids, which is
    how DDP is meant to be used on the CPU.

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
        super().__init__(module=module, device_ids=None, **kwargs)
