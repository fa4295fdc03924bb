"""The drift map (docs/PREREGISTRATION-DRIFT.md): per correction and optimiser, each level's drift and stable
share, the failure boundary on the drift axis with its seed-bootstrap interval, the runs as points, and the
exact shared-parameter model's boundaries beside them. :mod:`studies.drift.analysis` reads the runs and
writes the map; :mod:`studies.drift.verdicts` and :mod:`studies.drift.beside` read it."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from grids.run_table import ALPHA, BOOT_SEED

SHARE = 0.80
"""A cell is stable when at least this share of its runs is (the pre-registration's 80%)."""
N_BOOT = 2000
AXIS = "kl_early"
PRE_AXIS = "kl_precollapse"
"""The early KL read before the run's collapse (:func:`studies.common.d5.precollapse_kl`): the map's axis for runs
that collapse after the early window, the 20 updates before the collapse for the others."""


def level_runs(runs: pd.DataFrame, seeds: list[int], delay0: bool = False) -> pd.DataFrame:
    """The complete level runs at positive delay on ``seeds``: what the map's cells, boundaries and points read
    (``delay0``: the levels' own delay-0 runs instead)."""
    delay = runs["delay"] == 0 if delay0 else runs["delay"] > 0
    return runs[runs["level"].notna() & delay & runs["seed"].isin(seeds) & runs["complete"]]


def cell_table(runs: pd.DataFrame, seeds: list[int], axis: str = AXIS) -> pd.DataFrame:
    """Per (family, level, estimator) at d = 64 on ``seeds``: n, stable share, level drift (median
    over seeds of the runs' early KL), mean final pc."""
    r = level_runs(runs, seeds)
    zero = level_runs(runs, seeds, delay0=True)
    out = []
    for (fam, level, est), g in r.groupby(["family", "level", "estimator"]):
        z = zero[(zero["level"] == level) & zero["seed"].isin(g["seed"])]
        out.append({"family": fam, "level": level, "estimator": est, "n": len(g),
                    "stable_share": float(g["stable"].mean()), "drift": float(g[axis].median()),
                    "pc_final": float(g["pc_final"].mean()),
                    "delay0_stable_share": float(z["stable"].mean()) if len(z) else math.nan, "delay0_n": len(z)})
    return pd.DataFrame(out, columns=["family", "level", "estimator", "n", "stable_share", "drift", "pc_final",
                                      "delay0_stable_share", "delay0_n"])


def boundary(levels: list[tuple[float, float]]) -> tuple[float | None, str | None]:
    """The drift at which the stable share first falls below :data:`SHARE`, from ``[(drift, share)]``:
    ordered by drift, interpolated in log drift between the last level at or above the share and the
    first below it. ``(max drift, "right")`` when none falls below; ``(min drift, "left")`` when the
    smallest already does."""
    lv = sorted((d, s) for d, s in levels if d is not None and math.isfinite(d) and d > 0)
    if not lv:
        return None, None
    for i, (d, s) in enumerate(lv):
        if s < SHARE:
            if i == 0:
                return d, "left"
            d0, s0 = lv[i - 1]
            frac = (s0 - SHARE) / (s0 - s)
            return float(math.exp(math.log(d0) + frac * (math.log(d) - math.log(d0)))), None
    return lv[-1][0], "right"


def bracket(levels: list[tuple[float, float]]) -> list[float] | None:
    """The two tested drifts an interpolated boundary (:func:`boundary`) lies between, ``[below, above]``;
    None for a censored boundary. No level was run between them: the boundary's place inside is the
    log-linear interpolation's, not a measurement."""
    lv = sorted((d, s) for d, s in levels if d is not None and math.isfinite(d) and d > 0)
    for i, (d, s) in enumerate(lv):
        if s < SHARE:
            return None if i == 0 else [float(lv[i - 1][0]), float(d)]
    return None


def resampled_boundary(by_level: dict, pick) -> float | None:
    """:func:`boundary` on the seeds ``pick`` (drawn with replacement; every run of a drawn seed counts once per
    draw): ``by_level`` maps each level to ``{seed: (drifts, stable flags)}`` of its runs. A level without a
    drawn seed is left out."""
    lv = []
    for per_seed in by_level.values():
        have = [per_seed[s] for s in pick if s in per_seed]
        if have:
            drift = np.concatenate([h[0] for h in have])
            stable = np.concatenate([h[1] for h in have])
            finite = drift[~np.isnan(drift)]  # as pandas' median, which skips NaN
            lv.append((float(np.median(finite)) if len(finite) else math.nan, float(stable.mean())))
    return boundary(lv)[0]


def boundaries(runs: pd.DataFrame, seeds: list[int], n_boot: int = N_BOOT, axis: str = AXIS) -> list[dict]:
    """Per (estimator, family): its levels, the boundary and a 95% seed-bootstrap percentile interval, on
    the drift column ``axis`` (the map's early KL; ``chi2_early`` for the chi^2 view)."""
    cells = cell_table(runs, seeds, axis)
    r = level_runs(runs, seeds)
    draws: dict[tuple, list] = {}

    def resamples(have: tuple) -> list:
        """Whole-seed resamples of the seeds ``have`` (the same draws for every correction with those seeds:
        the decisive seeds 5-9 exist for some cells only)."""
        if have not in draws:
            rng = np.random.default_rng(BOOT_SEED)
            draws[have] = ([rng.choice(have, size=len(have), replace=True) for _ in range(n_boot)]
                           if len(have) > 1 else [])
        return draws[have]

    out = []
    for (est, fam), g in cells.groupby(["estimator", "family"]):
        b, cens = boundary(list(zip(g["drift"], g["stable_share"])))
        sub = r[(r["estimator"] == est) & (r["family"] == fam)]
        by_level = {lv: {s: (x[axis].to_numpy(float), x["stable"].to_numpy(float)) for s, x in g2.groupby("seed")}
                    for lv, g2 in sub.groupby("level")}
        boot = [resampled_boundary(by_level, pick)
                for pick in resamples(tuple(s for s in seeds if s in set(sub["seed"])))]
        boot = [x for x in boot if x is not None]
        lo, hi = ((float(np.quantile(boot, ALPHA / 2)), float(np.quantile(boot, 1 - ALPHA / 2))) if boot
                  else (None, None))
        out.append({"estimator": est, "optimizer": fam, "boundary": b, "censored": cens, "low": lo, "high": hi,
                    "bracket": bracket(list(zip(g["drift"], g["stable_share"]))),
                    "levels": [{"level": x["level"], "drift": x["drift"], "stable_share": x["stable_share"],
                                "n": int(x["n"]), "pc_final": x["pc_final"],
                                "delay0_stable_share": x["delay0_stable_share"], "delay0_n": int(x["delay0_n"])}
                               for _, x in g.sort_values("drift").iterrows()]})
    return out


def find_boundary(bounds: list[dict], est: str, fam: str) -> dict | None:
    return next((b for b in bounds if b["estimator"] == est and b["optimizer"] == fam), None)


def boundaries_overlap(a: dict, b: dict) -> bool | None:
    if None in (a["low"], a["high"], b["low"], b["high"]):
        return None
    return a["low"] <= b["high"] and b["low"] <= a["high"]



def points(runs: pd.DataFrame, seeds: list[int]) -> list[dict]:
    """Every level run at d = 64 on ``seeds``: the map's points (early KL and chi^2, stable, final pc)."""
    r = level_runs(runs, seeds)
    return [{"run": x["run"], "estimator": x["estimator"], "optimizer": x["family"], "level": x["level"],
             "seed": int(x["seed"]), "drift": float(x[AXIS]), "chi2": float(x["chi2_early"]),
             "stable": bool(x["stable"]), "pc_final": float(x["pc_final"])}
            for _, x in r.sort_values(["family", "level", "estimator", "seed"]).iterrows()]


def exact_model() -> dict:
    """The exact shared-parameter model's prediction on the trajectory chi^2 axis
    (``results/sim/shared_collapse``, :func:`claims.shared_model.chi2_levels`): per optimiser and scheme,
    each step size's median chi^2 and share not collapsed, and the boundary by :func:`boundary`. Its
    collapse is the model's own rule (the objective falling below a fraction of its start), not the LLM's
    stability rule; the model has no TIC-mask, GSPO or VESPO. Empty when the sweep is absent."""
    from claims.shared_model import chi2_levels
    from schema.results import MissingResults, Sim, read_sim

    try:
        df = read_sim(Sim("shared_collapse"))
    except MissingResults:
        return {}
    out = []
    for (opt, est), g in chi2_levels(df).groupby(["optimizer", "scheme"]):
        b, cens = boundary(list(zip(g["chi2"], g["stable_share"])))
        out.append({"estimator": est, "optimizer": opt, "boundary": b, "censored": cens, "low": None, "high": None,
                    "levels": [{"lr": float(x["lr"]), "chi2": float(x["chi2"]),
                                "stable_share": float(x["stable_share"]),
                                "n": int(x["n"])} for _, x in g.sort_values("chi2").iterrows()]})
    return {"source": "results/sim/shared_collapse", "axis": "chi2", "boundaries": out}

