"""ECE / reliability bins against hand-computed values."""
import numpy as np
import pytest

from mmact.analysis.calibration import (calibration_bins,
                                        expected_calibration_error)


def test_ece_constructed_example():
    # 10 bins: 0.72 and 0.78 share bin (0.7, 0.8] (accuracy 1/2, confidence
    # 0.75, gap 0.25), 0.95 is right (gap 0.05), 0.15 is wrong (gap 0.15):
    # ECE = (2 * 0.25 + 0.05 + 0.15) / 4 = 0.175, MCE = 0.25
    conf = np.array([0.72, 0.78, 0.95, 0.15])
    correct = np.array([1, 0, 1, 0])
    bins = calibration_bins(conf, correct, num_bins=10)
    assert bins['ece'] == pytest.approx(0.175, abs=1e-12)
    assert bins['mce'] == pytest.approx(0.25, abs=1e-12)
    np.testing.assert_array_equal(bins['counts'],
                                  [0, 1, 0, 0, 0, 0, 0, 2, 0, 1])
    assert bins['accuracy'][7] == 0.5
    assert bins['confidence'][7] == pytest.approx(0.75)
    assert np.isnan(bins['accuracy'][0]) and np.isnan(bins['confidence'][5])
    assert bins['accuracy_mean'] == 0.5
    assert bins['confidence_mean'] == pytest.approx(0.65)
    assert bins['n'] == 4
    assert expected_calibration_error(conf, correct == 1, 10) == \
        pytest.approx(0.175)


def test_one_sample_per_bin_and_bin_edges():
    conf = np.array([0.95, 0.85, 0.62, 0.58, 0.33])
    correct = np.array([1, 0, 1, 1, 0])
    expected = (0.05 + 0.85 + 0.38 + 0.42 + 0.33) / 5
    assert expected_calibration_error(conf, correct) == pytest.approx(
        expected, abs=1e-12)
    # bins are (lo, hi], 0 joins the first: 0 and 0.5 fall in (0, 0.5],
    # 0.5000001 and 1 in (0.5, 1]
    bins = calibration_bins(
        np.array([0.0, 0.5, 0.5000001, 1.0]),
        np.array([0, 1, 1, 1]),
        num_bins=2)
    np.testing.assert_array_equal(bins['counts'], [2, 2])


def test_perfect_calibration_has_zero_ece():
    # within every bin the accuracy equals the mean confidence
    conf = np.repeat([0.25, 0.75], 4)
    correct = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    assert expected_calibration_error(conf, correct, 4) == pytest.approx(0.0)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match='num_bins'):
        calibration_bins(np.array([0.5]), np.array([1]), num_bins=0)
    with pytest.raises(ValueError, match=r'\[0, 1\]'):
        calibration_bins(np.array([1.5]), np.array([1]))
    with pytest.raises(ValueError, match='differ in length'):
        calibration_bins(np.array([0.5, 0.6]), np.array([1]))
    with pytest.raises(ValueError, match='no samples'):
        calibration_bins(np.array([]), np.array([]))
    with pytest.raises(ValueError, match='0/1'):
        calibration_bins(np.array([0.5]), np.array([2]))
