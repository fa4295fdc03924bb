"""The frozen early warning on a grid's runs (docs/PREREGISTRATION-WARNING.md, decision rule).

    python -m studies.warning --verdict budget     # -> <grid folder>/warning_verdicts.json

Reads ``studies/warning/frozen.json`` (and refuses to run if :data:`llm_runs.warning.FROZEN` says otherwise), every
complete run at the grid's positive delay, and decides CONFIRMED / NOT CONFIRMED / INCONCLUSIVE per the rule, with
the per-G table (hits, false alarms, median lead, 95% Clopper-Pearson intervals) and the ROC per G. Until every
planned run at positive delay is complete the verdict is "not yet run" and the numbers are marked interim.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .analysis import counts, firing_updates, table_at

FROZEN_FILE = Path(__file__).resolve().parent / "frozen.json"
VERDICTS_FILE = "warning_verdicts.json"
VERDICTS_FORMAT = "gmc-grpo-warning-verdicts/1"
MIN_STRATUM = 5
"""A stratum needs at least this many collapsed and this many held runs for its rates to be read."""
ROC_POINTS = 60


def frozen_rule(path: Path = FROZEN_FILE) -> dict:
    """The frozen rule, checked against the live monitors' copy (:data:`llm_runs.warning.FROZEN`)."""
    from llm_runs.warning import FROZEN
    from schema.io import loads_json

    rule = loads_json(Path(path).read_text())
    mine = {k: rule[k] for k in FROZEN}
    if mine != FROZEN:
        raise ValueError(f"{path} holds {mine}, llm_runs.warning.FROZEN {FROZEN}: the live rule is not the frozen one")
    return rule


def planned_runs(root: Path) -> set[str] | None:
    """The names of the runs at positive delay the grid under ``root`` plans (its ``sweep.json``; None: none
    recorded): the confirmation set, whatever else lies in the folder."""
    from grids.spec import recorded_grid

    try:
        grid = recorded_grid(root)
    except ValueError:
        return None
    return {c.name for c in grid.cells() if c.delay > 0}


def decide(recs: list[dict], rule: dict) -> dict:
    """The decision on ``recs`` (:func:`studies.warning.analysis.run_record` with the ``kl`` trace): per-G table,
    verdict, what each stratum misses, ROC per G."""
    dec = rule["decision"]
    have = [r for r in recs if np.isfinite(r["traces"]["kl"]).any()]
    missing = sorted(r["run"] for r in recs if r not in have)
    if not have:
        return {"verdict": "INCONCLUSIVE", "why": "no run with the statistic", "runs": 0, "missing_statistic": missing,
                "table": [], "misses": {}, "roc": {}}
    fire = firing_updates(have, rule["statistic"], rule["summary"], rule["window"], np.array([rule["threshold"]]))
    table = table_at(counts(have, fire), 0)
    misses = {}
    thin = []
    for row in table:
        if row["G"] == "all":
            continue
        if row["collapsed"] < MIN_STRATUM or row["held"] < MIN_STRATUM:
            thin.append(row["G"])
            continue
        m = []
        if not row["hit_rate"] >= dec["hit_rate_min"]:
            m.append(f"hit rate {row['hit_rate']:.3f} < {dec['hit_rate_min']}")
        if not row["false_alarm_rate"] <= dec["false_alarm_max"]:
            m.append(f"false-alarm rate {row['false_alarm_rate']:.3f} > {dec['false_alarm_max']}")
        if not row["lead_median"] >= dec["lead_median_min"]:
            m.append(f"median lead {row['lead_median']} < {dec['lead_median_min']} updates")
        if m:
            misses[str(row["G"])] = m
    if thin:
        verdict = "INCONCLUSIVE"
        why = f"fewer than {MIN_STRATUM} collapsed or held runs at G = {', '.join(map(str, thin))}"
    else:
        verdict = "NOT CONFIRMED" if misses else "CONFIRMED"
        why = "; ".join(f"G = {g}: {', '.join(m)}" for g, m in misses.items()) or "every stratum meets the rule"
    return {"verdict": verdict, "why": why, "runs": len(have), "missing_statistic": missing, "table": table,
            "misses": misses, "roc": roc(have, rule)}


def roc(recs: list[dict], rule: dict) -> dict:
    """Per G: hit rate and false-alarm rate over :data:`ROC_POINTS` thresholds (the frozen statistic and window), and
    the threshold that would have met the budget there with the most hits (exploratory; None: none)."""
    from .analysis import thresholds

    taus = thresholds(recs, rule["statistic"], rule["summary"], rule["window"])
    if len(taus) > ROC_POINTS:
        taus = taus[np.linspace(0, len(taus) - 1, ROC_POINTS).round().astype(int)]
    c = counts(recs, firing_updates(recs, rule["statistic"], rule["summary"], rule["window"], taus))
    dec = rule["decision"]
    out = {}
    for g, v in c.items():
        hit = v["hits"] / v["collapsed"] if v["collapsed"] else np.full(len(taus), math.nan)
        fa = v["false_alarms"] / v["held"] if v["held"] else np.full(len(taus), math.nan)
        ok = (fa <= dec["false_alarm_max"]) & (v["lead_median"] >= dec["lead_median_min"])
        best = int(np.argmax(np.where(ok, hit, -1))) if ok.any() else None
        out[str(g)] = {"threshold": taus.tolist(), "hit_rate": np.asarray(hit, float).tolist(),
                       "false_alarm_rate": np.asarray(fa, float).tolist(),
                       "best_within_budget": None if best is None else {
                           "threshold": float(taus[best]), "hit_rate": float(hit[best]),
                           "false_alarm_rate": float(fa[best])}}
    return out


def verdict(grid: str, root: Path | None = None) -> dict:
    """The verdicts record of grid ``grid`` (its folder ``root``, default :func:`grids.grid_folder`)."""
    from grids import grid_folder

    rule = frozen_rule()
    root = Path(root) if root is not None else grid_folder(grid)
    from schema.sources import shown_path

    head = {"format": VERDICTS_FORMAT, "grid": grid, "folder": shown_path(root),  # never a machine's own path
            "rule": {k: rule[k] for k in ("statistic", "summary", "window", "threshold", "decision")}}
    if not root.is_dir():
        return {**head, "verdict": "not yet run", "why": f"{root} does not exist: the grid has no run yet",
                "interim": True, "complete": 0, "runs": 0, "planned": None, "table": []}
    recs = [r for r in read_records_in(root) if r["delay"] > 0]
    names = planned_runs(root)
    stray = sorted(r["run"] for r in recs if names is not None and r["run"] not in names)
    recs = [r for r in recs if names is None or r["run"] in names]  # a folder the grid does not plan is no evidence
    planned = None if names is None else len(names)
    rec = decide(recs, rule) if recs else {"verdict": "INCONCLUSIVE", "why": "no complete run", "table": []}
    if stray:
        rec = {**rec, "not_planned": stray}
    interim = planned is None or len(recs) < planned
    if interim:
        rec = {**rec, "interim_verdict": rec["verdict"], "interim_why": rec["why"], "verdict": "not yet run",
               "why": f"{len(recs)} of {planned if planned is not None else '?'} planned runs at positive delay are "
                      f"complete; interim numbers on the runs so far ({rec['why']})"}
    return {**head, "interim": interim, "complete": len(recs), "planned": planned, **rec,
            "pair_invariance": pair_invariance(root)}


def pair_invariance(root: Path) -> dict | None:
    """The invariance test on the frozen pairs' pools (:func:`studies.warning.pairs.invariance`) from the grid
    folder's ``pair_warning_candidates.csv`` (None where it is not there: ``python -m studies.warning --pairs``)."""
    import pandas as pd

    from .pairs import CSV_NAME, invariance

    path = Path(root) / CSV_NAME
    return invariance(pd.read_csv(path).to_dict("records")) if path.is_file() else None


def read_records_in(root: Path) -> list[dict]:
    """:func:`studies.warning.analysis.run_record` (``kl`` only) of every run under ``root``."""
    from schema.results import metrics_path, run_dirs

    from .analysis import run_record

    out = []
    for run in run_dirs(root):
        if metrics_path(run) is None:
            continue
        r = run_record(run, ("kl",))
        if r is not None:
            out.append(r)
    return out


def summary_lines(rec: dict) -> list[str]:
    mark = (f" [INTERIM: {rec.get('complete', 0)} of {rec['planned'] if rec.get('planned') is not None else '?'} "
            "planned runs]") if rec.get("interim", True) else ""
    lines = [f"early warning on {rec['grid']}: {rec['verdict']}{mark} ({rec['why']})"]
    for row in rec.get("table", []):
        hi, fa = row["hit_ci"], row["false_alarm_ci"]
        lines.append(f"  G = {row['G']!s:>3}: hits {row['hits']}/{row['collapsed']} [{hi[0]:.2f}, {hi[1]:.2f}], "
                     f"false alarms {row['false_alarms']}/{row['held']} [{fa[0]:.2f}, {fa[1]:.2f}], "
                     f"median lead {row['lead_median']}")
    return lines


def _main_verdict(grid: str, out: Path | None = None) -> int:
    from grids import grid_folder
    from schema.io import check_output, write_json

    try:
        if out is not None:
            check_output(out)
        else:  # the grid's own file, once it exists: a file of that name the toolkit did not write is kept
            if grid_folder(grid).is_dir():
                check_output(grid_folder(grid) / VERDICTS_FILE)
        rec = verdict(grid)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(rec)))
    folder = grid_folder(grid)
    path = Path(out) if out is not None else folder / VERDICTS_FILE
    if out is None and not folder.is_dir():
        print(f"(no verdicts file written: {folder} does not exist yet)")
        return 0
    write_json(path, rec)
    print(f"wrote {path}")
    return 0
