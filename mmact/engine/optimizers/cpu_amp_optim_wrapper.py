"""Mixed precision (bfloat16 autocast) for training on the CPU."""
from contextlib import contextmanager
from typing import Union

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

from .float32_ops import float32_for_mmcv_ops

__all__ = ['CPUAmpOptimWrapper']


@OPTIM_WRAPPERS.register_module()
class CPUAmpOptimWrapper(OptimWrapper):
    """``OptimWrapper`` that runs the forward under CPU bfloat16 autocast.

    mmengine's ``AmpOptimWrapper`` (0.10.x) asserts a GPU, NPU, MLU or MUSA
    device. This is its counterpart for CPU-only machines: matrix products
    and convolutions run in bfloat16, reductions and losses stay float32
    (torch's CPU autocast lists). bfloat16 keeps float32's exponent range,
    so no loss scaling is needed. ``tools/train.py --amp`` selects it when
    no accelerator is present. A detector's inputs to mmcv's CPU ``nms``
    and RoI layers, which take float32 only, stay float32
    (:func:`~mmact.engine.optimizers.float32_ops.float32_for_mmcv_ops`).

    Args:
        dtype (str | torch.dtype): Autocast type; only ``'bfloat16'`` (CPU
            autocast of float16 is too imprecise to train without a loss
            scaler). Defaults to ``'bfloat16'``.
        **kwargs: Passed to :class:`~mmengine.optim.OptimWrapper`
            (``optimizer``, ``accumulative_counts``, ``clip_grad``).
    """

    def __init__(self,
                 dtype: Union[str, torch.dtype] = 'bfloat16',
                 **kwargs) -> None:
        if dtype not in ('bfloat16', torch.bfloat16):
            raise ValueError("CPUAmpOptimWrapper: dtype must be 'bfloat16', "
                             f'got {dtype!r}')
        super().__init__(**kwargs)
        self.cast_dtype = torch.bfloat16

    @contextmanager
    def optim_context(self, model: nn.Module):
        """Gradient-accumulation context of ``OptimWrapper`` plus autocast.

        Args:
            model (nn.Module): The training model.
        """
        with super().optim_context(model), float32_for_mmcv_ops(
                model), torch.autocast(
                    device_type='cpu', dtype=self.cast_dtype):
            yield
