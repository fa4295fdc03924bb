"""The group-size grid's verdicts G3-G7 (docs/PREREGISTRATION-GROUP-SIZE.md, part 2): each run's record
(the drift read before its collapse), the cells, and one function per hypothesis."""
from __future__ import annotations

import math

import numpy as np

from claims.llm_pairs import not_run as _not_run

from .analysis import ALPHA, G5_MARGIN, G6_THRESHOLD, slope_test

# --------------------------------------------------------------------------- part 2: the grid

PRE_COLLAPSE_MIN = 5
"""A run's drift needs at least this many pre-collapse updates in the early window."""
FAMILY_LEVELS = ("adamclip3e-05", "adamclip5.5e-05", "adamclip0.0001")


def _level_of(cfg: dict) -> str:
    opt = cfg.get("optimizer", "adam")
    return f"{'sgd' if opt == 'sgd' else 'adamclip'}{cfg['lr']:g}"


def run_record(run) -> dict | None:
    """One grid run: its per-run record, G and B, level, the early KL over the whole window and cut at the
    collapse, and its D5 record (the ESS signal's trace from the first update)."""
    from grids.run_table import run_row
    from llm_runs.drift import EARLY_UPDATES
    from schema.results import read_run, read_run_config, read_run_doc
    from studies.common.d5 import d5_run

    row = run_row(run)
    if row is None or not row["complete"]:
        return None
    cfg = read_run_config(run)
    _, m = read_run(run)
    d = int(cfg["delay"])
    rec = d5_run(run) if d > 0 else None
    tc = rec["t_collapse"] if rec else None
    t = m["step"]
    kl = m.get("drift/kl")
    early = {"kl_all": math.nan, "kl_pre": math.nan, "pre_updates": 0}
    if kl is not None and d > 0:
        win = (t >= d) & (t < d + EARLY_UPDATES)
        x = kl[win].dropna()
        early["kl_all"] = float(x.median()) if len(x) else math.nan
        pre = win & (t < tc) if tc is not None else win
        y = kl[pre].dropna()
        early["pre_updates"] = len(y)
        early["kl_pre"] = float(y.median()) if len(y) >= PRE_COLLAPSE_MIN else math.nan
    fixed = cfg["group_size"] == 32 and cfg["prompts_per_step"] == 16
    doc = read_run_doc(run)
    machine = doc.get("resumed_machine") or doc.get("machine") or {}
    return {"run": run.name, "machine": str(machine.get("cpu_flags", "unknown")),
            "resumed_elsewhere": "resumed_machine" in doc, "estimator": cfg["estimator"], "seed": int(cfg["seed"]),
            "delay": d,
            "G": int(cfg["group_size"]), "B": int(cfg["prompts_per_step"]), "fixed_prompts": fixed,
            "level": _level_of(cfg), "stable": bool(row["stable"]), "pc_final": float(row["pc_final"]),
            "wall_s": float(row["wall_s"]),
            "pc0": float(row["pc0"]), "t_collapse": tc, "collapsed": bool(rec["collapsed"]) if rec else None,
            **early, "d5": rec}


def read_grid(folders) -> list[dict]:
    from schema.results import run_folders

    out = []
    for root in folders:
        if not root.is_dir():
            continue
        for run in run_folders(root):
            r = run_record(run)
            if r is not None:
                out.append(r)
    return out


def _cells(recs, **kw):
    return [r for r in recs if all(r[k] == v for k, v in kw.items()) and not r["fixed_prompts"]]


def _outcomes(recs, est, level, Gs, seeds):
    """``(seeds, G)`` stable outcomes, None if a run is missing."""
    tab = np.full((len(seeds), len(Gs)), np.nan)
    for r in _cells(recs, estimator=est, level=level, delay=64):
        if r["seed"] in seeds and r["G"] in Gs:
            tab[seeds.index(r["seed"]), Gs.index(r["G"])] = float(r["stable"])
    return None if np.isnan(tab).any() else tab


def g3(recs, Gs=(4, 8, 16, 32)) -> dict:
    seeds = list(range(10))
    gm, tr = (_outcomes(recs, e, "adamclip0.0001", list(Gs), seeds) for e in ("gmc", "tic_trunc"))
    if gm is None or tr is None:
        return _not_run("G3 needs gmc and tic_trunc at Adam + clip 1e-4, G = 4-32, seeds 0-9")
    return slope_test(gm, tr, Gs)


def level_drift(recs, est, level, G, seeds, key="kl_pre") -> tuple[float, bool]:
    """A cell's drift as pre-registered: the median of its runs' values; with fewer than 2, the median over
    every correction's runs at (level, G) (returned with True: the fallback was used)."""
    own = [r[key] for r in _cells(recs, estimator=est, level=level, G=G, delay=64) if r["seed"] in seeds
           and math.isfinite(r[key])]
    if len(own) >= 2:
        return float(np.median(own)), False
    every = [r[key] for r in _cells(recs, level=level, G=G, delay=64) if r["seed"] in seeds and math.isfinite(r[key])]
    return (float(np.median(every)) if every else math.nan), True


def family_boundary(recs, est, G, seeds, key="kl_pre") -> tuple[float | None, str | None, list]:
    from studies.common.drift_map import boundary

    lv, notes = [], []
    for level in FAMILY_LEVELS:
        runs = [r for r in _cells(recs, estimator=est, level=level, G=G, delay=64) if r["seed"] in seeds]
        if not runs:
            continue
        dr, fb = level_drift(recs, est, level, G, seeds, key)
        lv.append((dr, float(np.mean([r["stable"] for r in runs]))))
        notes.append({"level": level, "drift": dr, "fallback": fb, "stable_share": lv[-1][1], "n": len(runs)})
    b, cens = boundary(lv)
    return b, cens, notes


BOUNDARY_ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is")
GRID_GS = (4, 8, 16, 32)


def boundaries(recs) -> list[dict]:
    """Descriptive, for F26: each correction's boundary on the pre-collapse early-KL axis at each G over the
    Adam + clip family (:data:`FAMILY_LEVELS`), from the seeds present at every level the correction ran at
    that G (none: no boundary), censored as :func:`studies.common.drift_map.boundary` says. G4 tests G = 4
    against 32 for GMC and TIC-trunc; these rows carry no test."""
    out = []
    for est in BOUNDARY_ESTIMATORS:
        for G in GRID_GS:
            per = [{r["seed"] for r in _cells(recs, estimator=est, level=lv, G=G, delay=64)} for lv in FAMILY_LEVELS]
            per = [s for s in per if s]
            seeds = sorted(set.intersection(*per)) if per else []
            if not seeds:
                continue
            b, cens, notes = family_boundary(recs, est, G, seeds)
            out.append({"estimator": est, "G": G, "seeds": seeds, "boundary": b, "censored": cens,
                        "levels": notes})
    return out


def g4(recs, n_boot: int = 2000) -> dict:
    from grids.run_table import BOOT_SEED as DRIFT_BOOT_SEED

    seeds = list(range(5))
    need = [(e, lv, G) for e in ("gmc", "tic_trunc") for lv in FAMILY_LEVELS for G in (4, 32)]
    for e, lv, G in need:
        if {r["seed"] for r in _cells(recs, estimator=e, level=lv, G=G, delay=64)} < set(seeds):
            return _not_run(f"G4 needs {e} at {lv}, G = {G}, seeds 0-4")
    out = {}
    rng = np.random.default_rng(DRIFT_BOOT_SEED)
    picks = [rng.choice(seeds, size=len(seeds), replace=True) for _ in range(n_boot)]
    for est in ("gmc", "tic_trunc"):
        b4, c4, n4 = family_boundary(recs, est, 4, seeds)
        b32, c32, n32 = family_boundary(recs, est, 32, seeds)
        diffs = []
        for pick in picks:
            sub = [dict(r, seed=i) for i, s in enumerate(pick) for r in recs if r["seed"] == s]
            x4 = family_boundary(sub, est, 4, list(range(len(pick))))[0]
            x32 = family_boundary(sub, est, 32, list(range(len(pick))))[0]
            if x4 is not None and x32 is not None:
                diffs.append(x32 - x4)
        ci = [float(np.quantile(diffs, ALPHA / 2)), float(np.quantile(diffs, 1 - ALPHA / 2))] if diffs else [None, None]
        out[est] = {"G4": {"boundary": b4, "censored": c4, "levels": n4},
                    "G32": {"boundary": b32, "censored": c32, "levels": n32},
                    "difference": None if None in (b4, b32) else b32 - b4, "ci": ci}
    g, t = out["gmc"], out["tic_trunc"]
    if g["ci"][0] is None or (g["G4"]["censored"] and g["G32"]["censored"]):
        verdict = "INCONCLUSIVE"
    elif g["ci"][0] > 0 and not (t["ci"][0] is not None and t["ci"][0] > 0):
        verdict = "CONFIRMED"
    elif g["ci"][1] <= 0:
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, **out}


def g5(recs) -> dict:
    from scipy import stats as st

    seeds = list(range(5))
    d0 = {(r["G"], r["seed"]): r for r in recs if r["delay"] == 0 and r["level"] == "adamclip0.0001"}
    if any((G, s) not in d0 for G in (4, 8, 16, 32) for s in seeds):
        return _not_run("G5 needs the d = 0 control at every G, seeds 0-4")
    per, ps = {}, {}
    for G in (4, 16, 32):
        diff = np.array([d0[(G, s)]["pc_final"] - d0[(8, s)]["pc_final"] for s in seeds])
        m, se = float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))
        per[G] = {"mean": m, "diffs": diff.tolist()}
        per[G]["se"] = se
    # Holm over the three: the k-th smallest p-value's level alpha / (3 - k); the interval at that level
    for G in per:
        m, se = per[G]["mean"], per[G]["se"]
        t = (abs(m) - G5_MARGIN) / se if se > 0 else math.inf
        ps[G] = float(st.t.sf(-t, len(seeds) - 1)) if se > 0 else 0.0
    order = sorted(per, key=lambda G: ps[G])
    for k, G in enumerate(order):
        a = ALPHA / (3 - k)
        q = st.t.ppf(1 - a / 2, len(seeds) - 1)
        per[G]["ci"] = [per[G]["mean"] - q * per[G]["se"], per[G]["mean"] + q * per[G]["se"]]
        per[G]["holm_level"] = a
    inside = all(-G5_MARGIN <= per[G]["ci"][0] and per[G]["ci"][1] <= G5_MARGIN for G in per)
    outside = any(per[G]["ci"][0] > G5_MARGIN or per[G]["ci"][1] < -G5_MARGIN for G in per)
    held = {str(G): [sum(d0[(G, s)]["stable"] for s in seeds), len(seeds)] for G in (4, 8, 16, 32)}
    return {"verdict": "CONFIRMED" if inside else "REFUTED" if outside else "INCONCLUSIVE", "margin": G5_MARGIN,
            "per_G": {str(G): v for G, v in per.items()}, "d0_held": held}


def g6(recs) -> dict:
    from stats import fisher_greater
    from studies.common.d5 import counts
    from studies.group_size.grids import GRIDS

    planned = {c.name for c in GRIDS["group_size"].cells() if c.delay > 0}
    have = {r["run"] for r in recs if r["delay"] > 0}
    if not planned <= have:
        return _not_run(f"G6 reads every d = 64 run of seeds 0-4 ({len(planned & have)} of {len(planned)} complete)")
    pos = [r["d5"] for r in recs if r["delay"] > 0 and r["d5"] is not None]
    c = counts(pos, "stale/ess@0", G6_THRESHOLD)
    (h, nh), (f, nf) = c["hits"], c["false_alarms"]
    p = fisher_greater([[h, nh - h], [f, nf - f]]) if nh and nf else math.nan
    if nh and nf and p < ALPHA and h / nh > f / nf:
        verdict = "CONFIRMED"
    elif nh >= 10 and nf >= 10 and (p >= ALPHA or not h / nh > f / nf):
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "threshold": G6_THRESHOLD, **c, "p_fisher": p, "runs": len(pos)}


def g7(recs) -> dict:
    """Exploratory: per G and correction, the best mean final pc at d = 64 over the levels, the delay cost
    against the d = 0 control, and the log-log slope of the cost on G beside -2/5 (no verdict)."""
    out = {}
    d0 = {G: np.mean([r["pc_final"] for r in recs if r["delay"] == 0 and r["G"] == G]) for G in (4, 8, 16, 32)
          if any(r["delay"] == 0 and r["G"] == G for r in recs)}
    for est in ("gmc", "tic_trunc", "tic_mask", "topr", "is"):
        per = {}
        for G in (4, 8, 16, 32):
            means = {}
            for lv in {r["level"] for r in recs}:
                xs = [r["pc_final"] for r in _cells(recs, estimator=est, level=lv, G=G, delay=64)]
                if xs:
                    means[lv] = float(np.mean(xs))
            if means and G in d0:
                best = max(means, key=means.get)
                per[G] = {"best_level": best, "best_pc": means[best], "delay_cost": float(d0[G] - means[best])}
        slope = None
        pts = [(G, v["delay_cost"]) for G, v in per.items() if v["delay_cost"] > 0]
        if len(pts) >= 3:
            x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
            slope = float(np.polyfit(x, y, 1)[0])
        out[est] = {"per_G": {str(G): v for G, v in per.items()}, "slope": slope}
    return {"verdict": "EXPLORATORY", "abstract_exponent": -0.4, "corrections": out}


# --------------------------------------------------------------------------- the G = 8 cells against the drift map

PERF = "perf/"
SETTINGS_IGNORED = ("out", "cache_dir")


def committed_counterpart(name: str):
    """The committed drift-map run (folder or packed) with a G = 8 cell's settings: the drift grid's levels, the
    mechanism grid's Adam + clip 1e-4 arm; None for a cell the map did not run."""
    from grids import grid_folder
    from schema.results import is_packed_run

    head, rest = name.split("_G8-", 1) if "_G8-" in name else (None, None)
    if head is None:
        return None
    level = head.removeprefix("long-")
    if level == "adamclip0.0001":
        return grid_folder("mechanism") / f"long-adamclip-{rest}"
    for grid in ("drift", "drift_decisive"):
        path = grid_folder(grid) / f"long-{level}-{rest}"
        if path.exists() or is_packed_run(path):
            return path
    return None


def g8_against_committed(folder) -> list[dict]:
    """Each finished G = 8 cell of the grid beside its committed drift-map run: the settings that differ and
    whether every metric but the timings is identical (on a machine that rounds as the committed runs did,
    the pre-registration's rerun of G = 8 must reproduce them)."""
    from schema.results import is_packed_run, read_run, read_run_config, run_finished, run_folders

    out = []
    for run in run_folders(folder):  # folders or the packed grid's runs
        if "_G8-" not in run.name or not run_finished(run):
            continue
        other = committed_counterpart(run.name)
        if other is None or not (other.exists() or is_packed_run(other)):
            continue
        ca, cb = read_run_config(run), read_run_config(other)
        diff = sorted(k for k in set(ca) | set(cb) if k not in SETTINGS_IGNORED and ca.get(k) != cb.get(k))
        _, ma = read_run(run)
        _, mb = read_run(other)
        cols = [c for c in ma.columns if not c.startswith(PERF) and c in mb.columns]
        same = ma[cols].reset_index(drop=True).equals(mb[cols].reset_index(drop=True))
        out.append({"run": run.name, "committed": f"{other.parent.name}/{other.name}", "settings_differ": diff,
                    "identical": bool(same)})
    return out
