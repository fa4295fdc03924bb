"""The 2026 corrections on the drift map (docs/PREREGISTRATION-2026.md): N1-N3.

    python -m studies.corrections_2026 [--json results/llm/corrections_2026/verdicts.json]

Reads the grid ``corrections_2026`` and the drift map's committed runs at the same levels (the drift grid at
Adam + clip 3e-5 and SGD 3e-4, the mechanism grid's Adam + clip 1e-4 arm), one row per run exactly as the
drift study reads it (:func:`studies.drift.analysis.read`: the staleness study's stability rule, the early KL
per token). Each hypothesis is decided per correction as the pre-registration states it; where the text
leaves a choice (how N1's "at least as many seeds" and Holm meet, N3's interval), the rule applied is written
in the function deciding it and shown in the report beside the verdict.
"""
from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from estimators.losses import CORRECTIONS_2026

VERDICTS_FORMAT = "gmc-grpo-corrections-2026-verdicts/1"
LEVELS = ("adamclip3e-05", "adamclip0.0001", "sgd0.0003")
SEEDS = tuple(range(5))
REFERENCES = ("gmc", "topr", "tic_trunc", "is")
PREDICTED_HELD = {"ctpo": LEVELS, "minpro": LEVELS, "dispo": ("adamclip3e-05", "sgd0.0003")}
"""N1's predictions (the pre-registration's table): the levels where each correction is expected to hold beyond
GMC; the others carry no N1 prediction beyond "holds at 3e-5" (p3o) or "holds, does not learn" (trm)."""
PREDICTED_HELD_NOT_LEARNED = ("trm_k2", "trm_k3")


def read() -> pd.DataFrame:
    """Every run of the grid and the committed drift-map runs at :data:`LEVELS` (d = 64 and d = 0)."""
    from grids import grid_folder
    from studies.common.drift_runs import read as drift_read

    folders = {g: grid_folder(g) for g in ("corrections_2026", "drift", "mechanism")}
    runs = drift_read(folders)
    return runs[runs["level"].isin(LEVELS) & runs["seed"].isin(SEEDS) & runs["complete"]].reset_index(drop=True)


def _cell(runs: pd.DataFrame, est: str, level: str) -> pd.DataFrame:
    return runs[(runs["estimator"] == est) & (runs["level"] == level) & (runs["delay"] > 0)].sort_values("seed")


def whole(runs: pd.DataFrame) -> list[str]:
    """The cells (correction or reference, level) missing a seed of :data:`SEEDS`."""
    missing = []
    for est in (*CORRECTIONS_2026, *REFERENCES):
        for level in LEVELS:
            have = set(_cell(runs, est, level)["seed"])
            if have != set(SEEDS):
                missing.append(f"{est} at {level} ({len(have)} of {len(SEEDS)} seeds)")
    return missing


def counts(runs: pd.DataFrame) -> list[dict]:
    """Per (correction or reference, level): stable count, mean gain over the warm start, the level's drift."""
    out = []
    for est in (*CORRECTIONS_2026, *REFERENCES):
        for level in LEVELS:
            g = _cell(runs, est, level)
            if not len(g):
                continue
            out.append({"estimator": est, "level": level, "n": len(g), "stable": int(g["stable"].sum()),
                        "gain": float((g["pc_final"] - g["pc0"]).mean()), "drift": float(g["kl_early"].median())})
    return out


def n1(runs: pd.DataFrame) -> dict:
    """N1 (held), per correction c. At each level, one-sided Fisher exact tests of c's stable count against
    GMC's (5 seeds each), both directions, Holm over the seven corrections at that level. Applied as:
    REFUTED where at some level c is significantly less often stable than GMC; CONFIRMED where c is stable in
    at least as many seeds as GMC at every level and, at every level where GMC is not 5 of 5, c is 5 of 5 and
    significantly more often stable than GMC (Holm); INCONCLUSIVE otherwise (with 5 seeds a difference is
    decided only at 4 or 5 of 5 against 0: the power the pre-registration states)."""
    from grids.run_table import ALPHA
    from stats import fisher_greater, holm

    per: dict[str, dict] = {c: {"levels": {}} for c in CORRECTIONS_2026}
    for level in LEVELS:
        g = _cell(runs, "gmc", level)
        gs, gn = int(g["stable"].sum()), len(g)
        better, worse = {}, {}
        for c in CORRECTIONS_2026:
            x = _cell(runs, c, level)
            cs, cn = int(x["stable"].sum()), len(x)
            better[c] = fisher_greater([[cs, cn - cs], [gs, gn - gs]])
            worse[c] = fisher_greater([[gs, gn - gs], [cs, cn - cs]])
            per[c]["levels"][level] = {"stable": cs, "n": cn, "gmc_stable": gs, "gmc_n": gn,
                                       "p_better": better[c], "p_worse": worse[c]}
        hb, hw = holm(better, ALPHA), holm(worse, ALPHA)
        for c in CORRECTIONS_2026:
            per[c]["levels"][level].update({"better_holm": bool(hb[c]), "worse_holm": bool(hw[c])})
    for c, v in per.items():
        lv = v["levels"]
        if any(x["worse_holm"] for x in lv.values()):
            verdict = "REFUTED"
        elif all(x["stable"] >= x["gmc_stable"] for x in lv.values()) and all(
                x["stable"] == x["n"] and x["better_holm"] for x in lv.values() if x["gmc_stable"] < x["gmc_n"]):
            verdict = "CONFIRMED"
        else:
            verdict = "INCONCLUSIVE"
        v["verdict"] = verdict
        v["predicted_held_beyond_gmc"] = list(PREDICTED_HELD.get(c, ()))
    return per


def n2(runs: pd.DataFrame) -> dict:
    """N2 (learned), per correction and level: the gain in final held-out pc over the run's warm start among
    stable runs (mean, 95% bootstrap interval), and c minus TOPR paired by seed over the seeds where both are
    stable (95% paired bootstrap interval). Label: ``learned`` (held and the gain's interval above the
    studies' margin), ``held, not learned`` (held, the interval not above it), ``not held`` (stable in fewer
    than 4 of 5 seeds: the drift map's 80% share)."""
    from grids.run_table import MARGIN, bootstrap
    from studies.common.drift_map import SHARE

    out: dict[str, dict] = {}
    for c in CORRECTIONS_2026:
        out[c] = {}
        for level in LEVELS:
            x = _cell(runs, c, level)
            t = _cell(runs, "topr", level)
            st = x[x["stable"]]
            gain = bootstrap((st["pc_final"] - st["pc0"]).to_numpy(float))
            both = sorted(set(st["seed"]) & set(t[t["stable"]]["seed"]))
            a, b = x.set_index("seed"), t.set_index("seed")
            diff = bootstrap((a.loc[both, "pc_final"] - b.loc[both, "pc_final"]).to_numpy(float)) if both else None
            held = len(x) > 0 and float(x["stable"].mean()) >= SHARE
            learned = held and math.isfinite(gain["low"]) and gain["low"] > MARGIN
            out[c][level] = {"stable": int(x["stable"].sum()), "n": len(x), "gain": gain["mean"],
                             "gain_low": gain["low"], "gain_high": gain["high"],
                             "minus_topr": None if diff is None else diff["mean"],
                             "minus_topr_low": None if diff is None else diff["low"],
                             "minus_topr_high": None if diff is None else diff["high"], "paired_seeds": both,
                             "label": "learned" if learned else "held, not learned" if held else "not held"}
    return out


def limits(b: dict | None) -> tuple[float, float]:
    """What a boundary (:func:`studies.common.drift_map.boundaries`) says of where the failure lies: ``(low, high)``
    from its seed-bootstrap interval; right-censored (no level failed): at least its value, no upper limit;
    left-censored (every level failed): at most its value (the smallest drift measured), no lower limit; no
    boundary or no interval: nothing (-inf, inf)."""
    inf = math.inf
    if not b or b.get("boundary") is None:
        return -inf, inf
    if b.get("censored") == "right":
        return float(b["boundary"]), inf
    if b.get("censored") == "left":
        return -inf, float(b["boundary"])
    lo, hi = b.get("low"), b.get("high")
    return (-inf if lo is None else float(lo)), (inf if hi is None else float(hi))


def n3(runs: pd.DataFrame) -> dict:
    """N3 (boundary), per correction and optimiser: the boundary on the early-KL axis by the drift map's rule
    (:func:`studies.common.drift_map.boundaries`, unchanged, seed-bootstrap intervals) over :data:`LEVELS`, GMC's
    over the same levels, each read as limits (:func:`limits`, censoring included). Applied as: CONFIRMED where
    c's lower limit lies above GMC's upper limit, REFUTED where c's upper limit lies below GMC's lower limit,
    INCONCLUSIVE otherwise. Under SGD one level (3e-4) is measured: every boundary there is censored. The axis is
    each run's own early KL: a correction whose runs drift further at the same step size can fail at a smaller
    step size than GMC and still place its boundary beyond GMC's on this axis (N1 reads the step sizes)."""
    from studies.common.drift_map import boundaries

    r = runs[runs["estimator"].isin((*CORRECTIONS_2026, "gmc"))]
    bounds = boundaries(r, list(SEEDS))
    find = {(b["estimator"], b["optimizer"]): b for b in bounds}
    out: dict[str, dict] = {}
    for c in CORRECTIONS_2026:
        out[c] = {}
        for fam in ("adamclip", "sgd"):
            b, g = find.get((c, fam)), find.get(("gmc", fam))
            (c_lo, c_hi), (g_lo, g_hi) = limits(b), limits(g)
            verdict = "CONFIRMED" if c_lo > g_hi else "REFUTED" if c_hi < g_lo else "INCONCLUSIVE"
            out[c][fam] = {"verdict": verdict, "boundary": b, "gmc_boundary": g, "limits": [c_lo, c_hi],
                           "gmc_limits": [g_lo, g_hi]}
    return out


def analyse(runs: pd.DataFrame) -> dict:
    missing = whole(runs)
    base = {"format": VERDICTS_FORMAT, "levels": list(LEVELS), "seeds": list(SEEDS), "cells": counts(runs),
            "missing": missing}
    if missing:
        more = " ..." if len(missing) > 4 else ""
        why = f"not yet run: {len(missing)} cells miss seeds ({'; '.join(missing[:4])}{more})"
        return {**base, **{h: {"verdict": "INCONCLUSIVE", "why": why} for h in ("N1", "N2", "N3")}}
    return {**base, "N1": n1(runs), "N2": n2(runs), "N3": n3(runs)}


def points(runs: pd.DataFrame) -> list[dict]:
    """Each 2026 run at d = 64 as a point of the drift map (:func:`studies.common.drift_map.points`), for F24."""
    from studies.common.drift_map import points as map_points

    return map_points(runs[runs["estimator"].isin(CORRECTIONS_2026)], list(SEEDS))


def main(argv=None) -> int:
    from pathlib import Path

    from grids import grid_folder
    from schema.io import check_output, write_json

    ap = argparse.ArgumentParser(prog="python -m studies.corrections_2026", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None,
                    help="where to write (default: results/llm/corrections_2026/verdicts.json)")
    args = ap.parse_args(argv)
    path = Path(args.json) if args.json else grid_folder("corrections_2026") / "verdicts.json"
    try:
        check_output(path)  # before any work: a file the toolkit did not write is never replaced
        runs = read()
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = {**analyse(runs), "points": points(runs)}
    write_json(path, out)
    for h in ("N1", "N2", "N3"):
        v = out[h]
        print(f"{h}: " + (v["verdict"] + f" ({v['why']})" if "verdict" in v else
                          ", ".join(f"{c} {_summary(h, x)}" for c, x in v.items())))
    print(f"wrote {path}")
    return 0


def _summary(h: str, x: dict) -> str:
    if h == "N1":
        return x["verdict"]
    if h == "N2":
        return "/".join(x[lv]["label"] for lv in LEVELS)
    return "/".join(x[f]["verdict"] for f in ("adamclip", "sgd"))


__all__ = ["LEVELS", "analyse", "main", "n1", "n2", "n3", "points", "read"]
