"""fit_gate: exact members, best fits and the limit fit of APA / AGLU."""
import pytest
import torch
import torch.nn as nn

from mmact.ops import aglu_reference, apa_reference
from mmact.ops.apa.gate_fit import fit_gate

F64 = dict(dtype=torch.float64)


def _monte_carlo_error(family, target, kappa, lam, means, stds, n=400000):
    """Relative RMS error of the pooled channels by sampling."""
    g = torch.Generator().manual_seed(0)
    x = means[:, None] + stds[:, None] * torch.randn(
        means.numel(), n // means.numel(), generator=g, **F64)
    fn = aglu_reference if family == 'aglu' else apa_reference
    out = fn(x, kappa.reshape(-1, 1), lam.reshape(-1, 1))
    ref = target(x.clone())
    return float(((out - ref).pow(2).sum() / ref.pow(2).sum()).sqrt())


@pytest.mark.parametrize('family,target', [('apa', nn.Sigmoid()),
                                           ('aglu', nn.SiLU())])
@pytest.mark.parametrize('shared', [True, False])
def test_exact_members_are_recovered(family, target, shared):
    g = torch.Generator().manual_seed(1)
    means = torch.randn(5, generator=g, **F64)
    stds = torch.rand(5, generator=g, **F64) + 0.1
    fit = fit_gate(family, target, 'exact', means, stds, shared)
    assert torch.equal(fit.kappa, torch.ones_like(fit.kappa))
    assert torch.equal(fit.lambda_, torch.ones_like(fit.lambda_))
    assert fit.kappa.shape == ((1, ) if shared else (5, ))
    assert float(fit.error.max()) < 1e-12


def test_gelu_best_fit_is_the_minimum():
    means, stds = torch.zeros(1, **F64), torch.ones(1, **F64)
    fit = fit_gate('aglu', nn.GELU(), 'best', means, stds)
    # GELU's sigmoid approximation x * sigmoid(1.702 x) (Hendrycks and
    # Gimpel 2016) is close to the fit.
    assert abs(float(fit.kappa) - 1.702) < 0.02
    assert abs(float(fit.lambda_) - 1.0) < 0.02
    best = float(fit.error)
    assert best == pytest.approx(
        _monte_carlo_error('aglu', nn.GELU(), fit.kappa, fit.lambda_, means,
                           stds),
        rel=0.03)
    for dk, dl in ((1.05, 1), (0.95, 1), (1, 1.1), (1, 0.9)):
        k, l = fit.kappa * dk, fit.lambda_ * dl  # noqa: E741
        assert _monte_carlo_error('aglu', nn.GELU(), k, l, means,
                                  stds) > best


@pytest.mark.parametrize('tolerance', [0.05, 0.01, 0.002])
def test_relu_limit_fit_takes_the_smallest_kappa_within_tolerance(tolerance):
    g = torch.Generator().manual_seed(2)
    means = 0.3 * torch.randn(16, generator=g, **F64)
    stds = torch.rand(16, generator=g, **F64) + 0.3
    fit = fit_gate('aglu', nn.ReLU(), 'limit', means, stds,
                   tolerance=tolerance)
    assert float(fit.error) == pytest.approx(tolerance, rel=1e-3)
    assert _monte_carlo_error('aglu', nn.ReLU(), fit.kappa, fit.lambda_,
                              means, stds) == pytest.approx(
                                  tolerance, rel=0.05)
    # 5% less kappa misses the tolerance whatever lambda
    for lam in (0.02, 0.05, 0.1, 0.3, 1.0, 3.0):
        assert _monte_carlo_error('aglu', nn.ReLU(), 0.95 * fit.kappa,
                                  torch.tensor([lam], **F64), means,
                                  stds) > tolerance


def test_limit_fit_scales_with_the_input_spread():
    one = fit_gate('aglu', nn.ReLU(), 'limit', torch.zeros(1, **F64),
                   torch.ones(1, **F64))
    tenth = fit_gate('aglu', nn.ReLU(), 'limit', torch.zeros(1, **F64),
                     torch.full((1, ), 0.1, **F64))
    assert float(tenth.kappa) == pytest.approx(10 * float(one.kappa), rel=1e-3)
    assert float(tenth.lambda_) == pytest.approx(float(one.lambda_), rel=1e-3)


def test_per_channel_fit_reaches_the_tolerance_in_every_channel():
    means = torch.tensor([0.0, 0.0, 1.0, -1.0], **F64)
    stds = torch.tensor([1.0, 0.25, 1.0, 1.0], **F64)
    fit = fit_gate('aglu', nn.ReLU(), 'limit', means, stds, shared=False,
                   tolerance=0.01)
    assert fit.kappa.shape == (4, )
    assert torch.allclose(fit.error, torch.full_like(fit.error, 0.01),
                          rtol=1e-3)
    # a narrower spread needs a sharper gate for the same relative error
    assert float(fit.kappa[1]) == pytest.approx(4 * float(fit.kappa[0]),
                                                rel=1e-3)


def test_limit_fit_channels_at_the_ends_of_the_search_range():
    """One per-channel call: a channel within tolerance at the range's
    smallest kappa (kappa x s = 0.5) keeps it, the others are searched to
    the tolerance; a tolerance no kappa reaches gives the largest (1e4)."""
    means = torch.tensor([0.0, 3.0, -3.0, 0.5], **F64)
    stds = torch.ones(4, **F64)
    scale = (stds**2 + means**2).sqrt()
    fit = fit_gate('aglu', nn.ReLU(), 'limit', means, stds, shared=False,
                   tolerance=0.2)
    sharpness = (fit.kappa * scale).tolist()
    assert sharpness[1] == pytest.approx(0.5, rel=1e-12)
    assert float(fit.error[1]) < 0.2
    for c in (0, 2, 3):
        assert sharpness[c] > 0.5
        assert float(fit.error[c]) == pytest.approx(0.2, rel=1e-6)
    never = fit_gate('aglu', nn.ReLU(), 'limit', means, stds, shared=False,
                     tolerance=1e-9)
    assert (never.kappa * scale).tolist() == pytest.approx([1e4] * 4,
                                                           rel=1e-12)
    assert bool((never.error > 1e-9).all())


def test_hardsigmoid_best_fit_of_the_gate():
    fit = fit_gate('apa', nn.Hardsigmoid(), 'best', torch.zeros(1, **F64),
                   torch.full((1, ), 2.0, **F64))
    assert float(fit.error) < 0.06
    assert float(fit.error) == pytest.approx(
        _monte_carlo_error('apa', nn.Hardsigmoid(), fit.kappa, fit.lambda_,
                           torch.zeros(1, **F64), torch.full((1, ), 2.0,
                                                             **F64)),
        rel=0.05)


@pytest.mark.parametrize('kwargs,match', [
    (dict(family='relu'), 'family must be one of'),
    (dict(kind='approx'), 'kind must be one of'),
    (dict(tolerance=0.0), 'tolerance must be > 0'),
    (dict(stds=torch.zeros(1, **F64)), 'stds > 0'),
])
def test_bad_arguments_are_named(kwargs, match):
    args = dict(
        family='aglu',
        target=nn.ReLU(),
        kind='limit',
        means=torch.zeros(1, **F64),
        stds=torch.ones(1, **F64))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fit_gate(**args)
