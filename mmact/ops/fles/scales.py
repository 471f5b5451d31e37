"""FleS scales (k_ve, k_ho) from indicators, and the composite reference."""
from typing import Callable, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .gates import fles_gate
from .geometry import WindowGeometry, window_expand
from .indicators import fles_indicator

__all__ = [
    'K_HO_MIN', 'ScaleFn', 'fles_mlp_scales', 'fles_shared_mlp_scales',
    'scales_vjp', 'fles_proto_scales', 'fles_scales', 'fles_apply',
    'fles_reference'
]

#: Numerical floor of k_ho (softplus can underflow to 0 in float32; the fused
#: op divides by k_ho). Below it k_ho receives no gradient.
K_HO_MIN = 1e-6

#: ``scale_fn(ind, *params) -> (k_ve, k_ho)``.
ScaleFn = Callable[..., Tuple[Tensor, Tensor]]

#: ``vjp(g_ve, g_ho) -> (g_ind, *param_grads)`` (entries may be None).
Vjp = Callable[[Tensor, Tensor], Tuple[Optional[Tensor], ...]]


def _mlp_vjp(ind: Tensor, fc1_weight: Tensor, fc1_bias: Tensor,
             fc2_weight: Tensor, fc2_bias: Tensor):
    """:func:`fles_mlp_scales` (``fc1`` per head, ``(2, h, C)``) or
    :func:`fles_shared_mlp_scales` (``fc1`` shared, ``(h, C)``) and its
    vector-Jacobian product, written out (a re-run under autograd costs more
    than the MLP on small grids): the one place the MLP math is."""
    n, c, gh, gw = ind.shape
    flat = ind.reshape(n, c, gh * gw)
    per_head = fc1_weight.dim() == 3
    w1 = fc1_weight.unsqueeze(-3)  # (2, 1, h, C) or (1, h, C)
    # matmul rather than einsum: one op each (einsum's Python wrapper costs
    # more than the product on small grids)
    hidden = torch.matmul(w1, flat).add_(fc1_bias[..., None, :, None])
    hidden = F.relu(hidden)  # (2, N, h, G) or (N, h, G)
    opre = torch.matmul(fc2_weight[:, None], hidden)
    opre.add_(fc2_bias[:, None, :, None])  # (2, N, C, G)
    out = F.softplus(opre)  # (2, N, C, G)

    def vjp(g_ve: Tensor, g_ho: Tensor):
        k_ho_passes = out[1] >= K_HO_MIN  # no gradient below the floor
        d_opre = torch.stack(
            (g_ve.reshape(n, c, -1).to(opre.dtype),
             g_ho.reshape(n, c, -1).to(opre.dtype) * k_ho_passes))
        d_opre.mul_(torch.sigmoid(opre))  # softplus' = sigmoid
        g_w2 = torch.matmul(d_opre, hidden.transpose(-1, -2)).sum(1)
        d_hidden = torch.matmul(fc2_weight.transpose(-1, -2)[:, None], d_opre)
        if not per_head:
            d_hidden = d_hidden.sum(0)
        d_hidden.mul_(hidden > 0)
        g_w1 = torch.matmul(d_hidden, flat.transpose(-1, -2)).sum(-3)
        g_ind = torch.matmul(w1.transpose(-1, -2), d_hidden)
        if per_head:
            g_ind = g_ind.sum(0)
        return (g_ind.view_as(ind), g_w1, d_hidden.sum(
            (-3, -1)), g_w2.reshape(fc2_weight.shape), d_opre.sum((1, 3)))

    k_ve, k_ho = out.reshape(2, n, c, gh, gw)
    return k_ve, k_ho.clamp_min(K_HO_MIN), vjp


def fles_mlp_scales(ind: Tensor, fc1_weight: Tensor, fc1_bias: Tensor,
                    fc2_weight: Tensor,
                    fc2_bias: Tensor) -> Tuple[Tensor, Tensor]:
    """``(k_ve, k_ho)`` from two MLPs scanned over the window grid.

    Each MLP is ``Linear(C, h) -> ReLU -> Linear(h, C)`` followed by softplus,
    applied at every window (a 1x1 convolution on the grid).

    Args:
        ind: ``(N, C, nh, nw)`` indicators.
        fc1_weight: ``(2, h, C)``; fc1_bias: ``(2, h)``;
        fc2_weight: ``(2, C, h)``; fc2_bias: ``(2, C)``. Index 0 is the
            vertical (k_ve) MLP, index 1 the horizontal (k_ho) MLP.

    Returns:
        Two ``(N, C, nh, nw)`` tensors, both positive (``k_ho`` is floored
        at :data:`K_HO_MIN`).
    """
    k_ve, k_ho, _ = _mlp_vjp(ind, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    return k_ve, k_ho


def fles_shared_mlp_scales(ind: Tensor, fc1_weight: Tensor, fc1_bias: Tensor,
                           fc2_weight: Tensor,
                           fc2_bias: Tensor) -> Tuple[Tensor, Tensor]:
    """``(k_ve, k_ho)`` from one shared trunk and two heads, per window.

    ``Linear(C, h) -> ReLU`` is shared; two heads ``Linear(h, C)`` followed by
    softplus give ``k_ve`` and ``k_ho``. About ``3 C h`` weights instead of
    the ``4 C h`` of :func:`fles_mlp_scales`.

    Args:
        ind: ``(N, C, nh, nw)`` indicators.
        fc1_weight: ``(h, C)``; fc1_bias: ``(h,)``;
        fc2_weight: ``(2, C, h)``; fc2_bias: ``(2, C)``. Head 0 gives
            k_ve, head 1 k_ho.

    Returns:
        Two ``(N, C, nh, nw)`` tensors, both positive (``k_ho`` is floored
        at :data:`K_HO_MIN`).
    """
    k_ve, k_ho, _ = _mlp_vjp(ind, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    return k_ve, k_ho


_WRITTEN_VJPS = {fles_mlp_scales: _mlp_vjp, fles_shared_mlp_scales: _mlp_vjp}


def scales_vjp(scale_fn: ScaleFn, ind: Tensor,
               params: Sequence[Tensor]) -> Tuple[Tensor, Tensor, Vjp]:
    """``(k_ve, k_ho, vjp)``: ``scale_fn(ind, *params)`` and a function
    from the gradients of ``(k_ve, k_ho)`` to those of ``(ind, *params)``,
    for a backward that applies them (the fused FleS ops: prepared in
    forward on the CPU path, re-run in backward on the Triton path).

    The MLP layouts here have their products written out; any other
    ``scale_fn`` is re-run under autograd. Call it where gradients are not
    being recorded (``vjp``'s results are plain tensors).

    Args:
        scale_fn: maps indicators to ``(k_ve, k_ho)``.
        ind: ``(N, C, nh, nw)`` indicators.
        params: passed to ``scale_fn(ind, *params)``.
    """
    params = [p.detach() for p in params]
    written = _WRITTEN_VJPS.get(scale_fn)
    if written is not None:
        return written(ind.detach(), *params)
    with torch.enable_grad():
        leaves = [ind.detach().requires_grad_()
                  ] + [p.requires_grad_() for p in params]
        k_ve, k_ho = scale_fn(*leaves)

    def vjp(g_ve: Tensor, g_ho: Tensor):
        return torch.autograd.grad(
            (k_ve, k_ho),
            leaves, (g_ve.view_as(k_ve).to(k_ve.dtype), g_ho.view_as(k_ho).to(
                k_ho.dtype)),
            allow_unused=True)

    return k_ve, k_ho, vjp


def fles_proto_scales(x: Tensor, alpha: Tensor,
                      gamma: Tensor) -> Tuple[Tensor, Tensor]:
    """FleS-Proto scales (Eq. 4-6): batch statistics, ablation only.

    The positive-only indicator is taken over the *whole mini-batch* and
    spatial extent per channel, normalised by its mean over channels (Eq. 6),
    and mapped by ``softplus(alpha * mu + gamma)`` with per-layer scalars
    (index 0: k_ve, 1: k_ho). A sample's output therefore depends on the
    other samples of the batch, in training and in eval.

    Args:
        x: ``(N, C, H, W)``.
        alpha, gamma: ``(2,)``.

    Returns:
        ``(k_ve, k_ho)`` of shape ``(1, C, 1, 1)``.
    """
    dims = (0, 2, 3)
    total = F.relu(x).sum(dim=dims)
    count = (x >= 0).to(total.dtype).sum(dim=dims).clamp_min(1.0)
    ind = total / count
    mu = ind / ind.mean().clamp_min(torch.finfo(ind.dtype).tiny)
    k = F.softplus(alpha[:, None] * mu[None] + gamma[:, None])
    return k[0].view(1, -1, 1, 1), k[1].view(1, -1, 1, 1)


def fles_apply(x: Tensor,
               k_ve: Tensor,
               k_ho: Tensor,
               gate: str = 'sigmoid') -> Tensor:
    """``k_ve * rho(k_ho * x) * x`` with broadcastable per-pixel scales."""
    return k_ve * fles_gate(k_ho * x, gate) * x


def fles_scales(x: Tensor,
                geom: WindowGeometry,
                params: Sequence[Tensor],
                mode: str = 'positive',
                gamma: Optional[Tensor] = None,
                beta: Optional[Tensor] = None,
                eta: float = 0.1,
                scale_fn: ScaleFn = fles_mlp_scales) -> Tuple[Tensor, Tensor]:
    """Per-window ``(k_ve, k_ho)``, each ``(N, C, nh, nw)``, of ``x``.

    Args:
        x: ``(N, C, H, W)``.
        geom: the window grid.
        params: passed to ``scale_fn(ind, *params)``.
        mode, gamma, beta, eta: the indicator (see
            :func:`~mmact.ops.fles.indicator_transform`).
        scale_fn: maps indicators to ``(k_ve, k_ho)``.
    """
    return scale_fn(fles_indicator(x, geom, mode, gamma, beta, eta), *params)


def fles_reference(x: Tensor,
                   geom: WindowGeometry,
                   params: Sequence[Tensor],
                   gate: str = 'sigmoid',
                   mode: str = 'positive',
                   gamma: Optional[Tensor] = None,
                   beta: Optional[Tensor] = None,
                   eta: float = 0.1,
                   scale_fn: ScaleFn = fles_mlp_scales) -> Tensor:
    """Composite (autograd) FleS on ``(N, C, H, W)``; any memory layout.

    Args:
        x: ``(N, C, H, W)``.
        geom: the window grid.
        params: passed to ``scale_fn(ind, *params)``.
        gate: one of :data:`~mmact.ops.fles.FLES_GATES`.
        mode, gamma, beta, eta: the indicator.
        scale_fn: maps indicators to ``(k_ve, k_ho)``.
    """
    k_ve, k_ho = fles_scales(x, geom, params, mode, gamma, beta, eta, scale_fn)
    return fles_apply(x, window_expand(k_ve, geom), window_expand(k_ho, geom),
                      gate)
