"""Statistics of the paper's analyses (Alexandridis et al. 2025, Sec. III-B).

* Channel-attention entropy, Eq. 4, in **bits** (log base 2): a channel
  weight of 0.5 carries 1 bit, a weight of 0 or 1 carries 0, so a layer's
  entropy lies in [0, 1] as the paper describes ("closer to one ... the
  attention signals are informative").
* Kolmogorov-Smirnov distance of logits to fitted Gumbel (max) and Logistic
  distributions (Fig. 2).

Plain numpy so the numbers do not depend on a plotting or stats package.
"""
import math
from typing import Dict, Tuple

import numpy as np

__all__ = [
    'binary_entropy', 'attention_entropy', 'attention_channel_variance',
    'fit_gumbel', 'fit_logistic', 'gumbel_cdf', 'logistic_cdf',
    'gumbel_pdf', 'logistic_pdf',
    'ks_distance', 'ks_to_gumbel_and_logistic', 'DISTRIBUTIONS'
]

_EULER_GAMMA = 0.5772156649015329


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """Entropy in bits of Bernoulli(p), elementwise, with ``0 log 0 = 0``.

    Args:
        p (np.ndarray): Probabilities in [0, 1].

    Returns:
        np.ndarray: ``-(p log2 p + (1 - p) log2 (1 - p))``, same shape.
    """
    p = np.asarray(p, dtype=np.float64)
    if p.size and (np.nanmin(p) < 0 or np.nanmax(p) > 1):
        raise ValueError('binary_entropy: p must lie in [0, 1], got values '
                         f'in [{np.nanmin(p):g}, {np.nanmax(p):g}]')
    with np.errstate(divide='ignore', invalid='ignore'):
        terms = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.where((p == 0) | (p == 1), 0.0, terms)


def attention_entropy(attention: np.ndarray) -> np.ndarray:
    """Per-sample layer entropy ``E_l`` of channel attention (Eq. 4, bits).

    Args:
        attention (np.ndarray): ``(N, C)`` attention weights in [0, 1].

    Returns:
        np.ndarray: ``(N,)`` mean binary entropy over the C channels.
    """
    attention = np.asarray(attention)
    if attention.ndim != 2:
        raise ValueError('attention_entropy expects (N, C) attention weights, '
                         f'got shape {attention.shape}')
    return binary_entropy(attention).mean(axis=1)


def attention_channel_variance(attention: np.ndarray) -> float:
    """Variance over channels of the sample-averaged attention (Fig. 3-c).

    Args:
        attention (np.ndarray): ``(N, C)`` attention weights.

    Returns:
        float: ``Var_c(mean_n A[n, c])``; near 0 when the layer weights all
        channels alike.
    """
    attention = np.asarray(attention, dtype=np.float64)
    if attention.ndim != 2:
        raise ValueError('attention_channel_variance expects (N, C) '
                         f'attention weights, got shape {attention.shape}')
    return float(attention.mean(axis=0).var())


def _check_samples(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size < 2:
        raise ValueError(f'{name} needs at least 2 samples, got {x.size}')
    if not np.all(np.isfinite(x)):
        raise ValueError(f'{name}: samples contain NaN or inf')
    return x


def _spread(x: np.ndarray) -> float:
    # A constant sample has no scale; keep the fitted CDF a finite step.
    return max(float(x.std()), 1e-12)


def fit_gumbel(x: np.ndarray) -> Tuple[float, float]:
    """Gumbel (max) location and scale by the method of moments.

    ``scale = std * sqrt(6) / pi``, ``loc = mean - gamma_E * scale``; closed
    form and deterministic (no optimiser).
    """
    x = _check_samples(x, 'fit_gumbel')
    scale = _spread(x) * math.sqrt(6.0) / math.pi
    return float(x.mean()) - _EULER_GAMMA * scale, scale


def fit_logistic(x: np.ndarray) -> Tuple[float, float]:
    """Logistic location and scale by the method of moments.

    ``loc = mean``, ``scale = std * sqrt(3) / pi``.
    """
    x = _check_samples(x, 'fit_logistic')
    return float(x.mean()), _spread(x) * math.sqrt(3.0) / math.pi


def gumbel_cdf(x: np.ndarray, loc: float, scale: float) -> np.ndarray:
    """``exp(-exp(-(x - loc) / scale))``, the Gumbel activation's law."""
    return np.exp(-np.exp(-(np.asarray(x, dtype=np.float64) - loc) / scale))


def logistic_cdf(x: np.ndarray, loc: float, scale: float) -> np.ndarray:
    """``1 / (1 + exp(-(x - loc) / scale))``, the sigmoid's law."""
    z = (np.asarray(x, dtype=np.float64) - loc) / scale
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def gumbel_pdf(x: np.ndarray, loc: float, scale: float) -> np.ndarray:
    """Density of the Gumbel (max) distribution."""
    z = (np.asarray(x, dtype=np.float64) - loc) / scale
    return np.exp(-z - np.exp(-z)) / scale


def logistic_pdf(x: np.ndarray, loc: float, scale: float) -> np.ndarray:
    """Density of the Logistic distribution."""
    z = np.abs(np.asarray(x, dtype=np.float64) - loc) / scale
    return np.exp(-z) / (scale * (1 + np.exp(-z))**2)


#: name -> (fit, cdf)
DISTRIBUTIONS = {
    'gumbel': (fit_gumbel, gumbel_cdf),
    'logistic': (fit_logistic, logistic_cdf),
}


def ks_distance(x: np.ndarray, cdf) -> float:
    """One-sample Kolmogorov-Smirnov statistic ``sup |F_n - F|``.

    Args:
        x (np.ndarray): Samples.
        cdf (callable): The reference CDF, vectorised.

    Returns:
        float: ``max_i max(i/n - F(x_(i)), F(x_(i)) - (i-1)/n)``.
    """
    x = np.sort(_check_samples(x, 'ks_distance'))
    n = x.size
    f = cdf(x)
    upper = np.arange(1, n + 1) / n - f
    lower = f - np.arange(0, n) / n
    return float(max(upper.max(), lower.max()))


def ks_to_gumbel_and_logistic(x: np.ndarray) -> Dict[str, float]:
    """KS distance of ``x`` to a Gumbel and a Logistic fitted to it.

    Args:
        x (np.ndarray): Samples (at least 2, finite), e.g. one class's
            logits.

    Returns:
        dict: ``{'gumbel': D, 'logistic': D}``.
    """
    out = {}
    for name, (fit, cdf) in DISTRIBUTIONS.items():
        loc, scale = fit(x)
        out[name] = ks_distance(x, lambda v: cdf(v, loc, scale))
    return out
