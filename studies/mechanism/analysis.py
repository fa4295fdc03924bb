"""The mechanism study's pre-registered analysis (docs/PREREGISTRATION-MECHANISM.md), applied as written.

    python -m studies.mechanism --select-warning     # M6's signal from the committed study only -> warning.json
    python -m studies.mechanism [--json results/llm/mechanism/verdicts.json]

Reuses the staleness study's machinery unchanged (:mod:`grids.run_table`: the run reader with its
grid check, the stability rule, paired bootstrap intervals, Holm, whole seeds) and reads both grids
through :mod:`grids.mechanism_table`. A run's ``arm`` is its optimiser setting
(:func:`grids.mechanism_table.arm_of`); the committed study's runs are the unclipped-Adam arm ``adam``.
The sibling grids it reads (scale, scale_mech, scale_variants) are found through the one table of
grid folders, :data:`studies.grids.GRIDS` (``Grid.out``). M6's early warning is :mod:`studies.mechanism.warning`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grids import grid_folder
from grids.mechanism_table import (  # noqa: F401  (the table's names, which the analysis' readers use)
    DELAY,
    DRIFT_COLUMNS,
    GRID,
    MECH_COLUMNS,
    MECHANISM_CELL,
    REUSED,
    SCALE,
    SCALE_MECH,
    SCALE_VARIANTS,
    arm_of,
    compare_runs,
    drift_table,
    load,
    mechanism_seeds,
    per_run_means,
    planned_cells,
    read_both,
    replay_check,
    whole_seeds_of,
)
from grids.run_table import (
    ALPHA,
    MARGIN,
    MIN_SEEDS,
    PRIMARY,
    holm,
    p_below,
    read_runs,
    read_traces,
)
from schema.stability import STABLE_FRACTION
from stats import auc, sign_test
from studies.common.mechanism_rules import (
    WARNING_FILE,
    WARNING_WINDOW,
    arm_runs,
    arm_stable,
    interval_fields,
    m1,
    m2b,
    m6,
    paired_difference,
    stable_share,
)
from studies.mechanism.warning import select_warning

HYPOTHESES = {
    "M1": "under SGD GMC is stable, not below TIC-mask and above IS (THEORY claim 17's setting)",
    "M2": "clipping the gradient norm at 1 raises GMC's and IS's shares of stable seeds under Adam",
    "M2b": "under AdamW + clip 1 (verl's actor) GMC is at least as good as every stable baseline",
    "M3": "a per-trajectory cap after GMC (gmc_cap) is stable and keeps less mass bias than TIC-trunc",
    "M4": "GMC on one sign and TOPR on the other is stable and not worse than TOPR",
    "M5": "the ordering GMC < TOPR at d = 64 holds at a model 8 times larger",
    "M6": "the pre-registered early-warning signal fires more often before collapse than without one",
}



def analyse(study: str | Path, root: str | Path) -> dict:
    runs, replays = read_both(study, root)
    seeds = mechanism_seeds(runs, replays)
    runs = runs[runs["seed"].isin(seeds)]
    means = per_run_means([study, root], ("stale/mass_bias",))
    key = dict(zip(zip(means["root"], means.index), means["stale/mass_bias"]))
    runs = runs.assign(mass_bias=[key.get((str(study) if r.source == "study" else str(root), r.run), math.nan)
                                  for r in runs.itertuples()])
    hyp = {"M1": m1(runs), "M2": _m2(runs), "M2b": m2b(runs), "M3": _m3(runs), "M4": _m4(runs),
           "M5": _m5(study, grid_folder(SCALE)), "M6": m6(root, runs)}
    for h, r in hyp.items():
        r["seeds"] = seeds
        if h != "M5" and len(seeds) < MIN_SEEDS:
            r["interim_verdict"], r["verdict"] = r["verdict"], "NOT DECIDED"
            r["reason"] = f"{len(seeds)} whole seeds, fewer than the pre-registered minimum of {MIN_SEEDS}"
    shares = {f"{a}/{e}": list(stable_share(runs, a, e)) for a, e in
              sorted(set(runs.loc[runs["delay"] == DELAY, ["arm", "estimator"]].itertuples(index=False, name=None)))}
    d0 = {a: float(g["pc_final"].mean() - g["pc0"].mean()) for a, g in runs[runs["delay"] == 0].groupby("arm")}
    return {"hypotheses": hyp, "seeds": seeds, "stable_shares": shares, "delay0_gain": d0,
            "replay": replay_check(study, root, replays),
            "scale_drift": scale_drift(grid_folder(SCALE), grid_folder(SCALE_MECH)),
            "scale_variants": scale_variants(grid_folder(SCALE), grid_folder(SCALE_VARIANTS))}


def _m2(runs) -> dict:
    out, p = {}, {}
    for e in ("gmc", "is"):
        a = arm_runs(runs, "adamclip")
        a = a[(a["estimator"] == e) & (a["delay"] == DELAY) & a["complete"]].groupby("seed")["stable"].first()
        b = arm_runs(runs, "adam")
        b = b[(b["estimator"] == e) & (b["delay"] == DELAY) & b["complete"]].groupby("seed")["stable"].first()
        common = a.index.intersection(b.index)
        up = int((a[common] & ~b[common]).sum())
        down = int((~a[common] & b[common]).sum())
        p[e] = sign_test(up, down)
        out[e] = {"clipped_stable": int(a[common].sum()), "unclipped_stable": int(b[common].sum()),
                  "n": len(common), "up": up, "down": down, "p_mcnemar": p[e]}
    rej = holm(p)
    higher = {e: out[e]["clipped_stable"] > out[e]["unclipped_stable"] for e in out}
    v = "CONFIRMED" if all(higher.values()) and all(rej.values()) else \
        "REFUTED" if not all(higher.values()) else "INCONCLUSIVE"
    return {"verdict": v, **{e: {**out[e], "rejected": rej[e]} for e in out}}


def _m3(runs) -> dict:
    k, n = stable_share(runs, "adam", "gmc_cap")
    b = paired_difference(runs, "adam", "gmc_cap", "adam", "tic_trunc", "mass_bias")
    a = bool(n) and k / n >= STABLE_FRACTION
    below = 1 - p_below(b, 0.0) <= ALPHA  # H0: gmc_cap - tic_trunc >= 0
    v = "CONFIRMED" if a and below else "REFUTED" if (n and not a) or b["low"] > 0 else "INCONCLUSIVE"
    k2, n2 = stable_share(runs, "adamk2", "gmc_cap")
    return {"verdict": v, "gmc_cap_stable": [k, n], "mass_bias_gmc_cap_minus_tic_trunc": interval_fields(b),
            "exploratory_kappa2_stable": [k2, n2],
            "exploratory_kappa2_minus_topr_pc":
                interval_fields(paired_difference(runs, "adamk2", "gmc_cap", "adam", "topr"))}


def _m4(runs) -> dict:
    variants = ("gmc_topr", "topr_gmc")
    boots = {v: paired_difference(runs, "adam", v, "adam", "topr") for v in variants}
    noninf = holm({v: p_below(b, -MARGIN) for v, b in boots.items()})
    worse = holm({v: 1 - p_below(b, 0.0) for v, b in boots.items()})
    stable = {v: arm_stable(runs, "adam", v) for v in variants}
    if any(stable[v] and noninf[v] for v in variants):
        verdict = "CONFIRMED"
    elif all((stable_share(runs, "adam", v)[1] and not stable[v]) or worse[v] for v in variants):
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "margin": MARGIN,
            **{v: {"stable": list(stable_share(runs, "adam", v)), **interval_fields(boots[v]), "noninferior": noninf[v],
                   "worse": worse[v]} for v in variants}}


SCALE_MIN_SEEDS = 5
"""M5's minimum of whole paired seeds at the larger model."""


def m5_verdict(reference: float, diff: dict) -> str:
    """CONFIRMED when ``diff``'s interval excludes 0 on the side of ``reference`` (the study model's
    mean), REFUTED when it excludes 0 on the other side, else INCONCLUSIVE."""
    if not diff["n"] or not np.isfinite(diff["low"]) or not np.isfinite(diff["high"]):
        return "INCONCLUSIVE"
    below, above = diff["high"] < 0, diff["low"] > 0
    if (below and reference < 0) or (above and reference > 0):
        return "CONFIRMED"
    return "REFUTED" if below or above else "INCONCLUSIVE"


def _m5(study: str | Path, scale: str | Path) -> dict:
    """M5: GMC - TOPR (final pc) at d = 64 at the larger model (the ``scale`` grid, its whole seeds),
    against the sign of the same difference at the study model (the committed study's whole seeds)."""
    base = {"hypothesis": HYPOTHESES["M5"]}
    s = read_runs(study, PRIMARY)
    s = s[(s["horizon"] == "long") & (s["delay"] == DELAY)].assign(arm="adam")
    ref = paired_difference(s, "adam", "gmc", "adam", "topr")
    base["study_model"] = interval_fields(ref)
    if not (Path(scale).is_dir() and any(Path(scale).iterdir())):
        return {**base, "verdict": "NOT DECIDED", "reason": f"the larger model's grid ({scale}) has not been run",
                "scale_seeds": []}
    runs = read_runs(scale, SCALE).assign(arm="")
    seeds = whole_seeds_of(runs, planned_cells(SCALE))
    runs = runs[runs["seed"].isin(seeds)]
    diff = paired_difference(runs, "", "gmc", "", "topr") if seeds else {"n": 0, "mean": math.nan, "low": math.nan,
                                                              "high": math.nan}
    shares = {e: list(stable_share(runs, "", e)) for e in sorted(set(runs.loc[runs["delay"] == DELAY, "estimator"]))}
    d0 = runs[runs["delay"] == 0]
    out = {**base, "scale_seeds": seeds, "gmc_minus_topr": interval_fields(diff), "stable_shares": shares,
           "delay0_gain": float(d0["pc_final"].mean() - d0["pc0"].mean()) if len(d0) else math.nan,
           "means": {e: float(g["pc_final"].mean()) for e, g in runs[runs["delay"] == DELAY].groupby("estimator")}}
    verdict = m5_verdict(ref["mean"], diff)
    if len(seeds) < SCALE_MIN_SEEDS:
        return {**out, "interim_verdict": verdict, "verdict": "NOT DECIDED",
                "reason": f"{len(seeds)} whole seeds at the larger model, fewer than the pre-registered "
                          f"{SCALE_MIN_SEEDS}"}
    return {**out, "verdict": verdict}


def scale_drift(scale: str | Path, probe: str | Path) -> dict:
    """Exploratory: the larger model's gmc and topr runs again with the mechanism diagnostics on
    (``--grid scale_mech``). ``replay``: every column each shares with the scale grid's run of the
    same name, every update, compared as text (the diagnostics never change the update);
    ``drift``: :func:`drift_table` of the probe's complete runs (per estimator, median over runs of
    each run's median over its updates; ``drift_first_updates``: over its first
    :data:`WARNING_WINDOW` updates, before any collapse can be seen)."""
    if not (Path(probe).is_dir() and any(Path(probe).iterdir())):
        return {}
    from grids.check import check_grid_folder, check_pairing

    check_grid_folder(probe, SCALE_MECH)
    check_grid_folder(scale, SCALE)
    check_pairing(probe, scale)
    runs = read_runs(probe, SCALE_MECH).assign(arm="scale", source="mechanism")
    done = runs[runs["complete"]]
    replay = compare_runs((Path(probe) / r.run, Path(scale) / r.run, r.steps) for r in done.itertuples())
    same = bool(replay) and all(v["differences"] == 0 for v in replay.values())
    drift = drift_table(done, probe, probe) if len(done) else pd.DataFrame()
    early = drift_table(done, probe, probe, first=WARNING_WINDOW) if len(done) else pd.DataFrame()
    return {"runs": len(done), "replay": "byte-identical" if same else ("DIFFERS" if replay else "none yet"),
            "replayed": replay, "drift": drift.to_dict("records"), "drift_first_updates": early.to_dict("records"),
            "first_updates": WARNING_WINDOW}


def scale_variants(scale: str | Path, variants: str | Path) -> dict:
    """The GMC variants at the larger model (``--grid scale_variants``), paired by seed with the scale
    grid's TOPR: per variant, stable seeds and mean final pc at d = 64 and variant - TOPR (paired
    bootstrap) over the seeds both have complete. Exploratory until M3/M4 pick the variant M5 adds."""
    if not (Path(variants).is_dir() and any(Path(variants).iterdir())) or not Path(scale).is_dir():
        return {}
    from grids.check import check_grid_folder, check_pairing

    check_grid_folder(variants, SCALE_VARIANTS)
    check_grid_folder(scale, SCALE)
    check_pairing(variants, scale)
    mine = read_runs(variants, SCALE_VARIANTS)
    runs = pd.concat([read_runs(scale, SCALE), mine], ignore_index=True).assign(arm="")
    runs = runs[runs["complete"]]
    out = {}
    for v in sorted(set(mine["estimator"])):
        k, n = stable_share(runs, "", v)
        sel = runs[(runs["estimator"] == v) & (runs["delay"] == DELAY)]
        out[v] = {"stable": k, "runs": n, "mean": float(sel["pc_final"].mean()) if n else math.nan,
                  "minus_topr": interval_fields(paired_difference(runs, "", v, "", "topr")) if n else {}}
    return out



def study_facts(study: str | Path) -> dict:
    """What the committed staleness study's own data say about its first explanation of GMC's
    failure (one heavy trajectory) and about H4's warning, at the long horizon: per delay, GMC's
    largest weight per update (median over updates 0-49) in surviving against collapsed runs and
    its AUC for collapse; how many positive-delay runs H4's warning fired in, and when; the share
    of GMC's d = 64 updates whose plug-in chi^2 is <= 0."""
    runs = read_runs(study, PRIMARY)
    long = runs[(runs["horizon"] == "long") & runs["complete"]]
    tr = read_traces(study, ("train/weight_max", "stale/chi2"), PRIMARY)
    tr = tr[tr["horizon"] == "long"]
    out: dict = {"weight_max": {}}
    for d in (16, 64):
        g = long[(long["estimator"] == "gmc") & (long["delay"] == d)].set_index("run")
        early = tr[(tr["step"] < 50) & tr["run"].isin(g.index)].groupby("run")["train/weight_max"].median()
        col = g["collapsed"].reindex(early.index).to_numpy(bool)
        x = early.to_numpy(float)
        out["weight_max"][d] = {"survived_median": float(np.median(x[~col])) if (~col).any() else math.nan,
                                "collapsed_median": float(np.median(x[col])) if col.any() else math.nan,
                                "survived": int((~col).sum()), "collapsed": int(col.sum()), "auc": auc(x, col)}
    pos = long[long["delay"] > 0]
    fired = pos["t_warning"].notna()
    out["h4"] = {"runs": len(pos), "fired": int(fired.sum()),
                 "median_update": float(pos.loc[fired, "t_warning"].median()) if fired.any() else math.nan,
                 "collapsed": int(pos["collapsed"].sum())}
    g64 = tr[(tr["estimator"] == "gmc") & (tr["delay"] == 64)]["stale/chi2"]
    out["gmc_d64_chi2_nonpositive"] = float((g64 <= 0).mean())
    return out




def main(argv: list[str] | None = None) -> int:
    from schema.io import check_output

    p = argparse.ArgumentParser(prog="python -m studies.mechanism", description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=None, help="the committed staleness study (default: <results>/llm/study)")
    p.add_argument("--root", default=None, help="the mechanism grid (default: <results>/llm/mechanism)")
    p.add_argument("--select-warning", action="store_true",
                   help="choose M6's signal on the committed study only and write <root>/warning.json")
    p.add_argument("--json", default=None, help="write the verdicts here")
    args = p.parse_args(argv)
    study = Path(args.study) if args.study else grid_folder(PRIMARY)
    root = Path(args.root) if args.root else grid_folder(GRID)
    try:
        if args.json:
            check_output(args.json, legacy=is_mechanism_verdicts_text)
        if args.select_warning:
            from schema.io import write_json
            from schema.sources import shown_path

            target = root / WARNING_FILE
            if target.exists():
                raise ValueError(f"{target} exists: the signal is chosen once, before the held-out runs are read; "
                                 f"it is never replaced")
            rec = select_warning(study)
            write_json(target, {**rec, "training_set": shown_path(study)})
            print(f"M6 signal: {rec['signal']} ({rec['direction']}, threshold {rec['threshold']:.4g}); training AUC "
                  f"{rec['auc']:.3f} [{rec['auc_ci'][0]:.3f}, {rec['auc_ci'][1]:.3f}] -> {target}")
            return 0
        return _report(study, root, args.json)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def is_mechanism_verdicts_text(text: str) -> bool:
    """True for the text of a verdicts file :func:`main` wrote (``--json``): an object whose
    ``hypotheses`` are records with a ``verdict``."""
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    hyp = obj.get("hypotheses") if isinstance(obj, dict) else None
    return isinstance(hyp, dict) and bool(hyp) and all(isinstance(v, dict) and "verdict" in v for v in hyp.values())


def _report(study: Path, root: Path, json_out: str | None) -> int:
    res = analyse(study, root)
    for h, r in res["hypotheses"].items():
        extra = f" (interim: {r['interim_verdict']})" if "interim_verdict" in r else ""
        print(f"{h}: {r['verdict']}{extra} -- {HYPOTHESES[h]}")
    print(f"whole seeds: {res['seeds']}; replay of the committed Adam runs: {res['replay']['verdict']}")
    if json_out:
        from schema.io import write_json

        write_json(json_out, res)
        print(f"wrote {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
