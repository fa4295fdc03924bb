"""The budget study's decision rules (docs/PREREGISTRATION-BUDGET.md), one function per hypothesis, on arrays:
shared by the predictions' power computation and the verdicts (:mod:`studies.budget.analysis`).

Every table maps a cell ``(B, G)`` to one value per seed (``(seeds,)``, NaN where a run is missing); row i is the
same seed in every cell (the runs of one seed share the warm start, the prompts and the uniforms), so intervals
come from resampling whole seeds (every cell together). A slope is the least-squares slope of the cells' means on
log2 of the split's coordinate within one stratum (a B for B1, an N = B x G for B2 and B4), averaged over the
strata with at least two cells, each stratum weighing the same. One-sided p-values are the share of resampled
statistics on the wrong side (:func:`stats.p_below`'s convention); Holm's procedure runs over the five
hypotheses' p-values at ``ALPHA`` (:func:`verdicts`).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import spearmanr

from stats import holm

ALPHA = 0.05
N_BOOT = 10_000
BOOT_SEED = 20261210
FLAT = 0.1
"""B2: TOPR's learned share is flat in the split when its slope's 95% interval lies within +-FLAT per doubling of B
(0.3 across the four splits of N = 128)."""
MARGIN = 0.03
"""B4: the studies' margin in final held-out pc (:data:`grids.run_table.MARGIN`), per doubling of G at fixed N."""
N_PERM = 10_000
HYPOTHESES = ("B1", "B2", "B3", "B4", "B5")


def _check(table: dict) -> int:
    sizes = {np.asarray(v).shape for v in table.values()}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise ValueError(f"every cell needs one value per seed, the same seeds in every cell; got shapes {sizes}")
    return next(iter(sizes))[0]


def strata_slope(table: dict, stratum, coord, pick: np.ndarray | None = None) -> np.ndarray:
    """The mean over strata of the per-stratum slope of the cells' seed means on log2 ``coord(B, G)``; ``pick``
    ``(n_boot, seeds)`` resamples seed rows (None: the observed seeds), giving one slope per resample."""
    S = _check(table)
    rows = np.arange(S)[None] if pick is None else pick
    groups: dict = {}
    for (B, G), v in table.items():
        groups.setdefault(stratum(B, G), []).append((math.log2(coord(B, G)), np.asarray(v, float)))
    slopes = []
    for cells in groups.values():
        if len(cells) < 2:
            continue
        x = np.array([c[0] for c in cells])
        xc = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
        means = np.stack([np.nanmean(c[1][rows], -1) for c in cells], -1)  # (n, cells)
        slopes.append(means @ xc)
    if not slopes:
        raise ValueError("no stratum holds two cells: no slope")
    return np.mean(slopes, 0)


def _boot(table_fn, S: int, n_boot: int, seed: int):
    pick = np.random.default_rng(seed).integers(0, S, size=(n_boot, S))
    return table_fn(None)[0], table_fn(pick)


def _ci(dist) -> list[float]:
    return [float(q) for q in np.nanquantile(dist, (ALPHA / 2, 1 - ALPHA / 2))]


def b1(gmc: dict, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """B1: at fixed B, GMC's learned share rises with G. The slope on log2 G within each B, averaged over the B's.
    CONFIRMED: Holm-significant and the interval above 0; REFUTED: the slope at or below 0 as estimated."""
    S = _check(gmc)
    obs, dist = _boot(lambda p: strata_slope(gmc, lambda B, G: B, lambda B, G: G, p), S, n_boot, seed)
    return {"slope": float(obs), "ci": _ci(dist), "p": float(np.mean(dist <= 0)), "seeds": S,
            "refuted": bool(obs <= 0), "extra_ok": bool(_ci(dist)[0] > 0)}


def b2(gmc: dict, topr: dict, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """B2: at fixed N, GMC's learned share rises with B while TOPR's is flat. Slopes on log2 B within each N.
    CONFIRMED: GMC's slope Holm-significant above 0 and TOPR's interval within +-:data:`FLAT`; REFUTED: GMC's slope
    at or below 0 as estimated, or TOPR's interval wholly outside +-FLAT."""
    S = _check({**{("g",) + k: v for k, v in gmc.items()}, **{("t",) + k: v for k, v in topr.items()}})

    def stat(p, tab):
        return strata_slope(tab, lambda B, G: B * G, lambda B, G: B, p)

    og, dg = _boot(lambda p: stat(p, gmc), S, n_boot, seed)
    ot, dt = _boot(lambda p: stat(p, topr), S, n_boot, seed)
    ci_t = _ci(dt)
    return {"slope_gmc": float(og), "ci_gmc": _ci(dg), "slope_topr": float(ot), "ci_topr": ci_t,
            "difference": float(og - ot), "ci_difference": _ci(dg - dt), "p": float(np.mean(dg <= 0)),
            "flat": FLAT, "seeds": S, "extra_ok": bool(_ci(dg)[0] > 0 and -FLAT <= ci_t[0] and ci_t[1] <= FLAT),
            "refuted": bool(og <= 0 or ci_t[0] > FLAT or ci_t[1] < -FLAT)}


def b3(cap: dict, gmc: dict, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """B3: gmc_cap holds where gmc does not. ``cap``: kappa -> {(B, G): (seeds,)}, ``gmc``: {(B, G): (seeds,)} at the
    mechanism cells. Per kappa, the learned share of gmc_cap minus gmc's, pooled over the cells, paired by seed;
    the hypothesis' p is the smaller of the two kappas' one-sided p-values, Bonferroni-doubled (either kappa may
    carry it). Testable only where gmc does not learn: gmc's pooled learned share at most 0.4. CONFIRMED: Holm-
    significant and the better kappa's interval above 0; REFUTED: every kappa's difference at or below 0."""
    cells = sorted(gmc)
    S = _check({**gmc, **{(k,) + c: v for k, t in cap.items() for c, v in t.items()}})
    pick = np.random.default_rng(seed).integers(0, S, size=(n_boot, S))
    per = {}
    for k, tab in cap.items():
        d = np.stack([np.asarray(tab[c], float) - np.asarray(gmc[c], float) for c in cells])  # (cells, seeds)
        obs = float(np.nanmean(d))
        dist = np.nanmean(d[:, pick], axis=(0, 2))
        per[str(k)] = {"difference": obs, "ci": _ci(dist), "p": float(np.mean(dist <= 0))}
    gmc_share = float(np.nanmean(np.stack([np.asarray(gmc[c], float) for c in cells])))
    best = min(per, key=lambda k: per[k]["p"])
    return {"per_kappa": per, "gmc_share": gmc_share, "testable": gmc_share <= 0.4,
            "p": min(1.0, 2 * per[best]["p"]), "best_kappa": best, "seeds": S,
            "extra_ok": bool(gmc_share <= 0.4 and per[best]["ci"][0] > 0),
            "refuted": bool(gmc_share <= 0.4 and all(v["difference"] <= 0 for v in per.values()))}


def b4(pc_d0: dict, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """B4: at d = 0 the final held-out pc depends on N only. The slope of the final pc on log2 G within each N.
    CONFIRMED ("N only"): TOST within +-:data:`MARGIN` Holm-significant, i.e. the interval inside +-MARGIN; REFUTED
    (the split matters at fixed N): the interval excludes 0 and the slope's size exceeds MARGIN."""
    S = _check(pc_d0)
    obs, dist = _boot(lambda p: strata_slope(pc_d0, lambda B, G: B * G, lambda B, G: G, p), S, n_boot, seed)
    ci = _ci(dist)
    p_tost = float(max(np.mean(dist <= -MARGIN), np.mean(dist >= MARGIN)))
    return {"slope": float(obs), "ci": ci, "margin": MARGIN, "p": p_tost, "seeds": S,
            "extra_ok": bool(-MARGIN <= ci[0] and ci[1] <= MARGIN),
            "refuted": bool((ci[0] > 0 or ci[1] < 0) and abs(obs) > MARGIN)}


def within_rho(mse: dict, outcome: dict, tiebreak: dict | None = None) -> tuple[float, int]:
    """The weighted mean over strata (correction, N) of Spearman's rho between minus the pairs' MSE of each split
    and the grid's outcome of that split (ties in the outcome broken by ``tiebreak``), each stratum weighing its
    number of splits less one; strata with one split, or a constant outcome after the tie-break, are left out.
    ``mse``, ``outcome``, ``tiebreak``: {(correction, N): {split: value}}. Returns (rho, strata used)."""
    num = den = 0.0
    used = 0
    for key, m in mse.items():
        splits = [s for s in m if s in outcome.get(key, {}) and math.isfinite(outcome[key][s])]
        if len(splits) < 2:
            continue
        y = np.array([outcome[key][s] + (1e-6 * tiebreak[key][s] if tiebreak else 0.0) for s in splits])
        x = -np.array([m[s] for s in splits])
        if np.ptp(y) == 0 or np.ptp(x) == 0:
            continue
        rho = 1.0 if len(splits) == 2 and (x[1] - x[0]) * (y[1] - y[0]) > 0 else (
            -1.0 if len(splits) == 2 else float(spearmanr(x, y).statistic))
        num += (len(splits) - 1) * rho
        den += len(splits) - 1
        used += 1
    return (num / den if den else math.nan), used


def b5(mse: dict, outcome: dict, tiebreak: dict | None = None, n_perm: int = N_PERM, seed: int = BOOT_SEED) -> dict:
    """B5: the frozen pairs' MSE ordering of the splits predicts the grid's. :func:`within_rho`, and its one-sided
    permutation p-value (the grid's outcomes permuted among the splits within each stratum). CONFIRMED: rho > 0
    and Holm-significant; REFUTED: rho at or below 0."""
    obs, used = within_rho(mse, outcome, tiebreak)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_perm):
        perm_out, perm_tb = {}, {}
        for key, o in outcome.items():
            ks = list(o)
            idx = rng.permutation(len(ks))
            perm_out[key] = {ks[i]: o[ks[j]] for i, j in enumerate(idx)}
            if tiebreak:
                perm_tb[key] = {ks[i]: tiebreak[key][ks[j]] for i, j in enumerate(idx)}
        r, _ = within_rho(mse, perm_out, perm_tb if tiebreak else None)
        hits += bool(math.isfinite(r) and r >= obs)
    p = (hits + 1) / (n_perm + 1) if math.isfinite(obs) else math.nan
    return {"rho": obs, "strata": used, "p": p, "extra_ok": bool(math.isfinite(obs) and obs > 0),
            "refuted": bool(math.isfinite(obs) and obs <= 0)}


def verdicts(results: dict) -> dict:
    """Each hypothesis' verdict from its test's record (``results``: name -> record, or None when its runs are not
    there yet): Holm over the whole family ``results`` names (B1-B5 as registered), a hypothesis not yet tested
    holding a place with no p-value (never rejected, so the others are not tested at a looser level than the
    registered family gives them); CONFIRMED needs Holm's rejection and the test's own condition (``extra_ok``),
    REFUTED the test's refutation, anything else INCONCLUSIVE; "not yet run" where the record is None."""
    rejected = holm({h: float(r["p"]) if r is not None else math.nan for h, r in results.items()}, ALPHA)
    out = {}
    for h, r in results.items():
        if r is None:
            out[h] = "not yet run"
        elif rejected[h] and r["extra_ok"]:
            out[h] = "CONFIRMED"
        elif r["refuted"]:
            out[h] = "REFUTED"
        else:
            out[h] = "INCONCLUSIVE"
    return out
