"""The group-size study's decision rules (docs/PREREGISTRATION-GROUP-SIZE.md), one function per test,
shared by the predictions' power computation and the verdicts (``python -m studies.group_size``)."""
from __future__ import annotations

import math

import numpy as np

from claims.llm_pairs import (  # noqa: F401 - G1 and G2 are decided where THEORY's claims 24 and 26 read them
    ALPHA,
    CAP_BINDS,
    HALF,
    LOW_DRIFT_ESS,
    PAIR_NAMES,
    fit_law,
    g1,
    g2,
    g_half,
    pair_rows,
)
from stats import one_sided_drop  # noqa: F401 - the pre-registration names it here

N_BOOT = 10_000
BOOT_SEED = 20261206
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


def slope_test(gmc: np.ndarray, trunc: np.ndarray, Gs, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """G3's test. ``gmc`` and ``trunc``: ``(seeds, len(Gs))`` stable outcomes (1 stable, 0 not), row i the
    same seed in both. The slope of the stable share on log2 G (least squares on the per-G shares) for
    each, and the difference GMC - TIC-trunc, with 95% percentile intervals from resampling whole seeds
    (rows of both tables together). CONFIRMED: both lower bounds above 0; REFUTED: GMC's slope or the
    difference at or below 0 as estimated; otherwise INCONCLUSIVE."""
    gmc, trunc = np.asarray(gmc, float), np.asarray(trunc, float)
    if gmc.shape != trunc.shape or gmc.ndim != 2 or gmc.shape[1] != len(Gs):
        raise ValueError(f"gmc {gmc.shape} and trunc {trunc.shape} must both be (seeds, {len(Gs)})")
    x = np.log2(np.asarray(Gs, float))
    xc = (x - x.mean()) / ((x - x.mean()) ** 2).sum()

    def slopes(a, b):
        return a.mean(-2) @ xc, b.mean(-2) @ xc

    sg, st = slopes(gmc, trunc)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(gmc), size=(n_boot, len(gmc)))
    bg, bt = slopes(gmc[pick], trunc[pick])
    q = (ALPHA / 2, 1 - ALPHA / 2)
    ci_g, ci_d = np.quantile(bg, q), np.quantile(bg - bt, q)
    if ci_g[0] > 0 and ci_d[0] > 0:
        verdict = "CONFIRMED"
    elif sg <= 0 or sg - st <= 0:
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "slope_gmc": float(sg), "slope_tic_trunc": float(st),
            "slope_gmc_ci": [float(c) for c in ci_g], "difference": float(sg - st),
            "difference_ci": [float(c) for c in ci_d], "seeds": len(gmc),
            "shares_gmc": [float(v) for v in gmc.mean(0)], "shares_tic_trunc": [float(v) for v in trunc.mean(0)]}


# --------------------------------------------------------------------------- part 1: the frozen pairs

VERDICTS_FORMAT = "gmc-grpo-group-size-verdicts/1"
G6_THRESHOLD = 0.57798249991828
"""The drift study's exploratory ESS-fraction threshold (from the first update), frozen by the
pre-registration."""
G5_MARGIN = 0.03
