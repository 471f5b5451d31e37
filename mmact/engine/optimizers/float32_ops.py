"""Keep the steps that feed mmcv's float32-only CPU operators in float32.

mmcv's CPU kernels of ``nms`` and of the RoI layers (``RoIAlign``,
``RoIPool``) take float32 (and float64) only, and torch's CPU autocast does
not see them (they are not ATen operators): under bfloat16 autocast a
detector hands them bfloat16 tensors and stops (``expected scalar type Float
but found BFloat16``, ``"ROIAlign_forward" not implemented for
'BFloat16'``). While :func:`float32_for_mmcv_ops` is open:

- mmdet's dense heads (the RPN, one-stage heads) return their outputs in
  float32, so the boxes they decode and hand to ``nms`` are float32 (their
  losses are float32 under autocast anyway);
- mmcv's RoI layers run on float32 features and boxes and return the
  features' dtype (mmdet's RoI extractors write them into a tensor of it).

Everything else keeps autocast's dtypes.
"""
import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Tuple

import torch
import torch.nn as nn

__all__ = ['float32_for_mmcv_ops']

_HALF = (torch.bfloat16, torch.float16)


@functools.lru_cache(maxsize=None)
def _module_types() -> Tuple[Tuple[type, ...], Tuple[type, ...]]:
    """(dense head classes, mmcv RoI layer classes); empty where mmdet or
    mmcv's compiled ops are not installed (no model holds them then)."""
    try:
        from mmdet.models.dense_heads.base_dense_head import BaseDenseHead
        heads: Tuple[type, ...] = (BaseDenseHead, )
    except ImportError:
        heads = ()
    try:
        from mmcv.ops import RoIAlign, RoIPool
        layers: Tuple[type, ...] = (RoIAlign, RoIPool)
    except ImportError:
        layers = ()
    return heads, layers


_Cast = Callable[[torch.Tensor], torch.Tensor]


def _map_tensors(value: Any, fn: _Cast) -> Any:
    """``value`` with ``fn`` applied to its tensors (in lists and tuples)."""
    if torch.is_tensor(value):
        return fn(value)
    if isinstance(value, (list, tuple)):
        items = [_map_tensors(v, fn) for v in value]
        if hasattr(value, '_fields'):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    return value


def _half_to_float32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in _HALF else tensor


def _outputs_to_float32(module: nn.Module, args: Any, output: Any) -> Any:
    return _map_tensors(output, _half_to_float32)


class _RunInFloat32:
    """Forward hooks running a module on float32 inputs and giving back its
    first input's dtype."""

    def __init__(self) -> None:
        self.dtypes: List[torch.dtype] = []

    def before(self, module: nn.Module, args: tuple) -> tuple:
        first = args[0] if args and torch.is_tensor(args[0]) else None
        self.dtypes.append(torch.float32 if first is None else first.dtype)
        return _map_tensors(args, _half_to_float32)

    def after(self, module: nn.Module, args: tuple, output: Any) -> Any:
        dtype = self.dtypes.pop()
        return _map_tensors(
            output, lambda t: t.to(dtype) if t.is_floating_point() else t)


@contextmanager
def float32_for_mmcv_ops(model: nn.Module) -> Iterator[None]:
    """Keep ``model``'s inputs to mmcv's float32-only CPU operators float32.

    Args:
        model (nn.Module): The model whose forward runs in the context.
    """
    heads, layers = _module_types()
    handles = []
    try:
        for module in model.modules() if heads or layers else ():
            if heads and isinstance(module, heads):
                handles.append(
                    module.register_forward_hook(_outputs_to_float32))
            elif layers and isinstance(module, layers):
                hooks = _RunInFloat32()
                handles.append(module.register_forward_pre_hook(hooks.before))
                handles.append(module.register_forward_hook(hooks.after))
        yield
    finally:
        for handle in handles:
            handle.remove()
