"""NC1 (Eq. 10-12) against hand-computed values and the direct formula."""
import numpy as np
import pytest
from scipy import linalg

from mmact.analysis.neural_collapse import NC1Accumulator, nc1


def direct_nc1(features, labels):
    """Eq. 10-12 written out with d x d matrices and scipy's pinv."""
    classes = np.unique(labels)
    f_g = features.mean(axis=0)
    n, d = features.shape
    s_w, s_b = np.zeros((d, d)), np.zeros((d, d))
    for k in classes:
        f_k = features[labels == k]
        m_k = f_k.mean(axis=0)
        s_w += (f_k - m_k).T @ (f_k - m_k) / n
        s_b += np.outer(m_k - f_g, m_k - f_g) / len(classes)
    return np.trace(s_w @ linalg.pinv(s_b)) / len(classes)


def test_two_class_hand_values():
    # 1-D, classes {0, 2} and {4, 6}: S_W = 1, f_G = 3, S_B = 4,
    # NC1 = (1/2) * 1 / 4 = 1/8
    assert nc1(np.array([[0.], [2.], [4.], [6.]]),
               np.array([0, 0, 1, 1])) == pytest.approx(
                   0.125, rel=1e-12)
    # unequal classes {0, 2} and {5}: f_G = 7/3 is the sample mean (not the
    # mean of class means), S_W = 2/3, S_B = 40/9, NC1 = 3/40
    assert nc1(np.array([[0.], [2.], [5.]]), np.array([0, 0,
                                                       1])) == pytest.approx(
                                                           0.075, rel=1e-12)


def test_pseudo_inverse_ignores_directions_without_class_separation():
    # classes at x = -1 and x = +1 spread only along y: S_B = diag(1, 0),
    # S_W = diag(0, 1), trace(S_W S_B^+) = 0
    f = np.array([[-1., 1.], [-1., -1.], [1., 1.], [1., -1.]])
    assert nc1(f, np.array([0, 0, 1, 1])) == pytest.approx(0.0, abs=1e-12)


def test_collapsed_features_give_zero():
    rng = np.random.default_rng(0)
    means = rng.normal(size=(5, 16)) * 3 + 100  # far from the origin
    labels = np.repeat(np.arange(5), [7, 3, 1, 4, 2])
    assert nc1(means[labels], labels) == pytest.approx(0.0, abs=1e-10)


def test_matches_direct_formula_and_streams_in_batches():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 6, size=300)
    features = rng.normal(
        size=(300, 10)) + 2 * rng.normal(size=(6, 10))[labels] + 50
    expected = direct_nc1(features, labels)
    assert nc1(features, labels) == pytest.approx(expected, rel=1e-8)
    acc = NC1Accumulator(num_classes=6)
    for start in range(0, 300, 64):
        acc.update(features[start:start + 64], labels[start:start + 64])
    out = acc.compute()
    assert out['nc1'] == pytest.approx(expected, rel=1e-8)
    assert (out['num_classes'], out['num_samples'], out['feature_dim'],
            out['rank_between']) == (6, 300, 10, 5)
    # NC1 is invariant to translating and to uniformly scaling the features
    assert nc1(3.0 * features - 7.0, labels) == pytest.approx(
        expected, rel=1e-8)


def test_coincident_means_and_bad_input():
    f = np.array([[1.], [-1.], [1.], [-1.]])
    assert nc1(f, np.array([0, 0, 1, 1])) == float('inf')
    with pytest.raises(ValueError, match='at least 2 classes'):
        nc1(np.ones((3, 2)), np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match=r'\(b, d\)'):
        nc1(np.ones(3), np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match='labels must be integers'):
        NC1Accumulator(num_classes=2).update(np.ones((2, 2)), np.array([0, 2]))
    with pytest.raises(ValueError, match='differ in length'):
        nc1(np.ones((3, 2)), np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match='num_classes'):
        NC1Accumulator(num_classes=0)
