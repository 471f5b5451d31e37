"""Weighting functions rho of FleS (FleS paper, App. E.14): one table,
:data:`GATES`, from which every path takes what it needs."""
import math
from typing import Callable, Dict, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    'Gate', 'GATES', 'FLES_GATES', 'check_gate', 'fles_gate',
    'fles_gate_and_grad'
]

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


class Gate(NamedTuple):
    """One gate rho, written once for every path.

    Args:
        fn: ``rho(z)`` in differentiable torch ops (the composite).
        grad: ``rho'(z)`` from ``(z, rho(z))``, analytic.
        inplace: ``rho(u)`` written into ``u`` (the blocked torch path).
        base: the native fused activation (in place) with
            ``rho(z) = base(c z) / (c z)``, so that
            ``k_ve rho(k_ho x) x = k_ve / (c k_ho) base(c k_ho x)``.
        base_grad: ``(g, u) -> g * base'(u)``, the native backward.
        c: the constant of ``base``, also the kernels' ``cst`` (the C
            kernels' and Triton's gate ``rho(z) = base_rho(c z)``).
        kernel: the Triton kernels' gate code of ``base_rho`` (0 sigmoid,
            1 erf, 2 tanh(softplus)); the C kernels take the gate's name.
    """
    fn: Callable[[Tensor], Tensor]
    grad: Callable[[Tensor, Tensor], Tensor]
    inplace: Callable[[Tensor], Tensor]
    base: Callable[[Tensor], Tensor]
    base_grad: Callable[[Tensor, Tensor], Tensor]
    c: float
    kernel: int


def _silu_(u: Tensor) -> Tensor:
    return F.silu(u, inplace=True)


def _erf_gate(z: Tensor) -> Tensor:
    return 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))


def _tanh_softplus(z: Tensor) -> Tensor:
    return torch.tanh(F.softplus(z))


#: The gates (FleS paper, App. E.14): ``sigmoid`` (FleS default,
#: SiLU-like), ``tanh_gate`` (``0.5 (tanh(z) + 1) = sigmoid(2 z)``), ``erf``
#: (``0.5 (1 + erf(z / sqrt 2))``, GELU-like) and ``tanh_softplus``
#: (``tanh(softplus(z))``, Mish-like).
GATES: Dict[str, Gate] = {
    'sigmoid':
    Gate(torch.sigmoid, lambda z, r: r * (1.0 - r), torch.sigmoid_, _silu_,
         torch.ops.aten.silu_backward, 1.0, 0),
    'tanh_gate':
    Gate(lambda z: 0.5 * (torch.tanh(z) + 1.0), lambda z, r: 2.0 * r *
         (1.0 - r), lambda u: u.mul_(2.0).sigmoid_(), _silu_,
         torch.ops.aten.silu_backward, 2.0, 0),
    'erf':
    Gate(_erf_gate, lambda z, r: torch.exp(-0.5 * z * z) * _INV_SQRT2PI,
         lambda u: u.mul_(_INV_SQRT2).erf_().add_(1.0).mul_(0.5),
         torch.ops.aten.gelu_,
         lambda g, u: torch.ops.aten.gelu_backward(g, u, approximate='none'),
         1.0, 1),
    'tanh_softplus':
    Gate(_tanh_softplus, lambda z, r: (1.0 - r * r) * torch.sigmoid(z),
         lambda u: u.copy_(_tanh_softplus(u)),
         lambda u: F.mish(u, inplace=True), torch.ops.aten.mish_backward, 1.0,
         2),
}

#: The gates' names.
FLES_GATES = tuple(GATES)


def check_gate(gate: str) -> Gate:
    """The row of ``gate``; a ValueError naming the accepted gates if it is
    unknown.

    Args:
        gate (str): A gate's name.
    """
    row = GATES.get(gate) if isinstance(gate, str) else None
    if row is None:
        raise ValueError(f'unknown FleS gate {gate!r}; '
                         f'choose one of {FLES_GATES}')
    return row


def fles_gate(z: Tensor, gate: str = 'sigmoid') -> Tensor:
    """Weighting function rho(z) (FleS paper, App. E.14; see :data:`GATES`).

    Args:
        z: any tensor.
        gate: one of :data:`FLES_GATES`.
    """
    return check_gate(gate).fn(z)


def fles_gate_and_grad(z: Tensor,
                       gate: str = 'sigmoid') -> Tuple[Tensor, Tensor]:
    """``(rho(z), rho'(z))`` with analytic derivatives (no autograd).

    Args:
        z: any tensor.
        gate: one of :data:`FLES_GATES`.
    """
    row = check_gate(gate)
    r = row.fn(z)
    return r, row.grad(z, r)
