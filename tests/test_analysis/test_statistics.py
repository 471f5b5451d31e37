import math

import numpy as np
import pytest
from scipy import stats

from mmact.analysis.statistics import (attention_channel_variance,
                                       attention_entropy, binary_entropy,
                                       fit_gumbel, fit_logistic, gumbel_cdf,
                                       gumbel_pdf, ks_distance,
                                       ks_to_gumbel_and_logistic,
                                       logistic_cdf, logistic_pdf)


def test_binary_entropy_hand_values():
    # bits: p = 0.5 -> 1, p in {0, 1} -> 0, p = 0.25 -> 0.8112781
    h = binary_entropy(np.array([0.5, 0.0, 1.0, 0.25, 0.75]))
    expected = -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))
    np.testing.assert_allclose(h, [1.0, 0.0, 0.0, expected, expected],
                               rtol=1e-12)


def test_binary_entropy_rejects_non_probabilities():
    with pytest.raises(ValueError, match=r'\[0, 1\]'):
        binary_entropy(np.array([0.5, 1.2]))


def test_attention_entropy_eq4():
    # constant 0.5 attention: 1 bit per channel -> E_l = 1
    np.testing.assert_allclose(attention_entropy(np.full((3, 64), 0.5)),
                               np.ones(3))
    # all-pass attention (all ones): E_l = 0
    np.testing.assert_allclose(attention_entropy(np.ones((2, 8))), 0.0)
    # half the channels at 0.5, half at 1: E_l = 0.5
    a = np.concatenate([np.full((1, 4), 0.5), np.ones((1, 4))], axis=1)
    np.testing.assert_allclose(attention_entropy(a), [0.5])
    with pytest.raises(ValueError, match=r'\(N, C\)'):
        attention_entropy(np.ones(4))


def test_attention_channel_variance():
    # mean over samples = [0.25, 0.75] -> variance 0.0625
    a = np.array([[0.0, 1.0], [0.5, 0.5]])
    assert attention_channel_variance(a) == pytest.approx(0.0625)
    assert attention_channel_variance(np.full((5, 7), 0.3)) == 0.0


def test_moment_fits_recover_parameters():
    rng = np.random.RandomState(0)
    loc, scale = fit_gumbel(rng.gumbel(2.0, 1.5, 200000))
    assert loc == pytest.approx(2.0, abs=0.02)
    assert scale == pytest.approx(1.5, abs=0.02)
    loc, scale = fit_logistic(rng.logistic(-1.0, 0.5, 200000))
    assert loc == pytest.approx(-1.0, abs=0.01)
    assert scale == pytest.approx(0.5, abs=0.01)


def test_cdfs_and_pdfs_match_scipy():
    x = np.linspace(-5, 8, 101)
    np.testing.assert_allclose(gumbel_cdf(x, 1.0, 2.0),
                               stats.gumbel_r.cdf(x, 1.0, 2.0), rtol=1e-12)
    np.testing.assert_allclose(logistic_cdf(x, 1.0, 2.0),
                               stats.logistic.cdf(x, 1.0, 2.0), rtol=1e-12)
    np.testing.assert_allclose(gumbel_pdf(x, 1.0, 2.0),
                               stats.gumbel_r.pdf(x, 1.0, 2.0), rtol=1e-12)
    np.testing.assert_allclose(logistic_pdf(x, 1.0, 2.0),
                               stats.logistic.pdf(x, 1.0, 2.0), rtol=1e-12)


def test_ks_distance_hand_value_and_scipy():
    # samples {0.1, 0.4, 0.7} against U(0, 1):
    # max(1/3 - 0.1, 2/3 - 0.4, 1 - 0.7, 0.1 - 0, 0.4 - 1/3, 0.7 - 2/3) = 0.3
    uniform = lambda v: np.clip(v, 0, 1)  # noqa: E731
    assert ks_distance(np.array([0.7, 0.1, 0.4]), uniform) == pytest.approx(
        0.3)
    x = np.random.RandomState(1).gumbel(0, 1, 500)
    d = ks_distance(x, lambda v: gumbel_cdf(v, 0.0, 1.0))
    assert d == pytest.approx(stats.kstest(x, 'gumbel_r').statistic,
                              rel=1e-12)


def test_ks_prefers_the_generating_family():
    rng = np.random.RandomState(2)
    gumbel = ks_to_gumbel_and_logistic(rng.gumbel(0, 1, 5000))
    logistic = ks_to_gumbel_and_logistic(rng.logistic(0, 1, 5000))
    assert gumbel['gumbel'] < 0.03 < gumbel['logistic']
    assert logistic['logistic'] < 0.03 < logistic['gumbel']


def test_ks_rejects_bad_samples():
    with pytest.raises(ValueError, match='at least 2'):
        ks_to_gumbel_and_logistic(np.array([1.0]))
    with pytest.raises(ValueError, match='NaN'):
        ks_to_gumbel_and_logistic(np.array([1.0, np.nan]))
