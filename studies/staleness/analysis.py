"""The staleness study's pre-registered analysis (docs/PREREGISTRATION.md), applied as written.

    python -m studies.staleness [--root results/llm/study] [--json results/llm/study/verdicts.json]

Reads every run folder under ``root`` through :func:`grids.run_table.read_runs` (final held-out
pc, the area under its pc curve, the stability flag, :func:`schema.results.run_summary`,
:data:`schema.results.UNSTABLE_RULE`), forms paired differences across estimators of one seed, and
prints a verdict (CONFIRMED / REFUTED / INCONCLUSIVE) for each hypothesis with its numbers. Every
constant of the rule is a constant of :mod:`grids.run_table`, bound here too, so the file and the
pre-registration cannot drift apart (the pre-registration quotes them).
"""
from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from grids import grid_folder
from grids.bound_table import (  # noqa: F401
    BOUND_COLUMNS,
    BOUND_FORMS,
    RAW_BOUND_COLUMNS,
    bound_ratio,
    bound_table,
    recomputed_bound,
)
from grids.run_table import (  # noqa: F401
    ALPHA,
    BOOT_SEED,
    CELL,
    COLLAPSE_FRACTION,
    DIFFERENCE_METRICS,
    H4_DIAGNOSTIC,
    H4_THRESHOLD,
    H4_WINDOW,
    MARGIN,
    MIN_COLLAPSES,
    MIN_SEEDS,
    N_RESAMPLES,
    PRIMARY,
    TRAJECTORY,
    bootstrap,
    collapse_timing,
    differences,
    differences_table,
    exploratory_estimators,
    holm,
    interval_of,
    masked_update_fraction,
    p_below,
    paired,
    planned_cells,
    read_paired,
    read_runs,
    read_traces,
    run_row,
    seeds_for_power,
    share_ci,
    stable_in_cell,
    study_folders,
    whole_seeds,
    with_exploratory,
)
from schema.io import dumps_json
from schema.stability import STABLE_FRACTION
from studies.common.staleness_rules import hypotheses, verdict_of  # noqa: F401 (H1-H4's rules, named here before)

# --------------------------------------------------------------------------- the hypotheses


def analyse(runs: pd.DataFrame) -> dict:
    """Every hypothesis' verdict and numbers (see docs/PREREGISTRATION.md), over the whole seeds
    only. With fewer than :data:`MIN_SEEDS` of them the stopping rule is not met: each verdict is
    NOT DECIDED, and the rule's outcome on the seeds so far is kept as ``interim_verdict``."""
    seeds = whole_seeds(runs)
    out = hypotheses(runs[runs["seed"].isin(seeds)])
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


def plain_answer_facts(runs: pd.DataFrame) -> dict:
    """The study's answer so far, by rule: at the largest positive delay of the long horizon (else
    the first horizon with one), the stable estimators ranked by mean final pc, GMC's paired
    difference to the best other stable one, and the unstable ones (whole seeds only). The report
    renders it (:func:`studies.report.plain_answer`)."""
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
        facts["gmc_vs_best"] = {"best": others[0], **interval_of(bootstrap(paired(runs, h, d, "gmc", others[0])))}
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
    p = argparse.ArgumentParser(prog="python -m studies.staleness", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=None, help="the study's run folders (default: llm/study under the results root)")
    p.add_argument("--json", default=None, help="also write the verdicts here")
    args = p.parse_args(argv)
    from schema.io import check_output

    try:
        if args.json:
            check_output(args.json, legacy=is_verdicts_text)
        runs = read_runs(args.root or grid_folder(PRIMARY), PRIMARY)
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
