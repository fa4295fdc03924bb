"""Generic statistics shared by every study: intervals for shares and means, paired bootstrap, multiple-comparison
correction, power, rank statistics and exact tests. Nothing here knows a study, an estimator or a results
folder: every setting a study fixes (level, resamples, random state) is an argument."""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st


def bootstrap_mean(diffs, confidence: float, n_resamples: int, seed: int) -> dict:
    """Mean of ``diffs``, its percentile-bootstrap interval at ``confidence`` (scipy.stats.bootstrap,
    ``n_resamples`` resamples, random state ``numpy.random.default_rng(seed)``) and the bootstrap
    distribution of the mean (for one-sided p-values, :func:`p_below`). Fewer than 2 values: NaN interval
    and no distribution; all values equal: the interval is the point."""
    diffs = np.asarray(diffs, float)
    if len(diffs) < 2:
        return {"n": len(diffs), "mean": float(diffs.mean()) if len(diffs) else math.nan, "low": math.nan,
                "high": math.nan, "dist": np.array([])}
    if np.all(diffs == diffs[0]):  # a degenerate sample: the interval is the point
        return {"n": len(diffs), "mean": float(diffs[0]), "low": float(diffs[0]), "high": float(diffs[0]),
                "dist": np.full(n_resamples, diffs[0])}
    res = _st.bootstrap((diffs,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                        method="percentile", random_state=np.random.default_rng(seed))
    return {"n": len(diffs), "mean": float(diffs.mean()), "low": float(res.confidence_interval.low),
            "high": float(res.confidence_interval.high), "dist": res.bootstrap_distribution}


def p_below(boot: dict, value: float) -> float:
    """One-sided bootstrap p-value of H0: mean <= value (the share of resampled means <= value), from a
    :func:`bootstrap_mean` record."""
    d = boot["dist"]
    return float(np.mean(d <= value)) if len(d) else math.nan


def share_ci(k: int, n: int, method: str = "exact", alpha: float = 0.05) -> tuple[float, float]:
    """The two-sided ``1 - alpha`` interval of a share k/n (``scipy.stats.binomtest``: ``exact`` is
    Clopper-Pearson, ``wilson`` Wilson's score interval); NaNs for n = 0."""
    if not n:
        return math.nan, math.nan
    ci = _st.binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method=method)
    return float(ci.low), float(ci.high)


def t_interval(x, confidence: float) -> tuple[float, float, int]:
    """Mean of the sample ``x`` and the half-width of its two-sided Student-t interval at ``confidence``
    (``t_{(1+confidence)/2, n-1} * sd / sqrt(n)``, sd with ddof 1): ``(mean, half, n)``. NaN half-width
    below 2 values, NaN mean for none."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    x = np.asarray(x, float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return mean, math.nan, n
    return mean, float(_st.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / np.sqrt(n)), n


def newcombe(k1: int, n1: int, k2: int, n2: int, alpha: float = 0.05) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) of p1 - p2 from two Wilson intervals (:func:`share_ci`)."""
    if not n1 or not n2:
        return math.nan, math.nan
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = share_ci(k1, n1, "wilson", alpha)
    l2, u2 = share_ci(k2, n2, "wilson", alpha)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def holm(pvalues: dict[str, float], alpha: float) -> dict[str, bool]:
    """Holm's step-down procedure: which nulls are rejected at family-wise level ``alpha`` (a NaN p-value
    is never rejected, and stops the procedure)."""
    order = sorted(pvalues, key=lambda k: (math.isnan(pvalues[k]), pvalues[k]))
    m, out, going = len(order), {}, True
    for i, k in enumerate(order):
        going = going and not math.isnan(pvalues[k]) and pvalues[k] <= alpha / (m - i)
        out[k] = going
    return out


def one_sided_drop(b_small: float, se_small: float, b_large: float, se_large: float) -> dict:
    """One-sided z-test that an estimate ``b_small`` exceeds ``b_large``, their standard errors added in
    quadrature (independence is not assumed: for positively correlated estimates this is conservative).
    Returns z, its p-value, the drop and its standard error."""
    se = math.hypot(se_small, se_large)
    z = (b_small - b_large) / se if se > 0 else (math.inf if b_small > b_large else -math.inf)
    return {"z": float(z), "p": float(_st.norm.sf(z)), "drop": float(b_small - b_large), "se": float(se)}


def seeds_for_power(sd_diff: float, delta: float, alpha: float, power: float = 0.8, n_max: int = 10_000) -> int:
    """Smallest number of paired samples n whose two-sided paired t-test at level ``alpha`` detects a
    mean difference ``delta`` with probability >= ``power`` (noncentral t), for differences of
    standard deviation ``sd_diff``."""
    if not (sd_diff > 0 and math.isfinite(sd_diff)):
        raise ValueError(f"sd_diff must be a finite number > 0, got {sd_diff!r}")
    for n in range(2, n_max + 1):
        df, nc = n - 1, delta / (sd_diff / math.sqrt(n))
        crit = _st.t.ppf(1 - alpha / 2, df)
        if _st.nct.sf(crit, df, nc) + _st.nct.cdf(-crit, df, nc) >= power:
            return n
    return n_max


def fisher_greater(table) -> float:
    """One-sided Fisher exact p-value of a 2x2 table ``[[a, b], [c, d]]`` (alternative: the first row's
    odds are greater)."""
    return float(_st.fisher_exact(table, alternative="greater").pvalue)


def sign_test(up: int, down: int) -> float:
    """Two-sided exact binomial (sign / McNemar exact) p-value of ``up`` successes in ``up + down`` at
    1/2; 1 when there is no discordant pair."""
    return float(_st.binomtest(up, up + down, 0.5).pvalue) if up + down else 1.0


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 1/2 P(tie): the Mann-Whitney AUC (``labels``
    boolean); NaN without a positive or a negative."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return math.nan
    u = _st.mannwhitneyu(pos, neg, alternative="two-sided").statistic
    return float(u) / (len(pos) * len(neg))


def stratified_auc(scores: np.ndarray, labels: np.ndarray, strata: np.ndarray) -> float:
    """The AUC over the (positive, negative) pairs that share a stratum."""
    num = den = 0.0
    for s in np.unique(strata):
        sel = strata == s
        p, n = int(labels[sel].sum()), int((~labels[sel]).sum())
        if p and n:
            num += auc(scores[sel], labels[sel]) * p * n
            den += p * n
    return num / den if den else math.nan


def offdiagonal_mean(gram, keep) -> float:
    """The mean of ``gram[r, s]`` over the pairs r != s of the replicates ``keep`` (numpy or torch): the
    cross-product estimate of ``|E X|^2`` from the Gram matrix of independent replicates X_r, in which no
    replicate's own noise enters."""
    sub = gram[np.ix_(keep, keep)]
    k = len(keep)
    return float((sub.sum() - sub.diagonal().sum()) / (k * (k - 1)))


def jackknife(stat, R: int) -> tuple[float, float]:
    """``stat`` (a function of the kept replicates' indices) on all R replicates, and its leave-one-replicate-out
    jackknife standard error."""
    full = stat(list(range(R)))
    jack = np.array([stat([j for j in range(R) if j != i]) for i in range(R)])
    return full, float(math.sqrt((R - 1) / R * ((jack - jack.mean()) ** 2).sum()))


def cross_bias(means: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """The squared relative bias ``|m - t|^2 / |t|^2`` of a mean ``m`` estimated by R independent replicate
    means ``means`` ``(R, P)`` against an exact target ``t``: :func:`offdiagonal_mean` of the replicates'
    ``m_r - t``, divided by ``|t|^2``, with its jackknife standard error."""
    D = means - target[None]
    gram = D @ D.T
    full, se = jackknife(lambda keep: offdiagonal_mean(gram, keep), len(D))
    n2 = float(target @ target)
    return full / n2, se / n2
