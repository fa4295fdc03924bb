"""The generic statistics (stats): share intervals, Newcombe's interval of a difference of shares,
the paired bootstrap, Holm, power, the rank and exact tests."""
from __future__ import annotations

import numpy as np
import pytest

import stats


def test_newcombe_s_worked_example():
    """Newcombe (1998), Statistics in Medicine 17:873, table II example (f): 56/70 vs 48/80, the
    hybrid score interval of the difference 0.0524 to 0.3339."""
    lo, hi = stats.newcombe(56, 70, 48, 80)
    assert lo == pytest.approx(0.0524, abs=5e-5) and hi == pytest.approx(0.3339, abs=5e-5)
    lo, hi = stats.newcombe(10, 10, 10, 10)  # both 10/10: the interval contains 0
    assert lo < 0 < hi or lo <= 0 <= hi
    assert all(np.isnan(stats.newcombe(1, 0, 1, 2)))


def test_wilson_bounds_stay_in_the_unit_interval():
    def wilson(k, n):
        return stats.share_ci(k, n, "wilson")

    assert wilson(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(3, 10)[0] == pytest.approx(0.1078, abs=5e-5)  # Wilson (1927) 3/10: 0.1078 to 0.6032
    assert all(np.isnan(stats.share_ci(0, 0)))


def test_auc_and_stratified_auc():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([False, False, True, True])
    assert stats.auc(x, y) == 1.0 and stats.auc(-x, y) == 0.0
    # within each stratum every positive is below its negative (0); pooled, one pair of four is above
    x2 = np.array([1.0, 0.0, 11.0, 10.0])
    strata = np.array(["a", "a", "b", "b"])
    y2 = np.array([False, True, False, True])
    assert stats.stratified_auc(x2, y2, strata) == 0.0 and stats.auc(x2, y2) == 0.25


def test_holm_power_bootstrap_and_exact_tests():
    assert stats.holm({"a": 0.01, "b": 0.04, "c": 0.03}, 0.05) == {"a": True, "c": False, "b": False}
    assert stats.holm({"a": 0.01, "b": 0.02}, 0.05) == {"a": True, "b": True}
    assert stats.holm({"a": float("nan"), "b": 0.001}, 0.05) == {"b": True, "a": False}
    assert stats.seeds_for_power(0.03, 0.03, 0.05) == 10  # effect size 1, two-sided 5%, 80% power: the textbook n
    assert stats.seeds_for_power(0.06, 0.03, 0.05) > 30
    with pytest.raises(ValueError, match="sd_diff must be a finite number > 0, got 0"):
        stats.seeds_for_power(0, 0.03, 0.05)
    b = stats.bootstrap_mean(np.array([0.1, 0.12, 0.08, 0.11, 0.09]), 0.95, 2000, 1)
    assert b["low"] < 0.1 < b["high"] and stats.p_below(b, 0.0) == 0.0 and stats.p_below(b, 0.2) == 1.0
    point = stats.bootstrap_mean([0.2, 0.2], 0.95, 10, 1)
    assert point["low"] == point["high"] == 0.2 and len(point["dist"]) == 10
    assert np.isnan(stats.bootstrap_mean([0.2], 0.95, 10, 1)["low"])
    assert stats.sign_test(0, 0) == 1.0 and stats.sign_test(5, 0) == pytest.approx(0.0625)
    assert stats.fisher_greater([[5, 0], [0, 5]]) == pytest.approx(1 / 252)


def test_t_interval_is_scipys_student_t_interval_of_the_mean():
    """A fixed sample: the mean and the half-width of the 95% and 90% intervals against
    scipy.stats.t.interval; float64 and a handful of operations, so agreement to 1e-12 relative."""
    from scipy import stats as st

    x = np.array([0.31, 0.27, 0.45, 0.38, 0.22, 0.40])
    for level in (0.95, 0.9):
        mean, half, n = stats.t_interval(x, level)
        lo, hi = st.t.interval(level, len(x) - 1, loc=x.mean(), scale=st.sem(x))
        assert n == 6 and mean == pytest.approx(x.mean(), rel=1e-15)
        assert (mean - half, mean + half) == pytest.approx((lo, hi), rel=1e-12)
    assert stats.t_interval(x, 0.95)[1] > stats.t_interval(x, 0.9)[1]
    one = stats.t_interval([0.5], 0.95)
    assert one[0] == 0.5 and np.isnan(one[1]) and one[2] == 1
    none = stats.t_interval([], 0.95)
    assert np.isnan(none[0]) and np.isnan(none[1]) and none[2] == 0
    with pytest.raises(ValueError, match="confidence must lie in \\(0, 1\\), got 95"):
        stats.t_interval(x, 95)
