"""The drift study's analysis (docs/PREREGISTRATION-DRIFT.md): the drift map and D1-D7.

    python -m studies.drift [--json results/llm/drift/verdicts.json]

Reads the drift grids (``results/llm/drift``, ``results/llm/drift_decisive``) and the mechanism
grid's SGD and Adam + clip arms (its 1e-4 levels), one row per run: its level (optimiser, rate) or
step-size arm, estimator, seed, stability and final pc (:func:`grids.run_table.run_row`, the staleness
study's rule) and its drift (:func:`llm_runs.drift.summary`, the early KL per token the map's axis).
Writes the map (``map.json``: per estimator and optimiser, each level's drift and stable share and the
failure boundary with its seed-bootstrap interval) and the verdicts. Every rule is the
pre-registration's; a hypothesis whose seeds are not whole is INCONCLUSIVE ("not yet run"). The map is
:mod:`studies.common.drift_map`, the verdicts :mod:`studies.drift.verdicts` and :mod:`studies.common.d5`, what the
report shows beside them :mod:`studies.drift.beside`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from studies.common.d5 import D5_HELD_OUT, D5_TRAIN, d5, d5_records
from studies.common.drift_map import AXIS, SHARE, boundaries, cell_table, exact_model, points
from studies.common.drift_runs import map_folders, read
from studies.drift.beside import beside, m6_disclosure
from studies.drift.verdicts import _not_run, adam_study_drift, d1, d2, d3, d4, d6, d7, step_arms, study_gain

VERDICTS_FORMAT = "gmc-grpo-drift-verdicts/1"
MAP_FORMAT = "gmc-grpo-drift-map/1"


def whole_seeds(runs: pd.DataFrame, grid: str) -> list[int]:
    """Seeds of ``grid`` (``drift`` or ``drift_decisive``) whose every planned run is present and complete
    (runs the grid takes from the mechanism grid count where they are)."""
    from studies.drift.grids import GRIDS

    have = {(r["run"], r["grid"]) for r in runs[runs["complete"]].to_dict("records")}
    return [s for s in GRIDS[grid].seeds
            if all((n, grid) in have for n in _planned(grid, s))
            and all((n, "mechanism") in have for n in _reused_names(s))]


def _planned(grid: str, seed: int) -> list[str]:
    from studies.drift.grids import GRIDS

    return [c.name for c in GRIDS[grid].cells() if c.seed == seed]


def _reused_names(seed: int) -> list[str]:
    """The mechanism grid's runs of ``seed`` that stand for the drift grid's two 1e-4 levels."""
    from studies.common.settings import MECHANISM_ESTIMATORS

    return [name for arm in ("sgd", "adamclip")
            for name in (f"long-{arm}-gmc-d0-s{seed}", *(f"long-{arm}-{e}-d64-s{seed}" for e in MECHANISM_ESTIMATORS))]


def analyse(runs: pd.DataFrame) -> dict:
    seeds = whole_seeds(runs, "drift")
    decisive = whole_seeds(runs, "drift_decisive")
    out = {"format": VERDICTS_FORMAT, "axis": AXIS, "seeds_drift": seeds, "seeds_decisive": decisive,
           "M6_disclosure": m6_disclosure()}
    if len(seeds) < 5:
        present = sorted(set(runs.loc[runs["grid"] == "drift", "seed"]))
        for h in ("D1", "D2", "D3", "D4", "D5", "D6", "D7"):
            out[h] = _not_run(f"{len(seeds)} of the drift grid's 5 seeds whole (seeds with runs: {present})")
        out["boundaries"] = boundaries(runs, seeds or present) if (seeds or present) else []
        out["provisional"] = True
        out["D5"] = d5(d5_records(D5_TRAIN), d5_records(D5_HELD_OUT), decided=False)
        return out
    out["provisional"] = False
    all10 = seeds + decisive  # the seeds whole now: the map's cells with decisive seeds read all ten
    bounds = boundaries(runs, all10)
    cells = cell_table(runs, all10)
    out["boundaries"] = bounds
    out["D1"] = d1(bounds, cells, adam_study_drift())
    out["D2"] = d2(bounds)
    if len(all10) >= 10:
        arms = step_arms(runs, all10)
        out["D3"], out["D4"], out["D6"] = d3(arms), d4(arms), d6(arms, len(all10))
        out["step_arms"] = arms["shares"]  # every arm's stable share and final pc, the undecided ones too
    else:
        for h in ("D3", "D4", "D6"):
            out[h] = _not_run(f"{len(all10)} of the 10 seeds of the step-size arms whole")
    out["D5"] = d5(d5_records(D5_TRAIN), d5_records(D5_HELD_OUT), decided=len(all10) >= 10)
    out["D7"] = d7(runs, all10, study_gain())
    out["beside"] = beside(runs, all10, bounds)
    return out


def map_table(result: dict, runs: pd.DataFrame | None = None) -> dict:
    """What ``map.json`` holds: the axis and, per estimator and optimiser, the levels and the boundary; with
    ``runs``, also every run as a point, the boundaries on the chi^2 axis and the exact model's beside them."""
    whole = result["seeds_drift"] + result.get("seeds_decisive", [])  # as the boundaries
    out = {"format": MAP_FORMAT, "axis": "kl", "window": "early", "share": SHARE, "seeds": whole,
           "provisional": bool(result.get("provisional")), "boundaries": result["boundaries"]}
    if runs is not None:
        present = sorted({int(s) for s in runs.loc[runs["grid"] == "drift", "seed"]})
        seeds = present if result.get("provisional") else whole
        out["points"] = points(runs, seeds)
        out["boundaries_chi2"] = boundaries(runs, seeds, axis="chi2_early") if seeds else []
        out["exact_model"] = exact_model()
    return out


def main(argv: list[str] | None = None) -> int:
    from schema.io import check_output, write_json

    p = argparse.ArgumentParser(prog="python -m studies.drift", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="write the verdicts here (default: results/llm/drift/verdicts.json), "
                                                "and the map beside them as map.json")
    args = p.parse_args(argv)
    folders = map_folders()
    out = Path(args.json) if args.json else folders["drift"] / "verdicts.json"
    map_out = out.with_name("map.json")  # beside the verdicts: --json never writes into the committed folder
    try:
        for path in (out, map_out):
            check_output(path)
        runs = read(folders)
        result = analyse(runs)
    except (ValueError, OSError) as exc:  # an unwritable --json too, before any work
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(out, result)
    write_json(map_out, map_table(result, runs))
    for h in ("D1", "D2", "D3", "D4", "D5", "D6", "D7"):
        v = result[h]
        print(f"{h}: {v['verdict']}" + (f" ({v['why']})" if "why" in v else ""))
    for label, r in result["M6_disclosure"].items():
        print(f"M6 on {label} runs: {r['verdict']}, hits {r['hits'][0]}/{r['hits'][1]}, false alarms "
              f"{r['false_alarms'][0]}/{r['false_alarms'][1]}, Fisher p = {r['p_fisher']:.3f}")
    for b in result["boundaries"]:
        lv = "; ".join(f"{x['level']} KL {x['drift']:.3g} stable {x['stable_share']:.0%} (n={x['n']})"
                       for x in b["levels"])
        print(f"  {b['estimator']:9s} {b['optimizer']:9s} boundary {b['boundary']} {b['censored'] or ''}: {lv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
