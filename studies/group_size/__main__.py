"""Decide G1-G7 of the group-size study (docs/PREREGISTRATION-GROUP-SIZE.md) from the committed pair
measurement and grid runs -> ``results/llm/group_size/verdicts.json``.

    python -m studies.group_size [--json PATH]
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np


def cells(recs) -> list[dict]:
    """Per (level, G, estimator) at d = 64: runs, stable share, mean final pc, the early KL over the whole
    window and before collapse, and how many runs were read after their collapse."""
    from .grid_verdicts import level_drift

    out = []
    keys = sorted({(r["level"], r["G"], r["B"], r["estimator"]) for r in recs if r["delay"] > 0})
    for level, G, B, est in keys:
        rs = [r for r in recs if (r["level"], r["G"], r["B"], r["estimator"]) == (level, G, B, est) and r["delay"] > 0]
        seeds = sorted({r["seed"] for r in rs})
        pre, fb = (level_drift(recs, est, level, G, seeds) if B * G == 128 else
                   (float(np.median([r["kl_pre"] for r in rs if math.isfinite(r["kl_pre"])] or [math.nan])), False))
        out.append({"level": level, "G": G, "B": B, "estimator": est, "n": len(rs),
                    "stable_share": float(np.mean([r["stable"] for r in rs])),
                    "pc_final": float(np.mean([r["pc_final"] for r in rs])),
                    "kl_early_all": float(np.nanmedian([r["kl_all"] for r in rs])) if rs else math.nan,
                    "kl_early_pre_collapse": pre, "drift_fallback": fb,
                    "read_after_collapse": sum(1 for r in rs if r["t_collapse"] is not None and r["t_collapse"] < 84)})
    return out


def grid_cost(recs) -> dict:
    """What the grid's complete runs cost: their number, how many carry a wall time, and the sum and median of those
    (each run on one torch thread, as ``python -m studies.run`` runs them)."""
    walls = [r["wall_s"] for r in recs if math.isfinite(r.get("wall_s", math.nan))]
    return {"runs": len(recs), "timed": len(walls), "wall_s_total": float(sum(walls)),
            "wall_s_median": float(np.median(walls)) if walls else math.nan}


def pairs_summary(doc: dict | None) -> list[dict]:
    """Per measured pair: its drift, whether its gates passed, and GMC's and TIC-trunc's squared relative bias
    at the smallest and the largest G measured (what the README's line quotes)."""
    out = []
    for name, p in sorted((doc or {}).get("pairs", {}).items()):
        g = {int(r["G"]): r for r in p["rows"] if r["estimator"] == "gmc"}
        t = {int(r["G"]): r for r in p["rows"] if r["estimator"] == "tic_trunc"}
        lo, hi = min(g), max(g)
        out.append({"pair": name, "kl": p["drift_kl"], "chi2": p["drift_chi2"], "ess": p["drift_ess"],
                    "gates_passed": p["gates"]["passed"], "G_low": lo, "G_high": hi,
                    "gmc_low": g[lo]["rel_bias_sq"], "gmc_high": g[hi]["rel_bias_sq"], "gmc_high_se": g[hi]["se"],
                    "tic_trunc": t[lo]["rel_bias_sq"], "cost_s": p["cost_s"]["total"]})
    return out


def decide() -> dict:
    from grids import grid_folder
    from schema.results import read_json
    from studies.group_size import analysis as A
    from studies.group_size import grid_verdicts as V
    from studies.group_size.predictions import OUT as PRED

    pairs_path = grid_folder("group_size") / "pairs.json"
    doc = read_json(pairs_path) if pairs_path.is_file() else None
    pred = read_json(PRED)
    recs = V.read_grid([grid_folder("group_size"), grid_folder("group_size_decisive")])
    machines = sorted({r["machine"] for r in recs})
    return {"format": A.VERDICTS_FORMAT, "runs": len(recs), "machines": machines,
            "runs_resumed_on_another_machine": sorted(r["run"] for r in recs if r["resumed_elsewhere"]),
            "pairs_measured": sorted(doc["pairs"]) if doc else [], "pairs_summary": pairs_summary(doc),
            "g8_against_committed": V.g8_against_committed(grid_folder("group_size")),
            "G1": A.g1(doc), "G2": A.g2(doc, pred["lognormal"]["law"]["b"]), "G3": V.g3(recs), "G4": V.g4(recs),
            "G5": V.g5(recs), "G6": V.g6(recs), "G7": V.g7(recs), "cells": cells(recs),
            "boundaries": V.boundaries(recs), "grid_cost": grid_cost(recs)}


def main(argv=None) -> int:
    from pathlib import Path

    from grids import grid_folder
    from schema.io import check_output, write_json

    ap = argparse.ArgumentParser(prog="python -m studies.group_size", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="where to write (default: results/llm/group_size/verdicts.json)")
    args = ap.parse_args(argv)
    path = Path(args.json) if args.json else grid_folder("group_size") / "verdicts.json"
    try:
        check_output(path)  # before any work: a file the toolkit did not write is never replaced
        out = decide()  # a torn pairs.json or a missing predictions file is named
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(path, out)
    for h in ("G1", "G2", "G3", "G4", "G5", "G6", "G7"):
        print(f"{h}: {out[h]['verdict']}" + (f" ({out[h]['why']})" if "why" in out[h] else ""))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
