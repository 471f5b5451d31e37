"""NC1, the within-class variability measure of neural collapse.

Alexandridis et al., Adaptive Parametric Activation, 2024 (App., Eq. 10-12,
Table XIV), following Papyan et al., Prevalence of Neural Collapse, 2020 and
Zhu et al., A Geometric Analysis of Neural Collapse with Unconstrained
Features, 2021. For penultimate features ``f_{k,j}`` of ``K`` classes with
``n_k`` samples each (``n`` in total):

    f_G  = (1/n)   sum_k sum_j f_{k,j}            (global mean)
    m_k  = (1/n_k) sum_j f_{k,j}                  (class means)
    S_W  = (1/n)   sum_k sum_j (f_{k,j} - m_k)(f_{k,j} - m_k)^T
    S_B  = (1/K)   sum_k (m_k - f_G)(m_k - f_G)^T
    NC1  = (1/K) trace(S_W S_B^+)                  (S_B^+: pseudo-inverse)

Lower is better: compact classes (small S_W) that are far apart (large S_B).
``K`` counts the classes that have samples. Features arrive in batches
(:class:`NC1Accumulator`), so a test set never has to fit in memory: only
``d x d`` second moments and ``K x d`` class sums are kept.
"""
from typing import Dict, Optional

import numpy as np

__all__ = ['NC1Accumulator', 'nc1']


class NC1Accumulator:
    """Streaming sufficient statistics for :func:`nc1`.

    Sums are taken around the first batch's mean so that the difference of
    second moments stays accurate for features far from the origin.

    Args:
        num_classes (int, optional): Labels must lie in ``[0, num_classes)``;
            None accepts any non-negative label.

    Example:
        >>> acc = NC1Accumulator()
        >>> acc.update(np.array([[0.], [2.], [4.], [6.]]),
        ...            np.array([0, 0, 1, 1]))
        >>> round(acc.compute()['nc1'], 12)
        0.125
    """

    def __init__(self, num_classes: Optional[int] = None) -> None:
        if num_classes is not None and (isinstance(num_classes, bool)
                                        or not isinstance(num_classes, int)
                                        or num_classes < 1):
            raise ValueError('num_classes must be None or a positive int, '
                             f'got {num_classes!r}')
        self.num_classes = num_classes
        self.shift = None  # (d,) the first batch's mean
        self.second = None  # (d, d) sum (f - shift)(f - shift)^T
        self.sums: Dict[int, np.ndarray] = {}  # class -> sum (f - shift)
        self.counts: Dict[int, int] = {}

    def update(self, features: np.ndarray, labels: np.ndarray) -> None:
        """Add a batch.

        Args:
            features (np.ndarray): ``(b, d)`` features.
            labels (np.ndarray): ``(b,)`` integer class labels.
        """
        features = np.asarray(features, dtype=np.float64)
        labels = np.asarray(labels).reshape(-1)
        if features.ndim != 2:
            raise ValueError('NC1Accumulator.update expects (b, d) features, '
                             f'got shape {features.shape}')
        if labels.shape[0] != features.shape[0]:
            raise ValueError('NC1Accumulator.update: features and labels '
                             f'differ in length ({features.shape[0]} vs '
                             f'{labels.shape[0]})')
        if labels.size and (not np.issubdtype(labels.dtype, np.integer)
                            or labels.min() < 0 or
                            (self.num_classes is not None
                             and labels.max() >= self.num_classes)):
            raise ValueError('NC1Accumulator.update: labels must be integers '
                             f'in [0, {self.num_classes or "inf"}), got '
                             f'{labels.min()}..{labels.max()}')
        if not np.all(np.isfinite(features)):
            raise ValueError('NC1Accumulator.update: features contain '
                             'NaN or inf')
        if features.shape[0] == 0:
            return
        if self.shift is None:
            self.shift = features.mean(axis=0)
            d = features.shape[1]
            self.second = np.zeros((d, d))
        elif features.shape[1] != self.shift.shape[0]:
            raise ValueError('NC1Accumulator.update: feature width changed '
                             f'from {self.shift.shape[0]} to '
                             f'{features.shape[1]}')
        centred = features - self.shift
        self.second += centred.T @ centred
        for label in np.unique(labels):
            rows = centred[labels == label]
            key = int(label)
            self.sums[key] = self.sums.get(key, 0.0) + rows.sum(axis=0)
            self.counts[key] = self.counts.get(key, 0) + rows.shape[0]

    def compute(self) -> Dict:
        """NC1 and its parts.

        Returns:
            dict: ``nc1`` (inf when all class means coincide);
            ``trace_within`` = trace(S_W) and
            ``trace_between`` = trace(S_B); ``num_classes`` (K, classes
            with samples), ``num_samples`` (n), ``feature_dim`` (d) and
            ``rank_between`` (rank of S_B used by the pseudo-inverse).
        """
        if len(self.counts) < 2:
            raise ValueError('NC1 needs samples of at least 2 classes, got '
                             f'{len(self.counts)}')
        classes = sorted(self.counts)
        counts = np.array([self.counts[k] for k in classes], dtype=np.float64)
        sums = np.stack([self.sums[k] for k in classes])  # (K, d), shifted
        n, num_k = counts.sum(), len(classes)
        means = sums / counts[:, None]  # m_k - shift
        # n S_W = sum (f - shift)(f - shift)^T - sum_k n_k m_k m_k^T (shifted)
        within = (self.second - (means * counts[:, None]).T @ means) / n
        between_rows = means - sums.sum(axis=0) / n  # m_k - f_G, (K, d)
        # S_B = R^T R / K: its non-zero eigenpairs are (s_i^2 / K, v_i) from
        # the SVD of R, so S_B^+ never needs a d x d decomposition
        _, s, vt = np.linalg.svd(between_rows, full_matrices=False)
        eig = s**2 / num_k
        # scipy.linalg.pinv's default cut-off: max(d, K) * eps * largest
        keep = eig > eig.max() * max(vt.shape[1], num_k) * np.finfo(
            np.float64).eps
        v = vt[keep]  # (r, d)
        projected = np.einsum('rd,de,re->r', v, within, v)  # v^T S_W v
        if keep.any():
            # rounding can leave v^T S_W v a hair below 0 for collapsed
            # classes
            value = max(0.0, float(np.sum(projected / eig[keep]) / num_k))
        else:  # all class means coincide: no separation at all
            value = float('inf')
        return dict(
            nc1=value,
            trace_within=float(np.trace(within)),
            trace_between=float(eig.sum()),
            num_classes=num_k,
            num_samples=int(n),
            feature_dim=int(vt.shape[1]),
            rank_between=int(keep.sum()))


def nc1(features: np.ndarray, labels: np.ndarray) -> float:
    """NC1 of a whole feature matrix (see the module docstring).

    Args:
        features (np.ndarray): ``(n, d)`` penultimate features.
        labels (np.ndarray): ``(n,)`` integer class labels.

    Returns:
        float: ``(1/K) trace(S_W S_B^+)``, >= 0.
    """
    accumulator = NC1Accumulator()
    accumulator.update(features, labels)
    return accumulator.compute()['nc1']
