"""Fit APA / AGLU to the activation they replace (the math of the
function-preserving swap; docs/design/swap.md).

The replaced activation ``f`` sees, in channel ``c``, inputs
``X ~ N(m_c, s_c^2)``. The fit chooses ``(kappa, lambda)`` of the gate
``eta`` (APA) or of ``x * eta`` (AGLU) by the relative RMS error::

    err(k, l) = sqrt(sum_c E_c[(A(X; k, l) - f(X))^2] / sum_c E_c[f(X)^2])

with one shared ``(k, l)`` (the sums run over all channels) or one pair per
channel (each sum has one term). Targets are of three kinds:

- ``'exact'``: ``f`` is in the family at ``k = l = 1`` (sigmoid = APA,
  SiLU = AGLU); nothing is fitted, the error is computed;
- ``'best'``: ``f`` has a best approximation at finite ``kappa`` (GELU is
  closest to AGLU at ``kappa`` ~ 1.7, ``lambda`` ~ 1): ``err`` is minimised;
- ``'limit'``: ``f`` is reached only as ``kappa -> inf`` (ReLU). ``err``
  falls like ``(kappa s)^-1.5``, and so does the output's sensitivity to a
  relative change of kappa, i.e. how much kappa can still learn (for ReLU
  under N(0, 1) it is about 1.2 ``err``): the fit takes the *smallest*
  ``kappa`` whose error is within ``tolerance``, ``lambda`` fitted at each
  ``kappa`` (docs/design/swap.md has the figures).

Expectations are trapezoid sums on one grid that is uniform over the
inputs' range and geometric towards 0, where the targets' kinks and the
gate's transition (width ``1 / kappa``) lie, so they stay accurate for
``kappa s`` up to the search's bound. ``lambda`` is found by golden-section
search on ``log lambda``, ``kappa`` by golden-section (best) or regula
falsi (limit) on ``log kappa``, for all channels at once.
"""
import math
from typing import Callable, NamedTuple, Tuple

import torch
from torch import Tensor

from .formula import eta

__all__ = ['GateFit', 'fit_gate', 'MATCH_KINDS', 'FAMILIES']

MATCH_KINDS = ('exact', 'best', 'limit')
FAMILIES = ('apa', 'aglu')

# Search ranges of kappa * s (s: the RMS input std) and of lambda.
_SHARPNESS_RANGE = {'best': (0.1, 100.0), 'limit': (0.5, 1e4)}
_LAMBDA_RANGE = (1e-2, 10.0)
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
_ITERATIONS = 25
# regula falsi steps of the limit fit: converged to float64 for stds from
# 0.01 to 3 (8 steps leave up to 2e-3 in log kappa, bisection takes 25)
_ROOT_ITERATIONS = 12


class GateFit(NamedTuple):
    """Result of :func:`fit_gate`; tensors with one value (shared) or one
    per channel.

    Attributes:
        kappa (Tensor): Fitted kappa.
        lambda_ (Tensor): Fitted lambda.
        error (Tensor): Relative RMS error reached (see the module doc).
    """
    kappa: Tensor
    lambda_: Tensor
    error: Tensor


def _quadrature(means: Tensor, stds: Tensor,
                points: int) -> Tuple[Tensor, Tensor]:
    """Grid ``x`` (about ``2 * points`` values) and weights (C, G) with
    ``sum_g w[c, g] h(x_g)`` ~ ``E[h(X_c)]``, ``X_c ~ N(m_c, s_c^2)``."""
    lo = float((means - 10 * stds).min())
    hi = float((means + 10 * stds).max())
    span = max(abs(lo), abs(hi))
    finest = float(stds.min()) * 1e-6
    geometric = torch.logspace(
        math.log10(finest), math.log10(span), points // 2, dtype=torch.float64)
    x = torch.cat([
        torch.linspace(lo, hi, points, dtype=torch.float64), geometric,
        -geometric,
        torch.zeros(1, dtype=torch.float64)
    ])
    x = torch.unique(x[(x >= lo) & (x <= hi)])  # sorted
    gaps = x.diff()
    width = torch.zeros_like(x)
    width[:-1] += gaps / 2
    width[1:] += gaps / 2
    # one (C, G) buffer, updated in place: C x G reaches 10^7 for shared fits
    w = (x[None, :] - means[:, None]).div_(stds[:, None])
    w.square_().mul_(-0.5).exp_().mul_(width)
    return x, w.div_(w.sum(1, keepdim=True))


class _Problem:
    """Relative errors of one family against one target on fixed weights."""

    def __init__(self, family: str, target: Tensor, x: Tensor,
                 weights: Tensor) -> None:
        self.with_input = family == 'aglu'
        self.x, self.t, self.w = x, target, weights
        self.norm = (weights * target * target).sum(1).clamp_min(1e-300)

    def error(self, log_k: Tensor, log_l: Tensor) -> Tensor:
        gate = eta(self.x, log_k.exp()[:, None], log_l.exp()[:, None])
        out = gate * self.x if self.with_input else gate
        diff = out - self.t
        return ((self.w * diff * diff).sum(1) / self.norm).sqrt()

    def best_lambda(self, log_k: Tensor) -> Tuple[Tensor, Tensor]:
        lo = torch.full_like(log_k, math.log(_LAMBDA_RANGE[0]))
        hi = torch.full_like(log_k, math.log(_LAMBDA_RANGE[1]))
        return _golden_min(lambda v: self.error(log_k, v), lo, hi)


def _golden_min(fn: Callable[[Tensor], Tensor], lo: Tensor,
                hi: Tensor) -> Tuple[Tensor, Tensor]:
    """Minimiser and minimum of ``fn`` on ``[lo, hi]`` (elementwise
    brackets; ``fn`` unimodal), golden-section search."""
    a, b = lo.clone(), hi.clone()
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = fn(c), fn(d)
    for _ in range(_ITERATIONS):
        left = fc <= fd  # the minimum lies in [a, d]
        a, b = torch.where(left, a, c), torch.where(left, d, b)
        new = torch.where(left, b - _GOLDEN * (b - a), a + _GOLDEN * (b - a))
        f_new = fn(new)
        c, d, fc, fd = (torch.where(left, new, d), torch.where(left, c, new),
                        torch.where(left, f_new,
                                    fd), torch.where(left, fc, f_new))
    best = torch.where(fc <= fd, c, d)
    return best, torch.minimum(fc, fd)


def _smallest_within(problem: _Problem, lo: Tensor, hi: Tensor,
                     tolerance: float) -> Tuple[Tensor, Tensor]:
    """Smallest ``log kappa`` in ``[lo, hi]`` whose best error is within
    ``tolerance`` (``hi`` where none is).

    The error of a limit target falls monotonically with kappa, like
    ``(kappa s)^-1.5``, so ``log(error / tolerance)`` is nearly linear in
    ``log kappa``: regula falsi finds its root in a few steps (the Illinois
    variant: an end kept twice in a row has its value halved, so both ends
    converge), each step keeping a bracket ``[a, b]`` with ``b`` within
    tolerance.
    """

    def excess(log_k: Tensor) -> Tensor:
        return problem.best_lambda(log_k)[1].div(tolerance).log()

    a, b = lo.clone(), hi.clone()
    fa, fb = excess(a), excess(b)
    reached = fb <= 0
    # channels whose answer is an end of the range stay where they are
    search = reached & (fa > 0)
    kept = torch.zeros_like(a)  # -1: a kept by the last step, +1: b kept
    for _ in range(_ROOT_ITERATIONS):
        step = torch.where(search, fb / (fb - fa), torch.zeros_like(fb))
        v = (b - step * (b - a)).clamp(min=a, max=b)
        fv = excess(v)
        ok = search & (fv <= 0)
        moved_a = search & ~ok
        fa = torch.where(ok & (kept < 0), fa / 2, fa)  # a kept again
        fb = torch.where(moved_a & (kept > 0), fb / 2, fb)  # b kept again
        a, fa = torch.where(moved_a, v, a), torch.where(moved_a, fv, fa)
        b, fb = torch.where(ok, v, b), torch.where(ok, fv, fb)
        kept = torch.where(ok, -1.0, torch.where(moved_a, 1.0, kept))
    answer = torch.where(search, b, torch.where(fa <= 0, lo, hi))
    return answer, reached


def fit_gate(family: str,
             target: Callable[[Tensor], Tensor],
             kind: str,
             means: Tensor,
             stds: Tensor,
             shared: bool = True,
             tolerance: float = 1e-2) -> GateFit:
    """Fit ``(kappa, lambda)`` of APA or AGLU to ``target``.

    Args:
        family (str): ``'apa'`` (the gate) or ``'aglu'`` (``x`` times it).
        target (callable): The replaced activation, applied elementwise to
            a float64 tensor (e.g. an ``nn.ReLU()`` module).
        kind (str): ``'exact'``, ``'best'`` or ``'limit'`` (module doc).
        means (Tensor): Per-channel input means, shape (C,).
        stds (Tensor): Per-channel input standard deviations (> 0), (C,).
        shared (bool): One ``(kappa, lambda)`` for all channels (True) or
            one per channel.
        tolerance (float): For ``'limit'`` targets, the relative error the
            smallest kappa must reach. Defaults to 1e-2.

    Returns:
        GateFit: float64 tensors of shape (1,) if ``shared`` else (C,).
    """
    if family not in FAMILIES:
        raise ValueError(f'family must be one of {FAMILIES}, got {family!r}')
    if kind not in MATCH_KINDS:
        raise ValueError(f'kind must be one of {MATCH_KINDS}, got {kind!r}')
    if not tolerance > 0:
        raise ValueError(f'tolerance must be > 0, got {tolerance!r}')
    means = means.detach().to(torch.float64).reshape(-1)
    stds = stds.detach().to(torch.float64).reshape(-1)
    if means.shape != stds.shape or not bool((stds > 0).all()):
        raise ValueError('means and stds must have one value per channel '
                         f'and stds > 0, got shapes {tuple(means.shape)} / '
                         f'{tuple(stds.shape)}, min std {stds.min()}')
    # Per-channel fits evaluate C curves per step: a coarser grid.
    x, weights = _quadrature(means, stds, 3000 if shared else 800)
    scale = stds.pow(2).add(means.pow(2)).sqrt()
    if shared:
        weights = weights.mean(0, keepdim=True)
        scale = scale.pow(2).mean().sqrt().reshape(1)
    with torch.no_grad():
        t = target(x.clone()).to(torch.float64)
    problem = _Problem(family, t, x, weights)
    if kind == 'exact':
        log_k = log_l = torch.zeros_like(scale)
    else:
        low, high = _SHARPNESS_RANGE[kind]
        lo, hi = (low / scale).log(), (high / scale).log()
        if kind == 'best':
            log_k = _golden_min(lambda v: problem.best_lambda(v)[1], lo, hi)[0]
        else:
            log_k = _smallest_within(problem, lo, hi, tolerance)[0]
        log_l = problem.best_lambda(log_k)[0]
    return GateFit(log_k.exp(), log_l.exp(), problem.error(log_k, log_l))
