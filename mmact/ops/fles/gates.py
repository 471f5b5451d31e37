"""Weighting functions rho of FleS and their analytic derivatives."""
import math
from typing import Callable, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    'FLES_GATES', 'check_gate', 'fles_gate', 'fles_gate_and_grad',
    'gate_inplace', 'NATIVE_BASE'
]

#: Weighting functions rho (FleS paper, App. E.14).
FLES_GATES = ('sigmoid', 'erf', 'tanh_softplus', 'tanh_gate')

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def check_gate(gate: str) -> None:
    """Raise a ValueError naming the accepted gates if ``gate`` is unknown."""
    if gate not in FLES_GATES:
        raise ValueError(f'unknown FleS gate {gate!r}; '
                         f'choose one of {FLES_GATES}')


def fles_gate(z: Tensor, gate: str = 'sigmoid') -> Tensor:
    """Weighting function rho(z) (FleS paper, App. E.14).

    ``sigmoid`` (FleS default, SiLU-like), ``erf`` (0.5 (1 + erf(z/sqrt 2)),
    GELU-like), ``tanh_softplus`` (tanh(softplus(z)), Mish-like) and
    ``tanh_gate`` (0.5 (tanh(z) + 1) = sigmoid(2z)).

    Args:
        z: any tensor.
        gate: one of :data:`FLES_GATES`.
    """
    check_gate(gate)
    if gate == 'sigmoid':
        return torch.sigmoid(z)
    if gate == 'erf':
        return 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))
    if gate == 'tanh_softplus':
        return torch.tanh(F.softplus(z))
    return 0.5 * (torch.tanh(z) + 1.0)


def fles_gate_and_grad(z: Tensor,
                       gate: str = 'sigmoid') -> Tuple[Tensor, Tensor]:
    """``(rho(z), rho'(z))`` with analytic derivatives (no autograd).

    Args:
        z: any tensor.
        gate: one of :data:`FLES_GATES`.
    """
    check_gate(gate)
    if gate == 'sigmoid':
        r = torch.sigmoid(z)
        return r, r * (1.0 - r)
    if gate == 'tanh_gate':
        r = torch.sigmoid(2.0 * z)
        return r, 2.0 * r * (1.0 - r)
    if gate == 'erf':
        r = 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))
        return r, torch.exp(-0.5 * z * z) * _INV_SQRT2PI
    t = torch.tanh(F.softplus(z))
    return t, (1.0 - t * t) * torch.sigmoid(z)


def gate_inplace(u: Tensor, gate: str) -> Tensor:
    """rho(u) written into ``u``."""
    if gate == 'sigmoid':
        return u.sigmoid_()
    if gate == 'tanh_gate':
        return u.mul_(2.0).sigmoid_()
    if gate == 'erf':
        return u.mul_(_INV_SQRT2).erf_().add_(1.0).mul_(0.5)
    return u.copy_(torch.tanh(F.softplus(u)))


#: For each gate a native fused kernel ``base`` (in-place form, backward
#: ``g * base'(u)``) and a constant c with rho(z) = base(c z) / (c z), so
#: that k_ve * rho(k_ho x) * x = k_ve / (c k_ho) * base(c k_ho x).
NATIVE_BASE: Dict[str, Tuple[Callable, Callable, float]] = {
    'sigmoid':
    (lambda u: F.silu(u, inplace=True), torch.ops.aten.silu_backward, 1.0),
    'tanh_gate':
    (lambda u: F.silu(u, inplace=True), torch.ops.aten.silu_backward, 2.0),
    'erf':
    (torch.ops.aten.gelu_,
     lambda g, u: torch.ops.aten.gelu_backward(g, u, approximate='none'), 1.0),
    'tanh_softplus':
    (lambda u: F.mish(u, inplace=True), torch.ops.aten.mish_backward, 1.0),
}
