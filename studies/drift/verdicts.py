"""The drift study's pre-registered verdicts D1-D4, D6 and D7 (docs/PREREGISTRATION-DRIFT.md) on the drift map
(:mod:`studies.common.drift_map`); D5 is :mod:`studies.common.d5`. :func:`studies.drift.analysis.analyse` calls them."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from grids.run_table import ALPHA, BOOT_SEED, MARGIN, bootstrap, grid_folder, holm, p_below
from stats import fisher_greater
from studies.common.drift_map import AXIS, N_BOOT, SHARE, boundaries_overlap, find_boundary

D7_GAIN_MARGIN = 0.02


def _not_run(why: str) -> dict:
    return {"verdict": "INCONCLUSIVE", "why": f"not yet run: {why}"}


def _runs_named(root: Path, pattern: str) -> list[Path]:
    """The runs under ``root`` whose names match the glob ``pattern``, sorted: folders or runs of its packed
    tables alike (:func:`schema.results.run_folders`; a packed run has no folder to glob)."""
    from fnmatch import fnmatchcase

    from schema.results import run_folders

    return [r for r in run_folders(root) if fnmatchcase(r.name, pattern)]


def adam_study_drift(runs_mech: pd.DataFrame | None = None) -> float:
    """The Adam study's drift level: the median over seeds of the early KL of the mechanism grid's
    unclipped-Adam gmc runs at d = 64."""
    from llm_runs.drift import summary
    from schema.results import read_run

    vals = []
    for run in _runs_named(grid_folder("mechanism"), "long-adam-gmc-d64-s*"):
        _, m = read_run(run)
        vals.append(summary(m, 64)[AXIS])
    return float(np.median(vals)) if vals else math.nan


def d1(bounds, cells, adam_level: float) -> dict:
    sgd, clip = find_boundary(bounds, "gmc", "sgd"), find_boundary(bounds, "gmc", "adamclip")
    if sgd is None or clip is None:
        return _not_run("GMC's levels under both optimisers")
    c = cells[cells["estimator"] == "gmc"]
    s_rows, a_rows = c[c["family"] == "sgd"], c[c["family"] == "adamclip"]
    refute = []
    for _, s in s_rows.iterrows():
        for _, a in a_rows.iterrows():
            if s["drift"] >= a["drift"] and s["stable_share"] >= SHARE and a["stable_share"] < SHARE:
                ks, ka = round(s["stable_share"] * s["n"]), round(a["stable_share"] * a["n"])
                p = fisher_greater([[ks, s["n"] - ks], [ka, a["n"] - ka]])
                refute.append({"sgd_level": s["level"], "adamclip_level": a["level"], "p": p})
    high = s_rows[s_rows["drift"] >= adam_level]
    second = None if high.empty else bool((high["stable_share"] < SHARE).all())
    overlap = boundaries_overlap(sgd, clip)
    numbers = {"boundary_sgd": [sgd["boundary"], sgd["low"], sgd["high"], sgd["censored"]],
               "boundary_adamclip": [clip["boundary"], clip["low"], clip["high"], clip["censored"]],
               "adam_study_drift": adam_level, "sgd_levels_at_or_above_it": high["level"].tolist(),
               "refuting_pairs": refute}
    if any(x["p"] < ALPHA for x in refute):
        return {"verdict": "REFUTED", **numbers}
    if overlap and second in (True, None):
        return {"verdict": "CONFIRMED", **numbers,
                "note": None if second else "no SGD level reaches the Adam study's drift: the overlap decides"}
    return {"verdict": "INCONCLUSIVE", **numbers}


def _jitter(bounds: list[dict], rng) -> list[float]:
    """Each boundary drawn from a normal on the log scale whose 95% range is its bootstrap interval
    (a boundary without an interval stays put)."""
    out = []
    for b in bounds:
        lo, hi = b["low"], b["high"]
        if None in (lo, hi) or lo <= 0:
            out.append(b["boundary"])
        else:
            out.append(math.exp(rng.normal(math.log(b["boundary"]), max((math.log(hi) - math.log(lo)) / 3.92, 1e-9))))
    return out


def d2(bounds) -> dict:
    from studies.drift.grids import DRIFT_ESTIMATORS

    pairs = [(find_boundary(bounds, e, "sgd"), find_boundary(bounds, e, "adamclip")) for e in DRIFT_ESTIMATORS]
    if any(a is None or b is None for a, b in pairs):
        return _not_run("every drift estimator's levels under both optimisers")
    x = [a["boundary"] for a, _ in pairs]
    y = [b["boundary"] for _, b in pairs]
    rho = float(stats.spearmanr(x, y).statistic)
    rng = np.random.default_rng(BOOT_SEED)
    boot = [stats.spearmanr(_jitter([a for a, _ in pairs], rng), _jitter([b for _, b in pairs], rng)).statistic
            for _ in range(N_BOOT)]
    lo, hi = float(np.nanquantile(boot, 0.025)), float(np.nanquantile(boot, 0.975))
    gmc = {f: find_boundary(bounds, "gmc", f) for f in ("sgd", "adamclip")}
    below = [f"{e} ({f})" for e in ("topr", "vespo") for f in ("sgd", "adamclip")
             if (b := find_boundary(bounds, e, f))["high"] is not None and gmc[f]["low"] is not None
             and b["high"] < gmc[f]["low"]]
    beyond = all(find_boundary(bounds, e, f)["boundary"] >= gmc[f]["boundary"] for e in ("topr", "vespo") for f in gmc)
    numbers = {"spearman": rho, "low": lo, "high": hi, "boundaries_sgd": dict(zip(DRIFT_ESTIMATORS, x)),
               "boundaries_adamclip": dict(zip(DRIFT_ESTIMATORS, y)), "below_gmc": below}
    if lo > 0 and beyond:
        return {"verdict": "CONFIRMED", **numbers}
    if hi <= 0 or below:
        return {"verdict": "REFUTED", **numbers}
    return {"verdict": "INCONCLUSIVE", **numbers}


def _arm_runs(runs, arm, est, seeds):
    return runs[(runs["arm"] == arm) & (runs["estimator"] == est) & runs["seed"].isin(seeds) & (runs["delay"] > 0)]


def _paired_vs_topr(runs, arm_rows, seeds):
    ref = runs[(runs["level"] == "adamclip0.0001") & (runs["estimator"] == "topr") & (runs["delay"] > 0)]
    a = arm_rows.set_index("seed")["pc_final"]
    b = ref.set_index("seed")["pc_final"]
    common = sorted(set(a.index) & set(b.index) & set(seeds))
    return bootstrap((a.loc[common] - b.loc[common]).to_numpy(float))


def step_arms(runs, seeds) -> dict:
    """D3, D4, D6 on ``seeds`` (the pre-registration needs 0-9)."""
    shares = {}
    for arm, est in (("ess", "gmc"), ("ess", "is"), ("ess", "topr"), ("vcpo", "seq_tis"), ("gmcstep", "gmc"),
                     ("skip0", "seq_geo_mask")):
        g = _arm_runs(runs, arm, est, seeds)
        shares[f"{arm}-{est}"] = {"n": len(g), "stable": int(g["stable"].sum()),
                                  "share": float(g["stable"].mean()) if len(g) else math.nan,
                                  "pc_final": float(g["pc_final"].mean()) if len(g) else math.nan,
                                  "lr_scale_median": float(g["lr_scale"].median()) if len(g) else math.nan}
    boots = {k: _paired_vs_topr(runs, _arm_runs(runs, arm, est, seeds), seeds)
             for k, (arm, est) in {"vcpo": ("vcpo", "seq_tis"), "ess-gmc": ("ess", "gmc"),
                                   "gmcstep": ("gmcstep", "gmc")}.items()}
    pv = {k: p_below(b, -MARGIN) for k, b in boots.items()}
    rejected = holm(pv)
    m = len(pv)
    adj = {}
    for k, b in boots.items():  # Holm-adjusted one-sided bound: the bound at the level Holm used for k
        rank = sorted(pv, key=lambda j: (math.isnan(pv[j]), pv[j])).index(k)
        level = ALPHA / (m - rank)
        d = b["dist"]
        adj[k] = {"mean": b["mean"], "n": b["n"], "low": float(np.quantile(d, level)) if len(d) else math.nan,
                  "high": float(np.quantile(d, 1 - level)) if len(d) else math.nan, "p": pv[k],
                  "noninferior": rejected[k]}
    return {"shares": shares, "vs_topr": adj}


def d3(arms) -> dict:
    s = arms["shares"]
    ok_share = all(s[k]["share"] >= SHARE for k in ("ess-gmc", "ess-is"))
    v = arms["vs_topr"]["vcpo"]
    numbers = {"ess-gmc": s["ess-gmc"], "ess-is": s["ess-is"], "vcpo_minus_topr": v}
    if ok_share and v["noninferior"]:
        return {"verdict": "CONFIRMED", **numbers}
    if not ok_share or (v["high"] < -MARGIN):
        return {"verdict": "REFUTED", **numbers}
    return {"verdict": "INCONCLUSIVE", **numbers}


def d4(arms) -> dict:
    s, v = arms["shares"]["gmcstep-gmc"], arms["vs_topr"]["gmcstep"]
    numbers = {"gmcstep": s, "gmcstep_minus_topr": v}
    if s["share"] >= SHARE and v["noninferior"]:
        return {"verdict": "CONFIRMED", **numbers}
    if s["share"] < SHARE or v["high"] < -MARGIN:
        return {"verdict": "REFUTED", **numbers}
    return {"verdict": "INCONCLUSIVE", **numbers}


def d6(arms, n_seeds: int) -> dict:
    s = arms["shares"]["skip0-seq_geo_mask"]
    if s["share"] >= SHARE:
        return {"verdict": "CONFIRMED", **s}
    return {"verdict": "REFUTED" if n_seeds >= 10 else "INCONCLUSIVE", **s}


def study_gain() -> float:
    """The staleness study's mean delay-0 gain at the long horizon (final pc minus warm-start pc)."""
    from schema.results import read_run

    g = []
    for run in _runs_named(grid_folder("primary"), "long-gmc-d0-s*"):
        _, m = read_run(run)
        pc = m["eval/heldout_pc"].dropna()
        g.append(float(pc.iloc[-1] - pc.iloc[0]))
    return float(np.mean(g)) if g else math.nan


def d7(runs, seeds, reference_gain: float) -> dict:
    from studies.common.settings import MECHANISM_ESTIMATORS
    from studies.drift.grids import DRIFT_LEVELS

    r = runs[runs["seed"].isin(seeds)]
    for lr in sorted(DRIFT_LEVELS["adamclip"]):
        level = f"adamclip{lr:g}"
        z = r[(r["level"] == level) & (r["delay"] == 0)]
        gain = float((z["pc_final"] - z["pc0"]).mean()) if len(z) else math.nan
        if math.isfinite(gain) and gain >= reference_gain - D7_GAIN_MARGIN:
            shares = {e: float(r[(r["level"] == level) & (r["estimator"] == e) & (r["delay"] > 0)]["stable"].mean())
                      for e in MECHANISM_ESTIMATORS}
            numbers = {"level": level, "delay0_gain": gain, "study_gain": reference_gain, "shares": shares}
            return {"verdict": "CONFIRMED" if all(v >= SHARE for v in shares.values()) else "REFUTED", **numbers}
    return {"verdict": "INCONCLUSIVE", "why": "no Adam + clip rate's delay-0 gain is within 0.02 of the study's",
            "study_gain": reference_gain}
