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
  and ``a`` are saved by the multiplication, ``identity`` by the next conv) or
  ``z = x * scale + shift + identity`` without attention.

The activation's autograd graph is recorded once more in backward (its own
backward gives the input and parameter gradients), so this trades time for
memory; rebuilt inputs match the forward ones to float rounding. For APA and
AGLU, whose backward needs only the input, the fused CPU kernel skips the
repeated forward values (:func:`mmact.ops.cpu_build.outputs_unused`).

:func:`default_recompute` is what :class:`~mmact.models.backbones.ActResNet`
uses when ``recompute_act`` is not given: on for every activation that does
not run in place.
"""
import contextlib
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmact.models.activations.apa import AGLU, APA
from mmact.ops.cpu_build import outputs_unused

__all__ = [
    'RecomputeAct', 'bn_with_affine', 'recompute_act', 'norm_act',
    'identity_sources', 'residual_act', 'can_fuse_residual',
    'default_recompute'
]

# Activations whose output comes straight from an op that saves only its
# input: their repeated forward values are never read.
_INPUT_ONLY_BACKWARD = (APA, AGLU)


def default_recompute(act_cfg: dict) -> bool:
    """Whether activation inputs are rebuilt in backward by default.

    An in-place activation (``inplace=True``, e.g. ReLU) keeps no tensor of
    its own, so there is nothing to save; every other activation keeps its
    input, which the memory-lean path avoids at the cost of one more
    elementwise pass in backward.

    Args:
        act_cfg (dict): The activation config.
    """
    return not act_cfg.get('inplace', False)


class RecomputeAct(torch.autograd.Function):
    """``y = act(z)``; backward rebuilds ``z = rebuild(*sources)``."""

    @staticmethod
    def forward(ctx, z: Tensor, act: nn.Module, rebuild: Callable,
                num_sources: int, *tensors: Tensor) -> Tensor:
        sources, params = tensors[:num_sources], tensors[num_sources:]
        ctx.act, ctx.rebuild, ctx.num_sources = act, rebuild, num_sources
        ctx.save_for_backward(*sources, *params)
        out = act(z)
        if out is z:  # an in-place activation wrote into its input
            ctx.mark_dirty(z)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        saved = ctx.saved_tensors
        sources, params = saved[:ctx.num_sources], saved[ctx.num_sources:]
        skip = (
            outputs_unused() if type(ctx.act) in _INPUT_ONLY_BACKWARD else
            contextlib.nullcontext())
        with torch.enable_grad(), skip:
            z = ctx.rebuild(*sources).detach().requires_grad_()
            # An in-place activation must not write into the leaf `z`.
            y = ctx.act(z.clone() if getattr(ctx.act, 'inplace', False) else z)
            wanted = [p for p in params if p.requires_grad]
            grads = torch.autograd.grad(
                y, [z, *wanted], grad, allow_unused=True)
        param_grads: List[Optional[Tensor]] = []
        it = iter(grads[1:])
        for p in params:
            param_grads.append(next(it) if p.requires_grad else None)
        return (grads[0], None, None, None, *([None] * len(sources)),
                *param_grads)


def recompute_act(act: nn.Module, z: Tensor, rebuild: Callable,
                  sources: Sequence[Tensor]) -> Tensor:
    """Apply ``act`` to ``z`` without keeping ``z`` for backward.

    Args:
        act (nn.Module): The activation (any module; its parameters get
            gradients).
        z (Tensor): Input, computed from ``sources`` by ``rebuild``.
        rebuild (callable): ``rebuild(*sources) -> z`` (no grad needed).
        sources (sequence[Tensor]): Tensors saved instead of ``z``; pass
            detached tensors that other autograd nodes keep alive anyway.
    """
    params = list(act.parameters())
    return RecomputeAct.apply(z, act, rebuild, len(sources), *sources, *params)


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


def _affine(x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    return torch.addcmul(shift, x, scale)


def norm_act(norm: nn.Module, act: nn.Module, x: Tensor) -> Tensor:
    """``act(norm(x))`` keeping only ``x`` (which BN saves anyway).

    Falls back to the plain composition for norms other than plain BN.
    """
    out, affine = bn_with_affine(norm, x)
    if affine is None:
        return act(out)
    return recompute_act(act, out, _affine, (x.detach(), *affine))


def identity_sources(downsample: Optional[nn.Module],
                     x: Tensor) -> Tuple[Tensor, Callable, Tuple[Tensor, ...]]:
    """Shortcut output and how to rebuild it from tensors saved anyway.

    Returns:
        tuple: ``(identity, rebuild, sources)`` with
        ``rebuild(*sources) == identity``.
    """
    if downsample is None:
        return x, (lambda t: t), (x.detach(), )
    if isinstance(downsample, nn.Sequential) and len(downsample) == 2:
        conv_out = downsample[0](x)
        out, affine = bn_with_affine(downsample[1], conv_out)
        if affine is not None:
            return out, _affine, (conv_out.detach(), *affine)
        return out, (lambda t: t), (out.detach(), )
    out = downsample(x)
    return out, (lambda t: t), (out.detach(), )


def residual_act(block: nn.Module, act: nn.Module, norm: nn.Module,
                 conv_out: Tensor, x: Tensor) -> Tensor:
    """``act(attn(norm(conv_out)) + shortcut(x))`` with a rebuilt input.

    Used when the block has no drop path and its attention (if any) exposes
    ``weights(u)`` such that ``attn(u) == u * weights(u)``.
    """
    identity, id_rebuild, id_sources = identity_sources(block.downsample, x)
    attn = block.attn
    if attn is None:
        u, affine = bn_with_affine(norm, conv_out)
        if affine is not None:

            def rebuild(c, scale, shift, *ids):
                return _affine(c, scale, shift) + id_rebuild(*ids)

            return recompute_act(act, u + identity, rebuild,
                                 (conv_out.detach(), *affine, *id_sources))
        # another norm: `u` is not saved by anyone; keep it instead of `z`
        u_sources = (u.detach(), )
        s = u + identity

        def rebuild(u, *ids):
            return u + id_rebuild(*ids)

        return recompute_act(act, s, rebuild, (*u_sources, *id_sources))
    u = norm(conv_out)
    a = attn.weights(u)
    s = u * a + identity  # the product saves u and a

    def rebuild(u, a, *ids):
        return torch.addcmul(id_rebuild(*ids), u, a)

    return recompute_act(act, s, rebuild,
                         (u.detach(), a.detach(), *id_sources))


def can_fuse_residual(block: nn.Module) -> bool:
    """Whether :func:`residual_act` applies (no drop path, attention with
    ``weights``)."""
    return isinstance(block.drop_path, nn.Identity) and (
        block.attn is None or callable(getattr(block.attn, 'weights', None)))
