"""The APA / AGLU math in torch ops: the stable eta, its derivatives, and
the paper's formulas as written (the test oracle).

With ``a = ln(l) - k z`` (so ``l e^{-kz} = e^a``)::

    eta(z; k, l)  = (1 + l e^{-kz}) ** (-1 / l) = exp(-softplus(a) / l)
    AGLU(z; k, l) = z * eta(z; k, l)

and, with ``g = sigmoid(a)``::

    d eta / dz = eta * k * g / l         d AGLU / dz = eta * (1 + k z g / l)
    d eta / dk = eta * z * g / l         d AGLU / dk = z^2 * eta * g / l
    d eta / dl = eta * (softplus(a) - g) / l^2
    d AGLU / dl = z * eta * (softplus(a) - g) / l^2

The ``softplus(a) / l^2`` term of the lambda gradient is the one missing
from the paper's Eq. 8 and from the reference backward.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checks import compute_dtype
from .params import chain_to_params, kernel_params, param_views

__all__ = [
    'eta_terms', 'eta', 'composite', 'torch_grads', 'apa_reference',
    'aglu_reference'
]


def eta_terms(z: Tensor, k: Tensor,
              l: Tensor) -> Tuple[Tensor, Tensor, Tensor]:  # noqa: E741
    """``(a, softplus(a), eta)``: the stable form (Alexandridis et al.
    2025, App. A), written once, in differentiable ops that exporters
    translate and forward-mode AD and compilers differentiate (the in-place
    ``exp_`` acts on a temporary of its own).

    Args:
        z (Tensor): The input (float32 or float64).
        k (Tensor): ``kappa``, broadcastable against ``z``.
        l (Tensor): ``lambda``, clamped, broadcastable against ``z``.
    """
    a = torch.addcmul(torch.log(l), z, k, value=-1.0)
    sp = F.softplus(a)
    return a, sp, torch.mul(sp, -1.0 / l).exp_()


def eta(z: Tensor, k: Tensor, l: Tensor) -> Tensor:  # noqa: E741
    """APA's ``eta(z; k, l)`` in its stable form.

    Args:
        z (Tensor): The input.
        k (Tensor): ``kappa``, broadcastable against ``z``.
        l (Tensor): ``lambda``, clamped, broadcastable against ``z``.
    """
    return eta_terms(z, k, l)[2]


def _evaluate(name: str, z: Tensor, k: Tensor,
              l: Tensor) -> Tensor:  # noqa: E741
    e = eta(z, k, l)
    return z * e if name == 'aglu' else e


def composite(x: Tensor, kappa: Tensor, lam: Tensor, name: str,
              lambda_min: float, channel_dim: int) -> Tensor:
    """``name`` ('apa' or 'aglu') as a graph of standard ops, clamp
    included: what export, forward-mode AD and tracing compilers run, and
    (without a graph) the ``torch`` row's forward.

    Args:
        x (Tensor): The input (half precision is evaluated in float32).
        kappa (Tensor): The raw ``kappa`` (1 or C values).
        lam (Tensor): The raw ``lambda`` (1 or C values).
        name (str): ``'apa'`` or ``'aglu'``.
        lambda_min (float): The lower clamp of ``lam``.
        channel_dim (int): The axis per-channel values follow.
    """
    k, l = kernel_params(kappa, lam, lambda_min)  # noqa: E741
    z = x.to(compute_dtype(x))
    k, l = param_views(x, k, l, channel_dim, z.dtype)  # noqa: E741
    return _evaluate(name, z, k, l).to(x.dtype)


def _dot(u: Tensor, v: Tensor, dims: Optional[list]) -> Tensor:
    """sum(u * v) over ``dims`` (all when None); may overwrite ``u``."""
    if dims is None:
        return torch.dot(u.reshape(-1), v.reshape(-1))
    return u.mul_(v).sum(dims, keepdim=True)


def _reduce_dims(x: Tensor, shape: Tuple[int, ...]) -> Optional[list]:
    """Dims to sum a parameter gradient over; None means "all, to a
    scalar"."""
    if len(shape) == 0:
        return None
    return [d for d in range(x.dim()) if shape[d] == 1]


def torch_grads(grad_out: Tensor, needs: Sequence[bool], x: Tensor,
                kappa: Tensor, lam: Tensor, name: str, lambda_min: float,
                channel_dim: int):
    """``(grad_x, grad_kappa, grad_lambda)`` of ``name`` at ``x`` (raw
    parameters: the clamp's chain rule included), None where not in
    ``needs``.

    Args:
        grad_out (Tensor): The gradient of the output.
        needs (Sequence[bool]): Which of ``(x, kappa, lambda)`` need one.
        x, kappa, lam, name, lambda_min, channel_dim: As :func:`composite`.
    """
    need_x, need_k, need_l = needs[:3]
    with torch.no_grad():
        k0, l0 = kernel_params(kappa.detach(), lam.detach(), lambda_min)
        z = x.to(compute_dtype(x))
        k, l = param_views(x, k0, l0, channel_dim, z.dtype)  # noqa: E741
        inv_l = 1.0 / l
        a, sp, w = eta_terms(z, k, l)
        g = a.sigmoid_()
        w.mul_(grad_out.to(z.dtype))  # w = go * eta
        grad_x = grad_k = grad_l = None
        if need_l:  # d/dl: (z *) eta * (sp - g) / l^2
            q = sp.sub_(g) if name == 'apa' else sp.sub_(g).mul_(z)
            grad_l = _dot(q, w, _reduce_dims(x, l.shape)) * inv_l * inv_l
        p = g.mul_(w) if name == 'apa' else g.mul_(z).mul_(w)  # (z) go eta g
        if need_x:
            # d eta / dz = eta g k / l; d AGLU / dz = eta + z eta g k / l
            grad_x = (torch.mul(p, k * inv_l) if name == 'apa' else w.addcmul_(
                p, k * inv_l)).to(x.dtype)
        if need_k:  # d/dk: (z *) eta * g * z / l
            grad_k = _dot(p, z, _reduce_dims(x, k.shape)) * inv_l
        grad_k = None if grad_k is None else grad_k.reshape(k0.shape)
        grad_l = None if grad_l is None else grad_l.reshape(l0.shape)
        return (grad_x,
                *chain_to_params(grad_k, grad_l, kappa, lam, lambda_min))


def apa_reference(x: Tensor, kappa: Tensor, lambda_: Tensor) -> Tensor:
    """APA written directly from the paper formula (Eq. 5), plain autograd.

    For tests and benchmarks only: not stable and saves many tensors (an
    oracle independent of :func:`eta`'s stable form).

    Args:
        x (Tensor): Input.
        kappa (Tensor): Broadcastable slope.
        lambda_ (Tensor): Broadcastable shape parameter (> 0).
    """
    return (lambda_ * torch.exp(-kappa * x) + 1)**(-1 / lambda_)


def aglu_reference(x: Tensor, kappa: Tensor, lambda_: Tensor) -> Tensor:
    """AGLU written directly from the paper formula (Eq. 6), plain autograd.

    For tests and benchmarks only: not stable and saves many tensors.

    Args:
        x (Tensor): Input.
        kappa (Tensor): Broadcastable slope.
        lambda_ (Tensor): Broadcastable shape parameter (> 0).
    """
    return x * apa_reference(x, kappa, lambda_)
