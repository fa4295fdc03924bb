"""The second-rounding replicate's comparison (docs/PREREGISTRATION-REPLICATE.md).

    python -m studies.replicate [--json results/llm/replicate_avx2/comparison.json]

Per cell of ``results/llm/replicate_avx2`` (every run on AVX2 kernels, from the committed warm start)
beside the committed runs of the same cell and seeds (``results/llm/study``, ``results/llm/mechanism``):
the stable shares with exact intervals and the Newcombe interval of their difference, the paired
difference of final pc, the sign agreement of GMC's paired differences with each baseline, and H1,
H2, H4, M1, M2b re-decided on the replicate alone by the studies' own rules
(:func:`studies.common.staleness_rules.hypotheses`, :func:`studies.common.mechanism_rules.m1`,
:func:`studies.common.mechanism_rules.m2b`).
Decided at 10 whole seeds; fewer are shown as provisional.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grids import grid_folder
from grids.run_table import bootstrap, read_runs, share_ci
from stats import newcombe

GRID = "replicate_avx2"
FORMAT = "gmc-grpo-replicate/1"
SEEDS_NEEDED = 10
COMMITTED = {"study": "primary", "sgd": "mechanism", "adamwclip": "mechanism"}
"""Replicate arm -> the committed grid it replicates (its folder: :func:`grids.grid_folder`)."""


def _arm(run: str) -> str:
    return run.split("-")[1]


def _committed_name(arm: str, run: str) -> str:
    """The committed run of the same cell and seed: the study's ``long-<est>-d..`` or the mechanism
    grid's ``long-<arm>-<est>-d..``."""
    return run.replace(f"long-{arm}-", "long-", 1) if arm == "study" else run


def read(root: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(replicate, committed)``: one row per run, each with its ``arm``; the committed rows are the
    runs of the replicate's cells and seeds."""
    rep = read_runs(root or grid_folder(GRID), GRID)
    rep["arm"] = [_arm(r) for r in rep["run"]]
    rows = []
    for arm, grid in COMMITTED.items():
        base = read_runs(grid_folder(grid), grid)
        names = {_committed_name(arm, r) for r in rep.loc[rep["arm"] == arm, "run"]}
        rows.append(base[base["run"].isin(names)].assign(arm=arm))
    return rep, pd.concat(rows, ignore_index=True)


def whole_seeds(rep: pd.DataFrame) -> list[int]:
    from studies.replicate.grids import GRIDS

    done = set(rep.loc[rep["complete"], "run"])
    return [s for s in GRIDS[GRID].seeds if all(c.name in done for c in GRIDS[GRID].cells() if c.seed == s)]


def cells(rep: pd.DataFrame, com: pd.DataFrame, seeds: list[int]) -> list[dict]:
    out = []
    r = rep[rep["seed"].isin(seeds) & rep["complete"] & (rep["delay"] > 0)]
    c = com[com["seed"].isin(seeds) & com["complete"] & (com["delay"] > 0)]
    for (arm, est), g in r.groupby(["arm", "estimator"]):
        h = c[(c["arm"] == arm) & (c["estimator"] == est)]
        k1, n1, k2, n2 = int(g["stable"].sum()), len(g), int(h["stable"].sum()), len(h)
        lo, hi = newcombe(k1, n1, k2, n2)
        a, b = g.set_index("seed")["pc_final"], h.set_index("seed")["pc_final"]
        common = sorted(set(a.index) & set(b.index))
        boot = bootstrap((a.loc[common] - b.loc[common]).to_numpy(float))

        out.append({"arm": arm, "estimator": est, "replicate_stable": [k1, n1], "replicate_ci": list(share_ci(k1, n1)),
                    "committed_stable": [k2, n2], "committed_ci": list(share_ci(k2, n2)), "share_difference": [lo, hi],
                    "shares_agree": bool(lo <= 0 <= hi) if math.isfinite(lo) else None,
                    "pc_replicate": float(a.mean()), "pc_committed": float(b.mean()),
                    "pc_difference": {k: boot[k] for k in ("mean", "low", "high", "n")}})
    return out


def signs(rep: pd.DataFrame, com: pd.DataFrame, seeds: list[int]) -> list[dict]:
    """GMC minus each baseline per arm, paired by seed, in the replicate and in the committed runs."""
    out = []
    for arm in sorted(set(rep["arm"])):
        for est in sorted(set(rep.loc[(rep["arm"] == arm) & (rep["estimator"] != "gmc") & (rep["delay"] > 0),
                                      "estimator"])):
            pair = {}
            for name, df in (("replicate", rep), ("committed", com)):
                d = df[(df["arm"] == arm) & df["seed"].isin(seeds) & df["complete"] & (df["delay"] > 0)]
                g = d[d["estimator"] == "gmc"].set_index("seed")["pc_final"]
                b = d[d["estimator"] == est].set_index("seed")["pc_final"]
                common = sorted(set(g.index) & set(b.index))
                pair[name] = bootstrap((g.loc[common] - b.loc[common]).to_numpy(float))
            rp, cm = pair["replicate"], pair["committed"]
            agree = (np.sign(rp["mean"]) == np.sign(cm["mean"]) or rp["low"] <= 0 <= rp["high"]
                     or cm["low"] <= 0 <= cm["high"])
            out.append({"arm": arm, "baseline": est, "agree_in_sign": bool(agree),
                        **{f"{k}_gmc_minus": {x: v[x] for x in ("mean", "low", "high", "n")} for k, v in pair.items()}})
    return out


def verdicts(rep: pd.DataFrame, seeds: list[int]) -> dict:
    """H1, H2, H4 and M1, M2b on the replicate alone, by the studies' own rules."""
    from studies.common.mechanism_rules import m1, m2b
    from studies.common.staleness_rules import hypotheses

    r = rep[rep["seed"].isin(seeds)]
    study = hypotheses(r[r["arm"] == "study"].assign(horizon="long"))
    return {"H1": study["H1"], "H2": study["H2"], "H4": study["H4"], "M1": m1(r), "M2b": m2b(r)}


def committed_verdicts() -> dict[str, str]:
    """The committed verdicts the replicate re-decides, read from ``results/llm/study/verdicts.json``
    (H1, H2, H4) and ``results/llm/mechanism/verdicts.json`` (M1, M2b)."""
    from schema.results import read_json

    study = read_json(grid_folder("primary") / "verdicts.json")
    mech = read_json(grid_folder("mechanism") / "verdicts.json")["hypotheses"]
    return {**{h: study[h]["verdict"] for h in ("H1", "H2", "H4")}, **{h: mech[h]["verdict"] for h in ("M1", "M2b")}}


def machines(rep: pd.DataFrame, root: Path | None = None) -> list[dict]:
    """The machines that made the replicate's complete runs, as each run's ``config.json`` records
    them (the instruction set torch dispatched to, the CPU-flag digest, the forced kernel variables),
    with the number of runs each made, most first."""
    from schema.results import read_run_doc

    folder = root or grid_folder(GRID)
    count: dict[str, dict] = {}
    for run in rep.loc[rep["complete"], "run"]:
        m = read_run_doc(folder / run).get("machine") or {}
        rec = {"cpu_capability": m.get("cpu_capability"), "cpu_flags": m.get("cpu_flags"),
               "kernel_env": m.get("kernel_env") or {}}
        key = repr(sorted((k, repr(v)) for k, v in rec.items()))
        count.setdefault(key, {**rec, "runs": 0})["runs"] += 1
    return sorted(count.values(), key=lambda r: -r["runs"])


def analyse(rep: pd.DataFrame, com: pd.DataFrame, root: Path | None = None) -> dict:
    seeds = whole_seeds(rep)
    present = sorted(set(rep["seed"]))
    use = seeds if seeds else present
    out = {"format": FORMAT, "seeds_whole": seeds, "provisional": len(seeds) < SEEDS_NEEDED,
           "cells": cells(rep, com, use), "signs": signs(rep, com, use), "machines": machines(rep, root)}
    if len(seeds) >= 2:
        v, ref = verdicts(rep, seeds), committed_verdicts()
        out["verdicts"] = {h: {"replicate": x["verdict"], "committed": ref[h], "same": x["verdict"] == ref[h],
                               "detail": x} for h, x in v.items()}
    if not out["provisional"]:
        out["survives"] = (all(x["same"] for x in out["verdicts"].values())
                           and all(c["shares_agree"] for c in out["cells"])
                           and all(s["agree_in_sign"] for s in out["signs"]))
    return out


def main(argv: list[str] | None = None) -> int:
    from schema.io import check_output, write_json

    p = argparse.ArgumentParser(prog="python -m studies.replicate", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="default: results/llm/replicate_avx2/comparison.json")
    args = p.parse_args(argv)
    out = Path(args.json) if args.json else grid_folder(GRID) / "comparison.json"
    try:
        check_output(out)
        result = analyse(*read())
    except (ValueError, OSError) as exc:  # an unwritable --json too, before any work
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(out, result)
    state = "provisional" if result["provisional"] else ("survive" if result["survives"] else "do NOT all survive")
    print(f"replicate: {len(result['seeds_whole'])} whole seeds of {SEEDS_NEEDED}; verdicts {state}")
    for c in result["cells"]:
        print(f"  {c['arm']:9s} {c['estimator']:9s} stable {c['replicate_stable'][0]}/{c['replicate_stable'][1]} vs "
              f"{c['committed_stable'][0]}/{c['committed_stable'][1]} (difference [{c['share_difference'][0]:+.2f}, "
              f"{c['share_difference'][1]:+.2f}]); pc {c['pc_replicate']:.3f} vs {c['pc_committed']:.3f}")
    for h, v in result.get("verdicts", {}).items():
        print(f"  {h}: replicate {v['replicate']}, committed {v['committed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
