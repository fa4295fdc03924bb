"""The budget study's numbers as far as its runs have gone, for the report's section
(:mod:`studies.report.sections.budget`) and its figure (F27): the design's runs read once with the wall time their
summaries record, the runs each hypothesis reads, interim estimates (the decision rules' own statistics on the
finished runs, no p-value, no verdict), the frozen pairs' table at the plane's splits, the grid's cost estimated and
measured, and the descriptive numbers the report sets beside two published claims.

Nothing here writes: the verdicts are :mod:`studies.budget.analysis`'s, computed from the same table.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import analysis, rules
from .grids import BUDGET_ESTIMATORS, CAP_KAPPAS, DELAY, LEVEL, MECHANISM_CELLS, SEEDS, SGD_LEVEL, splits

PAIRS_COMMAND = "python -m studies.budget.pairs"
GRID_COMMAND = "python -m studies.run --grid budget --resume"
ANALYSIS_COMMAND = "python -m studies.budget.analysis --write"
PLANE_N = 128
"""The budget whose four splits of the design (4 x 32 ... 32 x 4) the pairs' summary compares."""
CRITICAL_SHARE = 0.8
"""Descriptive, not pre-registered: the smallest N from which every finished cell of that N and above learned in at
least this share of its finished runs (4 of 5 seeds) is read as the budget where learning becomes reliable."""
MECH = frozenset(MECHANISM_CELLS)
HYP_ARMS = {
    "B1": (("gmc", DELAY, None, None),),
    "B2": (("gmc", DELAY, None, None), ("topr", DELAY, None, None)),
    "B3": (("gmc", DELAY, None, MECH), *(("gmc_cap", DELAY, k, MECH) for k in CAP_KAPPAS)),
    "B4": (("gmc", 0, None, None),),
    "B5": tuple((e, DELAY, None, None) for e in BUDGET_ESTIMATORS),
}
"""The arms (estimator, delay, kappa, cells) whose runs each hypothesis reads, as :mod:`studies.budget.analysis`
reads them (Adam + clip 1e-4)."""


def design_table(read=None) -> pd.DataFrame:
    """:func:`studies.budget.analysis.design_runs` (``read``: its reader, default the run table's) with ``wall_s``,
    each finished run's wall seconds as its summary records them (NaN otherwise)."""
    from .plan import plan_rows

    read = read or analysis._read
    walls = {}

    def reading(run):
        rec = read(run)
        walls[Path(run)] = (rec or {}).get("wall_s", math.nan)
        return rec

    df = analysis.design_runs(reading)
    where = {r["name"]: Path(r["run"]) for r in plan_rows()}
    df["wall_s"] = [float(walls.get(where[n], math.nan)) if f else math.nan for n, f in zip(df["name"], df["finished"])]
    return df


def select(df: pd.DataFrame, estimator: str, delay: int, kappa=None, cells=None, level: str = LEVEL) -> pd.DataFrame:
    """The design's runs of one arm (the selection of :func:`studies.budget.analysis.cell_table`)."""
    sel = df[(df["estimator"] == estimator) & (df["delay"] == delay) & (df["level"] == level)]
    sel = sel[sel["kappa"].isna()] if kappa is None else sel[sel["kappa"] == kappa]
    if cells is not None:
        sel = sel[np.array([(b, g) in cells for b, g in zip(sel["B"], sel["G"])], dtype=bool)]
    return sel


def hypothesis_runs(df: pd.DataFrame, h: str) -> tuple[int, int]:
    """(finished, planned) runs of the cells hypothesis ``h`` reads."""
    sels = [select(df, e, d, k, c) for e, d, k, c in HYP_ARMS[h]]
    return sum(int(s["finished"].sum()) for s in sels), sum(len(s) for s in sels)


def partial_table(df: pd.DataFrame, estimator: str, delay: int, value: str = "learned", kappa=None,
                  cells=None) -> dict:
    """``{(B, G): (seeds,)}`` over the cells with at least one finished run, NaN where a seed has not finished: the
    tables of :mod:`studies.budget.rules` as far as the grid has run."""
    sel = select(df, estimator, delay, kappa, cells)
    sel = sel[sel["finished"]]
    return {(int(B), int(G)): x.set_index("seed").reindex(list(SEEDS))[value].to_numpy(float)
            for (B, G), x in sel.groupby(["B", "G"])}


def _slope(table: dict, stratum, coord) -> float | None:
    """The rules' slope on the finished runs; None while no stratum holds two cells."""
    try:
        return float(np.ravel(rules.strata_slope(table, stratum, coord))[0]) if table else None
    except ValueError:
        return None


def _count(df: pd.DataFrame, estimator: str, delay: int, kappa=None, cells=None, level: str = LEVEL) -> tuple:
    f = select(df, estimator, delay, kappa, cells, level)
    f = f[f["finished"]]
    return int(f["learned"].sum()), len(f)


def cell_means(df: pd.DataFrame, estimator: str, delay: int, value: str = "learned") -> dict:
    return {c: float(np.nanmean(v)) for c, v in partial_table(df, estimator, delay, value).items()}


def b5_partial(df: pd.DataFrame, pairs: pd.DataFrame | None) -> tuple[float, int] | None:
    """B5's statistic (:func:`studies.budget.rules.within_rho`) on the cells run so far: the pairs' median MSE per
    split against the finished runs' learned share, ties broken by their mean final pc."""
    if pairs is None:
        return None
    mse, out, tb = {}, {}, {}
    for e in BUDGET_ESTIMATORS:
        share, pcs = cell_means(df, e, DELAY), cell_means(df, e, DELAY, "pc_final")
        for N in analysis.B5_BUDGETS:
            m = pairs[(pairs["estimator"] == e) & (pairs["N"] == N)].groupby(["B", "G"])["rel_mse"].median()
            have = [c for c in share if c[0] * c[1] == N and c in m.index]
            mse[(e, N)] = {c: float(m.loc[c]) for c in have}
            out[(e, N)], tb[(e, N)] = {c: share[c] for c in have}, {c: pcs[c] for c in have}
    return rules.within_rho(mse, out, tb)


def interim(df: pd.DataFrame, pairs: pd.DataFrame | None) -> dict:
    """Per hypothesis, its rule's statistic on the runs finished so far (seeds missing in some cells: not a test)."""
    by_B, by_N = (lambda B, G: B), (lambda B, G: B * G)
    return {
        "B1": {"slope": _slope(partial_table(df, "gmc", DELAY), by_B, lambda B, G: G)},
        "B2": {"slope_gmc": _slope(partial_table(df, "gmc", DELAY), by_N, by_B),
               "slope_topr": _slope(partial_table(df, "topr", DELAY), by_N, by_B),
               "held_gmc": _slope(partial_table(df, "gmc", DELAY, "held"), by_N, by_B)},
        "B3": {"gmc": _count(df, "gmc", DELAY, cells=MECH),
               "cap": {k: _count(df, "gmc_cap", DELAY, k, MECH) for k in CAP_KAPPAS}},
        "B4": {"slope": _slope(partial_table(df, "gmc", 0, "pc_final"), by_N, lambda B, G: G)},
        "B5": {"rho": b5_partial(df, pairs)},
    }


def critical_n(df: pd.DataFrame, estimator: str, delay: int) -> int | None:
    """The smallest N from which every cell of that N and above with a finished run learned in at least
    :data:`CRITICAL_SHARE` of them (None: no such N yet)."""
    share = cell_means(df, estimator, delay)
    Ns = sorted({B * G for B, G in share})
    ok = [N for N in Ns if all(v >= CRITICAL_SHARE for c, v in share.items() if c[0] * c[1] >= N)]
    return ok[0] if ok else None


def mechanism_counts(df: pd.DataFrame) -> dict:
    """(learned, finished) at the mechanism cells: gmc and topr under Adam + clip and under SGD, gmc_cap per kappa."""
    out = {f"{lvl}/{e}": _count(df, e, DELAY, cells=MECH, level=lvl) for lvl in (LEVEL, SGD_LEVEL)
           for e in ("gmc", "topr")}
    out.update({f"cap{k:g}": _count(df, "gmc_cap", DELAY, k, MECH) for k in CAP_KAPPAS})
    return out


def costs(df: pd.DataFrame) -> dict:
    """The budget grid's own runs: the plan's estimate (:func:`studies.budget.plan.run_seconds`, the
    pre-registration's) for all of them and for those finished, and the finished runs' recorded wall seconds."""
    from .plan import run_seconds

    own = df[df["source"] == "budget"]
    done = own[own["finished"]]
    timed = done[np.isfinite(done["wall_s"].to_numpy(float))]
    return {"runs": len(own), "finished": len(done), "estimated_s": float(sum(run_seconds(N) for N in own["N"])),
            "estimated_finished_s": float(sum(run_seconds(N) for N in done["N"])), "timed": len(timed),
            "measured_s": float(timed["wall_s"].sum()),
            "estimated_timed_s": float(sum(run_seconds(N) for N in timed["N"]))}


def plane_splits(N: int | None = None) -> list[tuple[int, int]]:
    return [c for c in splits() if N is None or c[0] * c[1] == N]


def plane_mse(pairs: pd.DataFrame, estimators=BUDGET_ESTIMATORS) -> pd.DataFrame:
    """Per correction and split of the design at the pairs' budgets: the median ``rel_mse`` over the pairs given (those
    that passed their checks), their number, and the ratio to the best split of the same N on the plane."""
    rows = []
    for e in estimators:
        for N in sorted({int(n) for n in pairs["N"]}):
            cells = {}
            for B, G in plane_splits(N):
                x = pairs[(pairs["estimator"] == e) & (pairs["B"] == B) & (pairs["G"] == G)]["rel_mse"].dropna()
                if len(x):
                    cells[(B, G)] = (float(x.median()), len(x))
            best = min((v[0] for v in cells.values()), default=math.nan)
            rows += [{"estimator": e, "B": B, "G": G, "N": N, "rel_mse": m, "pairs": n, "ratio": m / best}
                     for (B, G), (m, n) in cells.items()]
    return pd.DataFrame(rows, columns=["estimator", "B", "G", "N", "rel_mse", "pairs", "ratio"])


def _median(values) -> float | None:
    return float(np.median(values)) if len(values) else None


def pairs_summary(folder: Path) -> dict:
    """The frozen-pair table as the report states it: ``missing`` (the paths of the files absent), or each pair's
    checks and the N = :data:`PLANE_N` comparison per correction over the pairs that passed them."""
    from schema.results import read_json

    absent = [str(p) for p in (folder / "pairs.csv", folder / "pairs.json") if not p.is_file()]
    if absent:
        return {"missing": absent}
    doc = read_json(folder / "pairs.json")
    tab = pd.read_csv(folder / "pairs.csv")
    pairs = {}
    for name, p in sorted((doc.get("pairs") or {}).items()):
        checks = p.get("checks") or {}
        pairs[name] = {"run": p.get("run"), "kl": p.get("drift_kl"), "ess": p.get("drift_ess"),
                       "target_zero": bool(p.get("target_zero")), "passed": checks.get("passed"),
                       "checks": {k: (all(c["agrees"] for c in v) if k == "direct_mc" else (v or {}).get("passed"))
                                  for k, v in checks.items() if k != "passed"},
                       "direct_mc": checks.get("direct_mc") or [], "S_w": {e: s.get("S_w", {}) for e, s in
                                                                          (p.get("summary") or {}).items()}}
    ok = [n for n, p in pairs.items() if p["passed"]]
    small, large = min(plane_splits(PLANE_N)), max(plane_splits(PLANE_N))
    per = {}
    at = tab[(tab["pair"].isin(ok)) & (tab["N"] == PLANE_N)]
    for e in dict.fromkeys(tab["estimator"]):
        x = at[at["estimator"] == e].set_index(["pair", "B", "G"])
        ratio = [x.loc[(n, *small), "rel_mse"] / x.loc[(n, *large), "rel_mse"] for n in ok
                 if (n, *small) in x.index and (n, *large) in x.index]
        between = {c: _median([x.loc[(n, *c), "between"] / (x.loc[(n, *c), "between"] + x.loc[(n, *c), "within"])
                               for n in ok if (n, *c) in x.index]) for c in (small, large)}
        sw = [p["S_w"][e]["32"] / p["S_w"][e]["4"] for p in (pairs[n] for n in ok)
              if e in p["S_w"] and "32" in p["S_w"][e] and "4" in p["S_w"][e]]
        per[e] = {"median": {c: float(x.xs(c, level=("B", "G"))["rel_mse"].median()) for c in plane_splits(PLANE_N)
                             if c in x.droplevel("pair").index},
                  "ratio": [float(np.median(ratio)), float(min(ratio)), float(max(ratio))] if ratio else None,
                  "between": between, "sw_ratio": _median(sw)}
    return {"missing": [], "pairs": pairs, "passed": ok, "small": small, "large": large, "per": per,
            "cost_s": doc.get("cost_s", {})}
