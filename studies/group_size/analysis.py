"""The group-size study's decision rules (docs/PREREGISTRATION-GROUP-SIZE.md), one function per test,
shared by the predictions' power computation and the verdicts (``python -m studies.group_size``)."""
from __future__ import annotations

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
from stats import (  # noqa: F401 - the pre-registration names them here
    cross_bias,
    jackknife,
    offdiagonal_mean,
    one_sided_drop,
)

N_BOOT = 10_000
BOOT_SEED = 20261206


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
