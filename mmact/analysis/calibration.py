"""Expected calibration error and reliability-diagram bins.

Alexandridis et al., Adaptive Parametric Activation, 2024, App. G (Fig. 10)
compare the calibration of SE and APA* classifiers with reliability diagrams
and the expected calibration error (Guo et al., On Calibration of Modern
Neural Networks, 2017):

    ECE = sum_b (n_b / n) |acc_b - conf_b|

over equal-width confidence bins ``b = (b_lo, b_hi]`` (the first bin also
holds confidence 0), where ``conf_b`` is the mean top-1 confidence and
``acc_b`` the top-1 accuracy of the ``n_b`` samples in the bin. The maximum
calibration error (MCE) is the largest gap of a non-empty bin.
"""
from typing import Dict

import numpy as np

__all__ = ['calibration_bins', 'expected_calibration_error']


def calibration_bins(confidences: np.ndarray,
                     correct: np.ndarray,
                     num_bins: int = 10) -> Dict:
    """Bin top-1 confidences and compute ECE, MCE and the diagram's bars.

    Args:
        confidences (np.ndarray): ``(n,)`` top-1 confidences in [0, 1].
        correct (np.ndarray): ``(n,)`` whether each top-1 prediction is right
            (bool or 0/1).
        num_bins (int): Equal-width bins over [0, 1]. Defaults to 10.

    Returns:
        dict: ``edges`` (num_bins + 1,), per-bin ``counts``, ``accuracy`` and
        ``confidence`` (NaN for empty bins), ``ece``, ``mce``, the overall
        ``accuracy_mean`` and ``confidence_mean`` and ``n``.
    """
    confidences = np.asarray(confidences, dtype=np.float64).reshape(-1)
    correct = np.asarray(correct).reshape(-1)
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) \
            or num_bins < 1:
        raise ValueError(f'num_bins must be a positive int, got {num_bins!r}')
    if confidences.size == 0:
        raise ValueError('calibration_bins: no samples given')
    if correct.shape != confidences.shape:
        raise ValueError('calibration_bins: confidences and correct differ '
                         f'in length ({confidences.size} vs {correct.size})')
    if not np.all((confidences >= 0) & (confidences <= 1)):
        raise ValueError('calibration_bins: confidences must lie in [0, 1], '
                         f'got values in [{np.nanmin(confidences):g}, '
                         f'{np.nanmax(confidences):g}]')
    if not np.all((correct == 0) | (correct == 1)):
        raise ValueError('calibration_bins: correct must hold 0/1 or bool')
    correct = correct.astype(np.float64)

    edges = np.linspace(0.0, 1.0, num_bins + 1)
    # bin i holds edges[i] < c <= edges[i + 1]; c = 0 falls into bin 0
    index = np.searchsorted(edges[1:-1], confidences, side='left')
    counts = np.bincount(index, minlength=num_bins)
    filled = counts > 0
    with np.errstate(invalid='ignore', divide='ignore'):
        accuracy = np.bincount(index, correct, num_bins) / counts
        confidence = np.bincount(index, confidences, num_bins) / counts
    gaps = np.abs(accuracy - confidence)[filled]
    n = confidences.size
    return dict(
        edges=edges,
        counts=counts,
        accuracy=np.where(filled, accuracy, np.nan),
        confidence=np.where(filled, confidence, np.nan),
        ece=float(np.sum(gaps * counts[filled]) / n),
        mce=float(gaps.max()),
        accuracy_mean=float(correct.mean()),
        confidence_mean=float(confidences.mean()),
        n=int(n))


def expected_calibration_error(confidences: np.ndarray,
                               correct: np.ndarray,
                               num_bins: int = 10) -> float:
    """ECE of top-1 predictions (see :func:`calibration_bins`).

    Args:
        confidences (np.ndarray): ``(n,)`` top-1 confidences in [0, 1].
        correct (np.ndarray): ``(n,)`` whether each prediction is right.
        num_bins (int): Equal-width confidence bins. Defaults to 10.

    Returns:
        float: The ECE, in [0, 1].
    """
    return calibration_bins(confidences, correct, num_bins)['ece']
