"""The budget study's verdicts (docs/PREREGISTRATION-BUDGET.md), read from the grid and the runs it reuses.

    python -m studies.budget.analysis            # print the verdicts and every cell's shares
    python -m studies.budget.analysis --write    # and write results/llm/budget/verdicts.json

Every run of the design (:func:`studies.budget.plan.plan_rows`: the budget grid's own and the group-size runs it
reuses) is read once; a run that has not finished counts as missing. A hypothesis is decided only on whole seeds 0-4
of every cell it reads (:mod:`studies.budget.rules`); otherwise it is "not yet run", with the number of its runs
still missing. B5 also needs the frozen-pair table (``results/llm/budget/pairs.csv`` and ``pairs.json``: the pairs
whose validity checks passed).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import rules
from .grids import CAP_KAPPAS, LEVEL, MECHANISM_CELLS, SEEDS, SGD_LEVEL, splits

FORMAT = "gmc-grpo-budget-verdicts/1"
MARGIN = 0.03
"""Learned: no collapse and a final held-out pc above the warm start's by more than the studies' margin
(:data:`grids.run_table.MARGIN`; a test holds the two equal)."""
B5_BUDGETS = (64, 128, 512)
B5_CELLS = frozenset(c for c in splits() if c[0] * c[1] in B5_BUDGETS)
"""The cells B5 reads (the grid's splits at its budgets): only these need whole seeds for its verdict."""


def _read(run: Path) -> dict | None:
    from grids.run_table import run_row
    from schema.results import is_packed_run

    if not (run.is_dir() or is_packed_run(run)):
        return None
    return run_row(run)


def design_runs(read=_read, keep=None) -> pd.DataFrame:
    """One row per run of the design: its cell (arm, estimator, delay, seed, B, G, N, kappa, optimiser level), its
    source, whether it finished, and its outcomes (learned, held, pc0, pc_final; NaN where it has not finished).
    ``keep``: a predicate on :func:`studies.budget.plan.plan_rows`' rows (None: every run)."""
    from .plan import plan_rows

    rows = []
    for r in plan_rows():
        if keep is not None and not keep(r):
            continue
        c = r["cell"]
        rec = read(r["run"])
        done = bool(rec is not None and rec.get("finished"))
        learned = done and not bool(rec["collapsed"]) and float(rec["pc_final"]) - float(rec["pc0"]) > MARGIN
        rows.append({"name": r["name"], "arm": c.arm, "estimator": c.estimator, "delay": c.delay, "seed": c.seed,
                     "B": c.overrides["prompts_per_step"], "G": c.overrides["group_size"], "N": r["N"],
                     "kappa": c.overrides.get("gmc_cap_kappa"),
                     "level": SGD_LEVEL if c.arm.startswith(SGD_LEVEL) else LEVEL, "source": r["source"],
                     "finished": done, "learned": float(learned) if done else math.nan,
                     "held": float(bool(rec["stable"])) if done else math.nan,
                     "pc0": float(rec["pc0"]) if done else math.nan,
                     "pc_final": float(rec["pc_final"]) if done else math.nan})
    return pd.DataFrame(rows)


def cell_table(df: pd.DataFrame, estimator: str, delay: int, value: str = "learned", level: str = LEVEL,
               kappa=None, cells=None) -> tuple[dict | None, int]:
    """``({(B, G): (seeds,)}, missing)`` for one arm of the design: None unless every cell holds whole seeds 0-4."""
    sel = df[(df["estimator"] == estimator) & (df["delay"] == delay) & (df["level"] == level)]
    sel = sel[sel["kappa"].isna()] if kappa is None else sel[sel["kappa"] == kappa]
    if cells is not None:
        sel = sel[[(b, g) in cells for b, g in zip(sel["B"], sel["G"])]]
    missing = int((~sel["finished"]).sum())
    if missing or sel.empty:
        return None, missing
    out = {}
    for (B, G), x in sel.groupby(["B", "G"]):
        x = x.set_index("seed").reindex(list(SEEDS))
        out[(int(B), int(G))] = x[value].to_numpy(float)
    return out, 0


PAIR_IS_Z = 2.0
"""Check (a): IS's ``bias_sq`` within this many s.e. of 0 at every G (the pre-registration's Part A)."""
PAIR_MC_Z = 4.0
"""Check (b): the direct Monte Carlo within this many s.e. of the pool's second moment."""
PAIR_BIAS_Z = 2.0
"""Check (c): ``bias_sq`` within this many combined s.e. of the committed group-size measurement."""


def pair_status(doc: dict) -> dict:
    """Per pair of ``pairs.json``, the pre-registered validity checks (a)-(c) applied to its stored measurements:
    ``a``, ``b``, ``c`` and ``passed`` (all three), with the numbers they read. Check (b)'s standard error is the
    pair code's (the direct draws', the pool's jackknife and the sketch's one s.d., fixed before the measurement);
    ``b_without_sketch`` and ``passed_without_sketch`` read it without the sketch's term (the registration names no
    term). The pair code's own gate (``checks.passed``: (c) at 4 s.e., and the sketch against the exact Gram matrix,
    which the registration states beside the table without gating on it) is kept as ``measured_passed``. A pair
    whose on-policy groups all have equal rewards has no target: no check runs, it is excluded, saying why."""
    out = {}
    for name, p in sorted((doc.get("pairs") or {}).items()):
        c = p.get("checks") or {}
        if p.get("target_zero") or not c:
            out[name] = {"passed": False, "passed_without_sketch": False, "measured_passed": c.get("passed"),
                         "why": "no target: every on-policy group has equal rewards, so grad J's estimate is 0 and "
                                "no check or relative term is defined"}
            continue
        is_cells = [v["bias_sq"] for k, v in (p.get("moments") or {}).items() if k.startswith("is/") and v]
        is_z = [abs(b["value"]) / b["se"] if b["se"] > 0 else math.inf for b in is_cells]
        mc = c.get("direct_mc") or []
        z_full = [float(m["z"]) for m in mc]
        z_bare = [(m["direct"] - m["pool"]) / math.hypot(m["direct_se"], m["pool_se"]) for m in mc]
        cb = c.get("committed_bias") or {}
        a = bool(is_z) and max(is_z) <= PAIR_IS_Z
        b_full = bool(mc) and max(map(abs, z_full)) <= PAIR_MC_Z
        b_bare = bool(mc) and max(map(abs, z_bare)) <= PAIR_MC_Z
        cc = bool(cb.get("available")) and float(cb["max_abs_z"]) <= PAIR_BIAS_Z
        failed = [(a, f"(a) IS's bias_sq beyond {PAIR_IS_Z:g} s.e. of 0"),
                  (b_full, f"(b) the direct Monte Carlo beyond {PAIR_MC_Z:g} s.e."),
                  (cc, f"(c) bias_sq beyond {PAIR_BIAS_Z:g} s.e. of the committed value" if cb.get("available")
                   else "(c) no committed value to compare")]
        why = [w for ok, w in failed if not ok]
        out[name] = {"a": a, "b": b_full, "b_without_sketch": b_bare, "c": cc, "passed": a and b_full and cc,
                     "passed_without_sketch": a and b_bare and cc, "measured_passed": c.get("passed"),
                     "sketch_passed": (c.get("sketch") or {}).get("passed"), "is_max_z": max(is_z, default=math.nan),
                     "mc_z": z_full, "mc_z_without_sketch": z_bare, "committed_max_abs_z": cb.get("max_abs_z"),
                     "why": "; ".join(why) or None}
    return out


def read_pair_inputs(folder: Path) -> tuple[pd.DataFrame | None, dict | None, pd.DataFrame | None]:
    """``folder``'s pair table, read once: the rows of the pairs that pass the pre-registered checks, every pair's
    :func:`pair_status`, and the rows of those that pass with check (b) read without the sketch's term (None for
    what is not there yet: ``pairs.json`` for the status, both files for the rows)."""
    from schema.results import read_json

    csv, js = folder / "pairs.csv", folder / "pairs.json"
    status = pair_status(read_json(js)) if js.is_file() else None
    if status is None or not csv.is_file():
        return None, status, None
    tab = pd.read_csv(csv)

    def rows(reading: str) -> pd.DataFrame:
        return tab[tab["pair"].isin({n for n, st in status.items() if st[reading]})]
    return rows("passed"), status, rows("passed_without_sketch")


def read_pairs(folder: Path) -> pd.DataFrame | None:
    """The pair table's rows of the pairs that pass the pre-registered checks (None: no table yet)."""
    return read_pair_inputs(folder)[0]


def b5_inputs(df: pd.DataFrame, pairs: pd.DataFrame, value: str = "learned") -> tuple[dict, dict, dict] | None:
    """B5's strata (correction, N): the pairs' median ``rel_mse`` per split, the grid's learned share (``value``:
    or held) and mean final pc per split; None while a cell B5 reads lacks whole seeds."""
    mse, out, tb = {}, {}, {}
    for e in ("gmc", "tic_trunc", "topr", "is"):
        tab, _ = cell_table(df, e, 64, value, cells=B5_CELLS)
        pcs, _ = cell_table(df, e, 64, "pc_final", cells=B5_CELLS)
        if tab is None:
            return None
        for N in B5_BUDGETS:
            splits = [c for c in tab if c[0] * c[1] == N]
            m = pairs[(pairs["estimator"] == e) & (pairs["N"] == N)].groupby(["B", "G"])["rel_mse"].median()
            have = [c for c in splits if c in m.index]
            mse[(e, N)] = {c: float(m.loc[c]) for c in have}
            out[(e, N)] = {c: float(np.mean(tab[c])) for c in have}
            tb[(e, N)] = {c: float(np.mean(pcs[c])) for c in have}
    return mse, out, tb


def _share_records(df: pd.DataFrame, pairs: pd.DataFrame | None, value: str) -> tuple[dict, dict]:
    """B1, B2, B3 and B5's records on the share ``value`` (``learned``, or ``held`` beside it) and the runs each
    still misses."""
    res, missing = {}, {}
    gmc, m1 = cell_table(df, "gmc", 64, value)
    res["B1"], missing["B1"] = (rules.b1(gmc) if gmc else None), m1
    topr, m2 = cell_table(df, "topr", 64, value)
    res["B2"], missing["B2"] = (rules.b2(gmc, topr) if gmc and topr else None), m1 + m2
    mech = set(MECHANISM_CELLS)
    g3, m3 = cell_table(df, "gmc", 64, value, cells=mech)
    caps = {k: cell_table(df, "gmc_cap", 64, value, kappa=k, cells=mech) for k in CAP_KAPPAS}
    ok3 = g3 is not None and all(t is not None for t, _ in caps.values())
    res["B3"] = rules.b3({k: t for k, (t, _) in caps.items()}, g3) if ok3 else None
    missing["B3"] = m3 + sum(m for _, m in caps.values())
    inputs = b5_inputs(df, pairs, value) if pairs is not None else None
    res["B5"] = rules.b5(*inputs) if inputs else None
    b5_missing = sum(cell_table(df, e, 64, value, cells=B5_CELLS)[1] for e in ("gmc", "tic_trunc", "topr", "is"))
    missing["B5"] = "the pair table" if pairs is None else (0 if inputs else b5_missing)
    return res, missing


def hypotheses(df: pd.DataFrame, pairs: pd.DataFrame | None) -> dict:
    """Each hypothesis' record (:mod:`studies.budget.rules`; None when it cannot be decided yet) and the runs it
    still misses, in the order of :data:`rules.HYPOTHESES`; beside them (``held``) each share rule's statistic with
    held in place of learned (no verdict; B4 reads the final pc, not a share)."""
    res, missing = _share_records(df, pairs, "learned")
    d0, missing["B4"] = cell_table(df, "gmc", 0, "pc_final")
    res["B4"] = rules.b4(d0) if d0 else None
    held, _ = _share_records(df, pairs, "held")
    return {"records": {h: res[h] for h in rules.HYPOTHESES}, "missing": {h: missing[h] for h in rules.HYPOTHESES},
            "held": held}


def cell_shares(df: pd.DataFrame) -> list[dict]:
    """Per cell and arm: finished runs, learned and held shares over them, mean final pc."""
    out = []
    keys = ["level", "kappa", "estimator", "delay", "B", "G", "N"]
    for k, x in df.fillna({"kappa": 0.0}).groupby(keys, sort=True):
        f = x[x["finished"]]
        out.append({**dict(zip(keys, k)), "runs": len(x), "finished": len(f),
                    "learned": int(f["learned"].sum()), "held": int(f["held"].sum()),
                    "pc_final": float(f["pc_final"].mean()) if len(f) else None})
    return out


def verdicts(df: pd.DataFrame, pairs: pd.DataFrame | None, status: dict | None = None,
             pairs_other: pd.DataFrame | None = None) -> dict:
    """The verdicts file: B1-B5 from ``df`` and the pairs that pass the registered checks (``pairs``), which pairs
    B5 used and which it left out and why (``status``, :func:`pair_status`), and the departures of the code from
    the pre-registration with the numbers both ways: B5 also from ``pairs_other`` (check (b) read without the
    sketch's term) where that reading keeps other pairs."""
    h = hypotheses(df, pairs)
    v = rules.verdicts(h["records"])
    doc = {"format": FORMAT, "verdicts": v, "records": rules_jsonable(h["records"]), "missing": h["missing"],
           "held_beside": {"note": "each rule's statistic with held in place of learned (secondary, no verdict; B4 "
                                   "reads the final pc, not a share)", **rules_jsonable(h["held"])},
           "runs": {"design": len(df), "finished": int(df["finished"].sum())}, "cells": cell_shares(df)}
    if status is not None:
        doc["pairs"] = {"used": sorted(n for n, st in status.items() if st["passed"]),
                        "excluded": {n: st["why"] for n, st in status.items() if not st["passed"]},
                        "checks": status}
        doc["departures"] = departures(status, df, pairs_other, h["records"].get("B5"))
    return doc


def study_doc(df: pd.DataFrame, pair_inputs: tuple) -> dict:
    """The verdicts file's document: :func:`verdicts` from ``df`` and :func:`read_pair_inputs`' triple, with the
    mediators of every finished run (:mod:`studies.budget.mediators`)."""
    from .mediators import mediator_runs, summary
    from .plan import plan_rows

    pairs, status, other = pair_inputs
    doc = verdicts(df, pairs, status, other)
    doc["mediators"] = summary(mediator_runs(df, {r["name"]: r["run"] for r in plan_rows()}))
    return doc


def departures(status: dict, df: pd.DataFrame, pairs_other: pd.DataFrame | None, b5) -> list[dict]:
    """Where the pair code departs from the registered checks, and what it changes: (c) gated at 4 s.e. by the pair
    code against the registered 2 (applied here); the sketch check gated by the pair code, a statement only in the
    registration (not a gate here); check (b)'s standard error with or without the sketch's term (B5 both ways)."""
    out = []
    c_diff = sorted(n for n, st in status.items() if "c" in st and st["measured_passed"] and not st["c"])
    zs = [st["committed_max_abs_z"] for st in status.values() if st.get("committed_max_abs_z") is not None]
    out.append({"what": "check (c): the pair code gated at 4 combined s.e. (studies.budget.pairs.BIAS_Z); the "
                        "registration says 2, applied here",
                "pairs_whose_status_changes": c_diff, "largest_abs_z": max(zs, default=None)})
    sk = sorted(n for n, st in status.items() if st.get("sketch_passed") is False and st["passed"])
    out.append({"what": "the sketch against the exact Gram matrix: a gate in the pair code, stated beside the table "
                        "in the registration (not a gate here)", "pairs_it_would_exclude": sk})
    keep = sorted(n for n, st in status.items() if st["passed"])
    other = sorted(n for n, st in status.items() if st["passed_without_sketch"])
    rec = {"what": "check (b): its standard error includes the sketch's one s.d. (the pair code's, fixed before the "
                   "measurement); the registration names no term. Without it",
           "pairs_used": keep, "pairs_used_without_sketch_term": other}
    if other != keep:
        alt = None
        if pairs_other is not None:
            inputs = b5_inputs(df, pairs_other)
            alt = rules_jsonable({"B5": rules.b5(*inputs)})["B5"] if inputs else None
        rec["B5"] = rules_jsonable({"B5": b5})["B5"] if b5 is not None else None
        rec["B5_without_sketch_term"] = alt
    out.append(rec)
    return out


def rules_jsonable(records: dict) -> dict:
    from claims.result import jsonable

    return {k: jsonable(v) for k, v in records.items()}


def summary_text(doc: dict) -> str:
    lines = [f"budget design: {doc['runs']['finished']} of {doc['runs']['design']} runs finished"]
    for h in rules.HYPOTHESES:
        v = doc["verdicts"][h]
        extra = f" (missing: {doc['missing'][h]} runs)" if v == "not yet run" and isinstance(doc["missing"][h], int) \
            else (f" (missing: {doc['missing'][h]})" if v == "not yet run" else "")
        lines.append(f"{h}: {v}{extra}")
    if "pairs" in doc:
        out = "; ".join(f"{n} ({why})" for n, why in doc["pairs"]["excluded"].items()) or "none"
        lines.append(f"B5's frozen pairs (the registered checks (a)-(c)): used {', '.join(doc['pairs']['used'])}; "
                     f"left out: {out}")
        for d in doc["departures"]:
            alt, b5 = d.get("B5_without_sketch_term"), d.get("B5")
            if alt and b5:
                lines.append(f"  departure, {d['what']}: pairs {', '.join(d['pairs_used_without_sketch_term'])}, "
                             f"B5 rho {alt['rho']:.3f} p {alt['p']:.4f} (against rho {b5['rho']:.3f} p "
                             f"{b5['p']:.4f})")
    for name, a in (doc.get("mediators") or {}).get("auc_for_learned", {}).items():
        vals = ", ".join(f"{m} {v:.2f}" for m, v in a.items() if v is not None) or "no run to compare"
        lines.append(f"mediators' AUC for learned at d = 64 (exploratory), {name}: {vals}")
    for c in doc["cells"]:
        if c["finished"]:
            k = f" kappa {c['kappa']:g}" if c["kappa"] else ""
            lines.append(f"  {c['level']} {c['estimator']}{k} d={c['delay']} {c['B']}x{c['G']}: learned "
                         f"{c['learned']}/{c['finished']}, held {c['held']}/{c['finished']}, pc {c['pc_final']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from grids import grid_folder

    p = argparse.ArgumentParser(prog="python -m studies.budget.analysis", description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="write results/llm/budget/verdicts.json")
    args = p.parse_args(argv)
    folder = grid_folder("budget")
    try:
        doc = study_doc(design_runs(), read_pair_inputs(folder))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary_text(doc))
    if args.write:
        from schema.io import write_json

        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "verdicts.json", doc)
        print(f"wrote {folder / 'verdicts.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
