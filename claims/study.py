"""The staleness study's pre-registered analysis (docs/PREREGISTRATION.md), applied as written.

    python -m claims.study [--root results/llm/study] [--json results/llm/study/verdicts.json]

(``python -m figures.study``, the command the pre-registration names, is the same program:
:mod:`figures.study` binds every name of this module. The analysis sits in the claims layer so
that the verdict on the abstract's claim 7, :mod:`claims.abstract`, is computed from it.)

Reads every run folder under ``root`` through :func:`schema.results.read_run`, computes per run
the final held-out pc, the area under its pc curve and the stability flag
(:func:`schema.results.run_summary`, :data:`schema.results.UNSTABLE_RULE`), forms paired differences
across estimators of one seed, and prints a verdict (CONFIRMED / REFUTED / INCONCLUSIVE) for
each hypothesis with its numbers. Every constant of the rule is a module constant below, so
the file and the pre-registration cannot drift apart (the pre-registration quotes them).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import stats as _stats
from schema.io import dumps_json

ALPHA = 0.05  # two-sided level of every interval (95%)
MARGIN = 0.03  # the smallest difference in final held-out pc that matters (H2's non-inferiority margin)
N_RESAMPLES = 10_000  # bootstrap resamples (scipy.stats.bootstrap, percentile method)
BOOT_SEED = 20261201  # the bootstrap's random state
STABLE_FRACTION = 0.8  # a baseline is stable in a cell when at least this fraction of its seeds are stable
TRAJECTORY = ("gmc", "tic_mask")  # H3's pair: the gap between these trajectory corrections
H4_DIAGNOSTIC, H4_THRESHOLD, H4_WINDOW = "stale/chi2", 1.0, 5  # rolling median over 5 updates above chi^2 = 1
COLLAPSE_FRACTION = 0.5  # collapse: held-out pc below half its running maximum (and still there at the end)
MIN_COLLAPSES = 5  # H4 needs at least this many collapsed runs
MIN_SEEDS = 6  # the stopping rule: the analysis uses the seeds whose runs are all complete, at least 6


# --------------------------------------------------------------------------- reading


PRIMARY = "primary"
"""The grid the pre-registered hypotheses are about (``results/llm/study``)."""


def read_runs(root: str | Path, grid: str | tuple[str, ...] | None = None) -> pd.DataFrame:
    """One row per run under ``root`` (read by :func:`schema.results.read_run`): settings, horizon,
    final pc, AUC of pc, stability (:func:`schema.results.run_summary`), collapse timing. ``grid``:
    the grid(s) an analysis needs; a folder whose ``sweep.json`` names another is refused
    (:func:`llm_runs.grid_check.check_grid_folder`)."""
    rows = [r for r in (run_row(run) for run in _study_folders(root, grid)) if r is not None]
    if not rows:
        raise ValueError(f"no run folder (config.json + metrics.csv or metrics.csv.gz) under {root}")
    return pd.DataFrame(rows)


def run_row(run: Path) -> dict | None:
    """The row of one run folder in :func:`read_runs`' table (None: its metrics table is empty)."""
    from schema.results import horizon_of, read_run, read_run_config, run_summary

    settings, m = read_run(run)
    if m.empty:
        return None
    steps = int(settings["steps"])
    complete = bool(m["step"].max() >= steps)
    meta = {**settings, "run": run.name, "steps": steps, "complete": complete}
    verdict = run_summary(m.assign(**meta)).iloc[0]
    ev = m.dropna(subset=["eval/heldout_pc"]).sort_values("step")
    pc, t = ev["eval/heldout_pc"].to_numpy(float), ev["step"].to_numpy(float)
    auc = float(np.trapezoid(pc, t) / (t[-1] - t[0])) if len(t) > 1 and t[-1] > t[0] else math.nan
    return {**meta, "horizon": horizon_of(read_run_config(run)), "pc0": float(pc[0]), "pc_final": float(pc[-1]),
            "auc": auc, "stable": bool(verdict["stable"]), "masked_update_frac": masked_update_fraction(m),
            **collapse_timing(m)}


def masked_update_fraction(m: pd.DataFrame) -> float:
    """Of a run's updates with a learning signal (some group with a reward spread, so some advantage
    is not 0), the share whose gradient is exactly zero: the correction masked or weighted 0 every
    token or sequence that carried one. The optimiser still steps on them, as verl's and TRL's
    actors do, so Adam moves the policy on its momentum alone. NaN for a run without such updates."""
    if "train/grad_norm" not in m or "train/adv_zero_frac" not in m:
        return math.nan
    u = m.dropna(subset=["train/grad_norm", "train/adv_zero_frac"])
    u = u[u["train/adv_zero_frac"] < 1]
    return float((u["train/grad_norm"] == 0).mean()) if len(u) else math.nan


def _study_folders(root: str | Path, grid: str | tuple[str, ...] | None = None) -> list[Path]:
    """The run folders under ``root`` that belong to its grid (:func:`llm_runs.study.audit`), which
    must be one of ``grid`` when given. ``ValueError`` if it is no folder, another grid's, or holds a
    foreign run (never mixed in); a run folder without metrics is named on stderr (it is not
    analysed, and not dropped silently)."""
    from llm_runs.grid_check import audit, check_grid_folder

    check_grid_folder(root, grid)
    found = audit(root)
    found.raise_if_foreign(root)
    if found.no_metrics:
        print(f"warning: {len(found.no_metrics)} run folder(s) under {root} have a config.json but no metrics table "
              f"and are not analysed: {', '.join(found.no_metrics)}", file=sys.stderr)
    return found.runs


def collapse_timing(m: pd.DataFrame) -> dict:
    """``collapsed``, its step ``t_collapse`` (first evaluation with pc below COLLAPSE_FRACTION of
    the running maximum, the run ending below it too) and ``t_warning`` (first update whose
    rolling median of H4_DIAGNOSTIC over H4_WINDOW updates exceeds H4_THRESHOLD)."""
    ev = m.dropna(subset=["eval/heldout_pc"]).sort_values("step")
    pc, steps = ev["eval/heldout_pc"].to_numpy(float), ev["step"].to_numpy(int)
    run_max = np.maximum.accumulate(pc)
    below = pc < COLLAPSE_FRACTION * run_max
    collapsed = bool(len(pc) and below[-1])
    t_collapse = int(steps[np.argmax(below)]) if collapsed else None
    t_warning = None
    if H4_DIAGNOSTIC in m:
        upd = m.dropna(subset=[H4_DIAGNOSTIC]).sort_values("step")
        med = upd[H4_DIAGNOSTIC].rolling(H4_WINDOW, min_periods=H4_WINDOW).median()
        hit = upd["step"][med > H4_THRESHOLD]
        t_warning = int(hit.iloc[0]) if len(hit) else None
    return {"collapsed": collapsed, "t_collapse": t_collapse, "t_warning": t_warning}


# --------------------------------------------------------------------------- statistics


def paired(runs: pd.DataFrame, horizon: str, delay: int, a: str, b: str, metric: str = "pc_final") -> np.ndarray:
    """``metric(a) - metric(b)`` per seed, over the seeds where both runs are complete. At delay 0
    every estimator is the one delay-0 run of its seed (all schemes make the same update there)."""
    def values(e):
        sel = runs[(runs["horizon"] == horizon) & runs["complete"]]
        sel = sel[sel["delay"] == 0] if delay == 0 else sel[(sel["delay"] == delay) & (sel["estimator"] == e)]
        return sel.groupby("seed")[metric].first()

    x, y = values(a), values(b)
    common = x.index.intersection(y.index)
    return (x[common] - y[common]).to_numpy(float)


def bootstrap(diffs: np.ndarray, confidence: float = 1 - ALPHA) -> dict:
    """Mean paired difference, its percentile-bootstrap interval and the bootstrap distribution of the
    mean (:func:`stats.bootstrap_mean` with the study's :data:`N_RESAMPLES` and :data:`BOOT_SEED`)."""
    return _stats.bootstrap_mean(diffs, confidence, N_RESAMPLES, BOOT_SEED)


def share_ci(k: int, n: int, method: str = "exact") -> tuple[float, float]:
    """The 95% interval of a share k/n (:func:`stats.share_ci` at the study's :data:`ALPHA`)."""
    return _stats.share_ci(k, n, method, ALPHA)


p_below = _stats.p_below


def holm(pvalues: dict[str, float], alpha: float = ALPHA) -> dict[str, bool]:
    """Holm's step-down procedure (:func:`stats.holm`) at the study's level by default."""
    return _stats.holm(pvalues, alpha)


def seeds_for_power(sd_diff: float, delta: float = MARGIN, alpha: float = ALPHA, power: float = 0.8,
                    n_max: int = 10_000) -> int:
    """:func:`stats.seeds_for_power` at the study's margin and level by default."""
    return _stats.seeds_for_power(sd_diff, delta, alpha, power, n_max)


# --------------------------------------------------------------------------- the hypotheses


def _verdict(low: float, high: float, threshold: float = 0.0) -> str:
    if math.isnan(low) or math.isnan(high):
        return "INCONCLUSIVE"
    return "CONFIRMED" if low > threshold else "REFUTED" if high < threshold else "INCONCLUSIVE"


def _interval(boot: dict) -> dict:
    return {k: boot[k] for k in ("n", "mean", "low", "high")}


def stable_in_cell(runs: pd.DataFrame, horizon: str, delay: int, estimator: str) -> bool:
    sel = runs[(runs["horizon"] == horizon) & (runs["delay"] == delay) & (runs["estimator"] == estimator)
               & runs["complete"]]
    return bool(len(sel)) and float(sel["stable"].mean()) >= STABLE_FRACTION


CELL = ("horizon", "estimator", "delay")
"""The fields that name a cell of a study grid (a seed has one run per cell)."""


def planned_cells(grid: str, fields: tuple[str, ...] = CELL) -> set[tuple]:
    """``fields`` of every run one seed of grid ``grid`` (:data:`llm_runs.grids.STUDIES`) plans."""
    from llm_runs.grids import STUDIES

    first = STUDIES[grid].seeds[0]
    return {tuple(getattr(c, f) for f in fields) for c in STUDIES[grid].cells() if c.seed == first}


def whole_seeds(runs: pd.DataFrame, cells: set | None = None, fields: tuple[str, ...] = CELL) -> list[int]:
    """The seeds with a complete run in every cell (``fields``, by default horizon, estimator,
    delay): the ``cells`` given (a grid's plan, :func:`planned_cells`), else every cell that any
    seed has."""
    fields = list(fields)
    if cells is None:
        cells = set(runs[fields].itertuples(index=False, name=None))
    done = runs[runs["complete"]].groupby("seed")
    return sorted(int(s) for s, g in done if set(g[fields].itertuples(index=False, name=None)) >= cells)


def analyse(runs: pd.DataFrame) -> dict:
    """Every hypothesis' verdict and numbers (see docs/PREREGISTRATION.md), over the whole seeds
    only. With fewer than :data:`MIN_SEEDS` of them the stopping rule is not met: each verdict is
    NOT DECIDED, and the rule's outcome on the seeds so far is kept as ``interim_verdict``."""
    seeds = whole_seeds(runs)
    out = _analyse(runs[runs["seed"].isin(seeds)])
    for r in out.values():
        r["seeds"] = seeds
        if len(seeds) < MIN_SEEDS:
            r["interim_verdict"], r["verdict"] = r["verdict"], "NOT DECIDED"
            r["reason"] = f"{len(seeds)} whole seeds, fewer than the pre-registered minimum of {MIN_SEEDS}"
    return out


def stopping_points(runs: pd.DataFrame, step: int = 2) -> list[dict]:
    """The verdicts had the grid stopped earlier: :func:`analyse` on the first k whole seeds for
    k = MIN_SEEDS, MIN_SEEDS + step, ..., up to every whole seed (always included). A check of how
    much the verdicts depend on where the stopping rule cut the grid; not a pre-registered test.
    One record per k: ``seeds`` (k), and per hypothesis its verdict and headline interval."""
    seeds = whole_seeds(runs)
    counts = sorted({*range(MIN_SEEDS, len(seeds), step), len(seeds)}) if len(seeds) >= MIN_SEEDS else []
    out = []
    for k in counts:
        res = analyse(runs[runs["seed"].isin(seeds[:k])])
        rec = {"seeds": k}
        for h, r in res.items():
            rec[h] = r["verdict"]
        rec["H1_interval"] = res["H1"]["gmc_minus_tic_mask"]
        rec["H2_stable"] = sorted(res["H2"]["baselines"])
        rec["H4_warned"] = (res["H4"]["warned_before_collapse"], res["H4"]["collapsed_runs"])
        out.append(rec)
    return out


def _analyse(runs: pd.DataFrame) -> dict:
    out = {}
    dmax = int(runs.loc[runs["delay"] > 0, "delay"].max()) if (runs["delay"] > 0).any() else 0
    # H1: GMC's final held-out pc exceeds TIC-mask's at the largest delay, long horizon.
    b = bootstrap(paired(runs, "long", dmax, "gmc", "tic_mask"))
    out["H1"] = {"verdict": _verdict(b["low"], b["high"]), "delay": dmax, "gmc_minus_tic_mask": _interval(b)}
    # H2: GMC is at least as good as every stable baseline there (non-inferiority by MARGIN, Holm).
    baselines = sorted(e for e in runs.loc[(runs["horizon"] == "long") & (runs["delay"] == dmax), "estimator"].unique()
                       if e != "gmc" and stable_in_cell(runs, "long", dmax, e))
    boots = {e: bootstrap(paired(runs, "long", dmax, "gmc", e)) for e in baselines}
    p_noninf = {e: p_below(bt, -MARGIN) for e, bt in boots.items()}  # H0: gmc - e <= -MARGIN
    p_worse = {e: 1.0 - p_below(bt, 0.0) for e, bt in boots.items()}  # H0: gmc - e >= 0
    noninf, worse = holm(p_noninf), holm(p_worse)
    if not baselines:
        v2 = "INCONCLUSIVE"
    elif all(noninf.values()):
        v2 = "CONFIRMED"
    elif any(worse.values()):
        v2 = "REFUTED"
    else:
        v2 = "INCONCLUSIVE"
    out["H2"] = {"verdict": v2, "delay": dmax, "margin": MARGIN,
                 "baselines": {e: {**_interval(boots[e]), "p_noninferior": p_noninf[e], "noninferior": noninf[e],
                                   "p_worse": p_worse[e], "worse": worse[e]} for e in baselines},
                 "unstable_excluded": sorted(set(runs.loc[(runs["horizon"] == "long") & (runs["delay"] == dmax),
                                                          "estimator"]) - set(baselines) - {"gmc"})}
    # H3: the gap between trajectory corrections (GMC - TIC-mask) grows with H (long minus short, paired by seed).
    a, c = TRAJECTORY
    g_long = _per_seed(runs, "long", dmax, a, c)
    g_short = _per_seed(runs, "short", dmax, a, c)
    common = g_long.index.intersection(g_short.index)
    b3 = bootstrap((g_long[common] - g_short[common]).to_numpy(float))
    out["H3"] = {"verdict": _verdict(b3["low"], b3["high"]), "delay": dmax, "pair": list(TRAJECTORY),
                 "long_gap_minus_short_gap": _interval(b3)}
    # H4: the diagnostic crossing its threshold precedes collapse.
    pos = runs[(runs["delay"] > 0) & runs["complete"]]
    col = pos[pos["collapsed"]]
    warned_first = [(r.t_warning is not None and not _nan(r.t_warning) and r.t_warning < r.t_collapse)
                    for r in col.itertuples()]
    k, n = int(sum(warned_first)), len(warned_first)
    quiet = pos[~pos["collapsed"]]
    false_alarms = int(sum(t is not None and not _nan(t) for t in quiet["t_warning"]))
    if n < MIN_COLLAPSES:
        v4, ci = "INCONCLUSIVE", (math.nan, math.nan)
    else:
        ci = share_ci(k, n)
        v4 = "CONFIRMED" if ci[0] > 0.5 else "REFUTED" if ci[1] < 0.5 else "INCONCLUSIVE"
    out["H4"] = {"verdict": v4, "diagnostic": H4_DIAGNOSTIC, "threshold": H4_THRESHOLD, "collapsed_runs": n,
                 "warned_before_collapse": k, "ci": list(ci), "false_alarms": false_alarms,
                 "non_collapsed_runs": len(quiet)}
    return out


def _nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _per_seed(runs, horizon, delay, a, b) -> pd.Series:
    sel = runs[(runs["horizon"] == horizon) & (runs["delay"] == delay) & runs["complete"]]
    x = sel[sel["estimator"] == a].groupby("seed")["pc_final"].first()
    y = sel[sel["estimator"] == b].groupby("seed")["pc_final"].first()
    common = x.index.intersection(y.index)
    return x[common] - y[common]


def differences_table(runs: pd.DataFrame, reference: str = "gmc", metric: str = "pc_final") -> pd.DataFrame:
    """GMC minus each estimator, per horizon and positive delay: mean paired difference and 95% interval."""
    rows = []
    for (h, d), g in runs[runs["delay"] > 0].groupby(["horizon", "delay"]):
        for e in sorted(set(g["estimator"]) - {reference}):
            b = bootstrap(paired(runs, h, int(d), reference, e, metric))
            rows.append({"horizon": h, "delay": int(d), "baseline": e, **_interval(b),
                         "baseline_stable": stable_in_cell(runs, h, int(d), e)})
    return pd.DataFrame(rows)


DIFFERENCE_METRICS = ("pc_final", "auc")
"""The metrics of the report's difference table and F10."""


def differences(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`differences_table` of every metric of :data:`DIFFERENCE_METRICS`, stacked (column
    ``metric``), with the exploratory estimators' rows (:func:`with_exploratory`, column
    ``exploratory``) after the study's: computed once per runs frame (kept in ``runs.attrs``), read
    by F10, its caption and the report."""
    tab = runs.attrs.get("differences")
    if tab is None:
        both, extra = with_exploratory(runs), exploratory_estimators(runs)
        tab = pd.concat([differences_table(both, metric=m).assign(metric=m) for m in DIFFERENCE_METRICS],
                        ignore_index=True)
        tab["exploratory"] = tab["baseline"].isin(extra) if len(tab) else pd.Series(dtype=bool)
        runs.attrs["differences"] = tab
    return tab


# --------------------------------------------------------------------------- grids paired with the study


def read_paired(root: str | Path, primary: pd.DataFrame) -> pd.DataFrame:
    """The runs of a grid that pairs with the study (``Study.pairs_with``; the 2025-2026 corrections,
    ``python -m llm_runs.study --grid peers_2025``), to set beside ``primary`` (the study's runs,
    ``attrs["source"]`` their folder, ``attrs["seeds"]`` its whole seeds) as exploratory rows: not
    part of the pre-registered hypotheses. Only the seeds whole in both grids are kept (every run
    the grid's plan holds for the seed complete); ``attrs["seeds"]`` lists them.

    ``ValueError`` if a run started from another warm start than the study's runs with its key (its
    seed would not be paired, :func:`llm_runs.grid_check.check_pairing`), or if the grid runs an
    estimator the study has (two runs of one cell)."""
    from llm_runs.grid_check import audit, check_grid_folder, check_pairing
    from llm_runs.grids import STUDIES

    paired = tuple(n for n, s in STUDIES.items() if STUDIES[PRIMARY].out in s.pairs_with)
    check_grid_folder(root, paired)
    check_pairing(root, primary.attrs["source"])
    runs = read_runs(root, paired)
    clash = sorted(set(runs.loc[runs["delay"] > 0, "estimator"]) & set(primary["estimator"]))
    if clash:
        raise ValueError(f"{root} runs estimator(s) {clash}, which the study under {primary.attrs['source']} has: "
                         f"one cell would have two runs")
    grid = audit(root).grid
    cells = planned_cells(grid) if grid in STUDIES else None
    primary_seeds = primary.attrs.get("seeds", sorted(primary["seed"].unique()))
    seeds = [s for s in whole_seeds(runs, cells) if s in primary_seeds]
    out = runs[runs["seed"].isin(seeds) & (runs["delay"] > 0)].reset_index(drop=True).assign(exploratory=True)
    out.attrs.update(source=str(root), seeds=seeds)
    return out


def exploratory_estimators(runs: pd.DataFrame) -> list[str]:
    """The estimators of the exploratory runs set beside ``runs`` (``attrs["exploratory"]``)."""
    extra = runs.attrs.get("exploratory")
    return sorted(set(extra["estimator"])) if extra is not None and len(extra) else []


def with_exploratory(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` and the exploratory runs set beside them (``attrs["exploratory"]``, :func:`read_paired`)
    in one frame (column ``exploratory``), for the tables that list both; never for the hypotheses."""
    extra = runs.attrs.get("exploratory")
    base = pd.DataFrame(runs, copy=True)
    base.attrs = {}
    base["exploratory"] = False
    if extra is None or not len(extra):
        return base
    extra = pd.DataFrame(extra, copy=True)
    extra.attrs = {}
    return pd.concat([base, extra], ignore_index=True)


def plain_answer_facts(runs: pd.DataFrame) -> dict:
    """The study's answer so far, by rule: at the largest positive delay of the long horizon (else
    the first horizon with one), the stable estimators ranked by mean final pc, GMC's paired
    difference to the best other stable one, and the unstable ones (whole seeds only). The report
    renders it (:func:`figures.report.plain_answer`)."""
    seeds = runs.attrs.get("seeds", sorted(runs["seed"].unique()))
    pos = runs[(runs["delay"] > 0) & runs["complete"]]
    h = "long" if (pos["horizon"] == "long").any() else (sorted(pos["horizon"].unique()) or [None])[0]
    facts = {"seeds": list(seeds), "interim": len(seeds) < MIN_SEEDS, "horizon": h,
             "stable_fraction": STABLE_FRACTION}
    if h is None:
        return facts
    cell = pos[pos["horizon"] == h]
    d = int(cell["delay"].max())
    means = cell[cell["delay"] == d].groupby("estimator")["pc_final"].mean()
    stable = [e for e in means.index if stable_in_cell(runs, h, d, e)]
    ranked = sorted(stable, key=lambda e: -means[e])
    facts.update(delay=d, ranked=[(e, float(means[e])) for e in ranked],
                 unstable=[e for e in means.index if e not in stable], gmc_present="gmc" in means.index,
                 gmc_stable="gmc" in stable)
    others = [e for e in ranked if e != "gmc"]
    if "gmc" in means.index and others:
        facts["gmc_vs_best"] = {"best": others[0], **_interval(bootstrap(paired(runs, h, d, "gmc", others[0])))}
    extra = exploratory_estimators(runs)
    if extra:  # ranked over the seeds whole in both grids, every estimator on the same seeds
        xseeds = list(runs.attrs["exploratory"].attrs.get("seeds", []))
        both = with_exploratory(runs)
        both = both[both["seed"].isin(xseeds)]
        sel = both[(both["horizon"] == h) & (both["delay"] == d) & both["complete"]]
        m = sel.groupby("estimator")["pc_final"].mean()
        ok = sorted((e for e in m.index if stable_in_cell(both, h, d, e)), key=lambda e: -m[e])
        masked = sel.groupby("estimator")["masked_update_frac"].mean()
        facts["exploratory"] = {"seeds": xseeds, "estimators": extra,
                                "ranked": [(e, float(m[e]), e in extra) for e in ok],
                                "unstable": [e for e in extra if e in m.index and e not in ok],
                                "absent": [e for e in extra if e not in m.index],
                                "masked_updates": {e: float(masked[e]) for e in extra if e in masked.index}}
    return facts


HYPOTHESES = {
    "H1": "GMC's final held-out pc exceeds TIC-mask's at the largest delay, long horizon",
    "H2": "GMC is at least as good as every stable baseline there (non-inferiority by the margin, Holm)",
    "H3": "the gap between trajectory corrections (GMC - TIC-mask) grows with the horizon",
    "H4": "the trajectory chi^2 crossing its threshold precedes collapse",
}
"""Each hypothesis in one line (docs/PREREGISTRATION.md states them in full)."""


# --------------------------------------------------------------------------- traces and the bound


def read_traces(root: str | Path, columns: tuple[str, ...], grid: str | tuple[str, ...] | None = None) -> pd.DataFrame:
    """The update rows (step < steps) of every complete run under ``root``, long: run, horizon
    (label), H (tokens, :func:`schema.results.horizon_tokens`), estimator, delay, seed, G (group
    size), eps, step and ``columns`` (a column a run does not log reads as NaN). ``grid`` as in
    :func:`read_runs`."""
    from schema.results import horizon_of, horizon_tokens, read_run, read_run_config

    frames = []
    for run in _study_folders(root, grid):
        settings, m = read_run(run)
        steps = int(settings["steps"])
        if m.empty or m["step"].max() < steps:
            continue
        upd = m[m["step"] < steps]
        frame = pd.DataFrame({"step": upd["step"].to_numpy()})
        for c in columns:
            frame[c] = pd.to_numeric(upd[c], errors="coerce").to_numpy(float) if c in upd else math.nan
        cfg = read_run_config(run)
        frames.append(frame.assign(run=run.name, horizon=horizon_of(cfg), H=horizon_tokens(cfg),
                                   estimator=settings["estimator"], delay=int(settings["delay"]),
                                   seed=int(settings["seed"]), G=settings["group_size"], eps=settings["eps"]))
    if not frames:
        raise ValueError(f"no complete run folder (config.json + metrics) under {root}")
    return pd.concat(frames, ignore_index=True)


BOUND_COLUMNS = ("stale/mass_bias", "stale/mass_bias_bound")
"""The realised mass bias and THEORY §3's bound on it, logged per update (:mod:`llm_runs.theory`)."""


def bound_ratio(realised, bound) -> np.ndarray:
    """realised / bound per update, 0/0 read as 0 (no bias, none allowed: the bound holds)."""
    r, b = np.asarray(realised, float), np.asarray(bound, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((r == 0) & (b == 0), 0.0, r / b)


RAW_BOUND_COLUMNS = ("stale/mass_bias", "stale/chi2", "stale/mu4")
"""The raw per-update columns a bound is recomputed from (:func:`recomputed_bound`)."""

BOUND_FORMS = ("logged", "tight", "theorem2")
"""``logged``: the column the trainer wrote (:data:`llm_runs.theory.BOUND_FORM`, Theorem 2's form);
``tight`` / ``theorem2``: recomputed from :data:`RAW_BOUND_COLUMNS` with :func:`bounds.mass_bound`."""


def recomputed_bound(tr: pd.DataFrame, form: str) -> np.ndarray:
    """Per row of ``tr`` (traces with :data:`RAW_BOUND_COLUMNS`, G and eps): the one table's bound
    (:func:`bounds.mass_bound`, ``form``) at the batch's plug-in chi^2 clamped at 0 and mu_4, by the
    trainer's own rule (:func:`llm_runs.theory.mass_bias_bound`: NaN where chi^2 is not finite, or
    a needed mu_4 is not finite and >= 0)."""
    from bounds import mass_bound, mass_bound_name
    from bounds.numeric import twin

    missing = [c for c in ("stale/chi2", "stale/mu4", "G", "eps", "estimator") if c not in tr]
    if missing:
        raise ValueError(f"recomputing the {form!r} bound needs the trace columns {', '.join(missing)}")
    out = np.full(len(tr), np.nan)
    chi2, mu4 = tr["stale/chi2"].to_numpy(float), tr["stale/mu4"].to_numpy(float)
    for (e, G, eps), idx in tr.groupby(["estimator", "G", "eps"], sort=False).indices.items():
        name = mass_bound_name(e, form)
        if name is None:
            continue
        ok = np.isfinite(chi2[idx])
        if "mu4" in twin(name).params:
            ok &= np.isfinite(mu4[idx]) & (mu4[idx] >= 0)
        sel = idx[ok]
        out[sel] = mass_bound(e, np.maximum(chi2[sel], 0.0), np.nan_to_num(mu4[sel]), int(G), float(eps), form=form)
    return out


def bound_table(runs_root: str | Path | pd.DataFrame, form: str = "logged") -> pd.DataFrame:
    """Per horizon, positive delay and trajectory scheme that logs both :data:`BOUND_COLUMNS`:
    the number of updates (both finite, over every complete run), the fraction where the realised
    mass bias is at most the bound, the median and maximum of realised / bound
    (:func:`bound_ratio`; above 1: the bound fails) and the fraction of updates whose bound is 0
    (the batch's plug-in chi^2 was <= 0 and is clamped, :func:`llm_runs.theory.mass_bias_bound`:
    there any positive realised bias counts as a failure, ratio inf). ``runs_root`` is the study
    folder or the frame :func:`read_traces` made of it. ``form`` (:data:`BOUND_FORMS`): the logged
    bound, or the one table's bound in that form recomputed from the raw columns (the same updates
    are counted: those where the logged bound is finite)."""
    if form not in BOUND_FORMS:
        raise ValueError(f"unknown bound form {form!r}; valid: {', '.join(BOUND_FORMS)}")
    cols = BOUND_COLUMNS + RAW_BOUND_COLUMNS[1:]
    tr = runs_root if isinstance(runs_root, pd.DataFrame) else read_traces(runs_root, cols, PRIMARY)
    real, bnd = BOUND_COLUMNS
    tr = tr[(tr["delay"] > 0) & np.isfinite(tr[real]) & np.isfinite(tr[bnd])]
    if form != "logged":
        tr = tr.assign(**{bnd: recomputed_bound(tr, form)})
        tr = tr[np.isfinite(tr[bnd])]
    rows = []
    for (h, d, e), g in tr.groupby(["horizon", "delay", "estimator"], sort=True):
        ratio = bound_ratio(g[real], g[bnd])
        rows.append({"horizon": h, "delay": int(d), "scheme": e, "runs": int(g["run"].nunique()), "updates": len(g),
                     "holds_frac": float(np.mean(g[real].to_numpy() <= g[bnd].to_numpy())),
                     "ratio_median": float(np.median(ratio)), "ratio_max": float(np.max(ratio)),
                     "bound_zero_frac": float(np.mean(g[bnd].to_numpy() == 0))})
    return pd.DataFrame(rows, columns=["horizon", "delay", "scheme", "runs", "updates", "holds_frac",
                                       "ratio_median", "ratio_max", "bound_zero_frac"])


def is_verdicts_text(text: str) -> bool:
    """True for the text of a ``verdicts.json`` that :func:`main` wrote: an object of hypotheses
    (``H1``, ...), each a record with a ``verdict``."""
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return (isinstance(obj, dict) and bool(obj)
            and all(str(k).startswith("H") and isinstance(v, dict) and "verdict" in v for k, v in obj.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m claims.study", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=None, help="the study's run folders (default: llm/study under the results root)")
    p.add_argument("--json", default=None, help="also write the verdicts here")
    args = p.parse_args(argv)
    from schema.io import check_output
    from schema.results import results_root

    try:
        if args.json:
            check_output(args.json, legacy=is_verdicts_text)
        runs = read_runs(args.root or results_root() / "llm" / "study", PRIMARY)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    res = analyse(runs)
    for h, r in res.items():
        print(f"{h}: {r['verdict']}  " + dumps_json({k: v for k, v in r.items() if k != 'verdict'}, indent=None))
    print(differences_table(runs).to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if args.json:
        from schema.io import write_json

        write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
