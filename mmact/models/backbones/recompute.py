"""Activation memory: rebuild an activation's input in backward.

An in-place ReLU after BN keeps one tensor alive per position (its output,
which the next conv saves anyway). A learnable activation such as AGLU cannot
work in place, so it saves its input as well: one more tensor of the block's
width per position, +35% saved-for-backward bytes in an SE-ResNet-50.

:class:`RecomputeAct` saves instead the tensors its input was computed from
when they are kept alive by other nodes anyway, and rebuilds the input in
backward:

- after BN: ``z = x * scale + shift`` from the BN input ``x`` (saved by BN)
  and the per-channel affine of the batch (or running) statistics;
- after the residual add: ``z = u * a + identity`` (attention ``u * a``; ``u``
  and ``a`` are saved by the ``addcmul`` that forms ``z``, ``identity`` by the
  next conv) or ``z = x * scale + shift + identity`` without attention.

(with a conv + BN shortcut, ``identity = d * scale2 + shift2`` from the
shortcut conv's output ``d``, saved by its BN). Every case has the form
``z = src * scale + shift + other * other_scale``
(:func:`mmact.ops.apa.rebuild_input`). The backward asks the activation:
a learnable activation's
:meth:`~mmact.models.activations.base.LearnableActivation.backward_from_sources`
(APA and AGLU hand the sources to their fused CPU and Triton kernels, which
compute ``z`` per element inside their backward pass, so neither ``z`` nor a
second autograd graph is built; the protocol's default rebuilds ``z`` with
torch and records the graph once more, as for any other module). Both trade
time for memory; rebuilt inputs match the forward ones to float rounding.

:func:`default_recompute` is what :class:`~mmact.models.backbones.ActResNet`
uses when ``recompute_act`` is not given.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmact.models.activations.base import (LearnableActivation,
                                           recorded_backward)
from mmact.ops.second_derivative import refuse_second_derivative

__all__ = [
    'RecomputeAct', 'bn_with_affine', 'recompute_act', 'norm_act',
    'identity_sources', 'residual_act', 'can_fuse_residual',
    'default_recompute'
]


def default_recompute(act: nn.Module) -> bool:
    """Whether an activation's input is rebuilt in backward by default.

    Learnable activations never run in place (their ``inplace`` argument is
    accepted for mmcv and ignored), so they keep their input, which the
    memory-lean path avoids at the cost of one more elementwise pass in
    backward: on. Any other module is on unless it runs in place (an
    in-place ReLU keeps no tensor of its own).

    Args:
        act (nn.Module): An activation built from the backbone's config.
    """
    return isinstance(
        act, LearnableActivation) or not getattr(act, 'inplace', False)


# (src, scale, shift, other, other_scale) of rebuild_input.
_NUM_SOURCES = 5


class RecomputeAct(torch.autograd.Function):
    """``y = act(z)``; backward rebuilds ``z`` from its sources.

    ``z == rebuild_input(src, scale, shift, other, other_scale)``; the
    backward is the activation's ``backward_from_sources`` (the learnable
    activation protocol) or, for other modules, :func:`recorded_backward`.
    """

    @staticmethod
    def forward(ctx, z: Tensor, act: nn.Module, *tensors: Tensor) -> Tensor:
        ctx.act = act
        ctx.save_for_backward(*tensors)  # 5 sources (some None), params
        out = act(z)
        if out is z:  # an in-place activation wrote into its input
            ctx.mark_dirty(z)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        saved = ctx.saved_tensors
        sources, params = saved[:_NUM_SOURCES], saved[_NUM_SOURCES:]
        act = ctx.act
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            if isinstance(act, LearnableActivation):
                grad_z, param_grads = act.backward_from_sources(
                    grad, params, sources)
            else:
                grad_z, param_grads = recorded_backward(
                    act, grad, params, sources)
        grads = (grad_z, *param_grads)
        if create_graph:  # the rebuilt backward records no graph
            grads = refuse_second_derivative('the memory-lean backward', grads)
        return (grads[0], None, *([None] * _NUM_SOURCES), *grads[1:])


def recompute_act(act: nn.Module,
                  z: Tensor,
                  src: Tensor,
                  scale: Optional[Tensor] = None,
                  shift: Optional[Tensor] = None,
                  other: Optional[Tensor] = None,
                  other_scale: Optional[Tensor] = None) -> Tensor:
    """Apply ``act`` to ``z`` without keeping ``z`` for backward.

    Args:
        act (nn.Module): The activation (any module; its parameters get
            gradients).
        z (Tensor): Input, equal to ``rebuild_input(src, scale, shift,
            other, other_scale)`` (:func:`mmact.ops.apa.rebuild_input`).
        src, other (Tensor): Saved instead of ``z``; pass detached tensors
            that other autograd nodes keep alive anyway (``other`` may be
            None).
        scale, shift, other_scale (Tensor, optional): Detached per-channel
            (1, C, 1, ...) coefficients; ``scale`` may also be per sample
            (N, C, 1, ...), e.g. attention weights.
    """
    return RecomputeAct.apply(z, act, src, scale, shift, other, other_scale,
                              *act.parameters())


def _refuse_single_value(x: Tensor) -> None:
    """What ``F.batch_norm`` refuses with batch statistics, with its message:
    ``torch.native_batch_norm`` itself returns a near-constant output."""
    values = x.size(0)
    for size in x.shape[2:]:
        values *= size
    if values == 1:
        raise ValueError('Expected more than 1 value per channel when '
                         f'training, got input size {x.size()}')


def bn_with_affine(
        bn: nn.Module,
        x: Tensor) -> Tuple[Tensor, Optional[Tuple[Tensor, Tensor]]]:
    """``bn(x)`` plus the per-channel ``(scale, shift)`` it applied.

    For plain (non-sync) BatchNorm in training mode the batch statistics come
    from ``torch.native_batch_norm`` (what ``F.batch_norm`` runs on CPU and
    CUDA), with ``_BatchNorm.forward``'s running-statistics bookkeeping; other
    norm layers return ``None`` for the affine and the caller falls back.

    Args:
        bn (nn.Module): The norm layer.
        x (Tensor): Its (N, C, ...) input.

    Returns:
        tuple: Output and ``(scale, shift)`` shaped (1, C, 1, ...), detached,
        or ``(bn(x), None)``.
    """
    plain = isinstance(bn, nn.modules.batchnorm._BatchNorm) and not \
        isinstance(bn, nn.SyncBatchNorm)
    if not plain:
        return bn(x), None
    shape = (1, -1) + (1, ) * (x.dim() - 2)
    if bn.training or not bn.track_running_stats:
        factor = 0.0 if bn.momentum is None else bn.momentum
        if bn.training and bn.track_running_stats:
            bn.num_batches_tracked.add_(1)
            factor = (1.0 / float(bn.num_batches_tracked)
                      if bn.momentum is None else bn.momentum)
        update = bn.training and bn.track_running_stats
        _refuse_single_value(x)
        out, mean, invstd = torch.native_batch_norm(
            x, bn.weight, bn.bias, bn.running_mean if update else None,
            bn.running_var if update else None, True, factor, bn.eps)
    else:
        out = bn(x)
        mean = bn.running_mean
        invstd = torch.rsqrt(bn.running_var + bn.eps)
    with torch.no_grad():
        scale = invstd if bn.weight is None else invstd * bn.weight
        shift = -mean * scale
        if bn.bias is not None:
            shift = shift + bn.bias
    return out, (scale.detach().reshape(shape), shift.detach().reshape(shape))


def norm_act(norm: nn.Module, act: nn.Module, x: Tensor) -> Tensor:
    """``act(norm(x))`` keeping only ``x`` (which BN saves anyway).

    Falls back to the plain composition for norms other than plain BN.
    """
    out, affine = bn_with_affine(norm, x)
    if affine is None:
        return act(out)
    return recompute_act(act, out, x.detach(), *affine)


def identity_sources(
        downsample: Optional[nn.Module], x: Tensor
) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """Shortcut output and how to rebuild it from tensors saved anyway.

    Returns:
        tuple: ``(identity, other, other_scale, other_shift)`` with
        ``identity == rebuild_input(other, other_scale, other_shift)``
        (the scale and shift of a conv + BN shortcut, else None).
    """
    if downsample is None:
        return x, x.detach(), None, None
    if isinstance(downsample, nn.Sequential) and len(downsample) == 2:
        conv_out = downsample[0](x)
        out, affine = bn_with_affine(downsample[1], conv_out)
        if affine is not None:
            return out, conv_out.detach(), *affine
        return out, out.detach(), None, None
    out = downsample(x)
    return out, out.detach(), None, None


def _add(a: Optional[Tensor], b: Optional[Tensor]) -> Optional[Tensor]:
    return a if b is None else b if a is None else a + b


def residual_act(block: nn.Module, act: nn.Module, norm: nn.Module,
                 conv_out: Tensor, x: Tensor) -> Tensor:
    """``act(attn(norm(conv_out)) + shortcut(x))`` with a rebuilt input.

    Used when the block has no drop path and its attention (if any) exposes
    ``weights(u)`` such that ``attn(u) == u * weights(u)``. The shortcut's
    BN shift joins the main branch's shift, so the input is rebuilt as
    ``src * scale + shift + other * other_scale``.
    """
    identity, other, o_scale, o_shift = identity_sources(block.downsample, x)
    attn = block.attn
    if attn is None:
        u, affine = bn_with_affine(norm, conv_out)
        if affine is not None:
            scale, shift = affine
            return recompute_act(act, u + identity, conv_out.detach(), scale,
                                 _add(shift, o_shift), other, o_scale)
        # another norm: `u` is not saved by anyone; keep it instead of `z`
        return recompute_act(act, u + identity, u.detach(), None, o_shift,
                             other, o_scale)
    u = norm(conv_out)
    a = attn.weights(u)
    s = torch.addcmul(identity, u, a)  # one pass; saves u and a
    return recompute_act(act, s, u.detach(), a.detach(), o_shift, other,
                         o_scale)


def can_fuse_residual(block: nn.Module) -> bool:
    """Whether :func:`residual_act` applies (no drop path, attention with
    ``weights``); mmdet's blocks have no ``drop_path`` at all."""
    drop_path = getattr(block, 'drop_path', None)
    return (drop_path is None or isinstance(drop_path, nn.Identity)) and (
        block.attn is None or callable(getattr(block.attn, 'weights', None)))
