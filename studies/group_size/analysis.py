"""The group-size study's decision rules (docs/PREREGISTRATION-GROUP-SIZE.md), one function per test,
shared by the predictions' power computation and the verdicts (``python -m studies.group_size``)."""
from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05
N_BOOT = 10_000
BOOT_SEED = 20261206


def slope_test(gmc: np.ndarray, trunc: np.ndarray, Gs, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict:
    """G3's test. ``gmc`` and ``trunc``: ``(seeds, len(Gs))`` stable outcomes (1 stable, 0 not), row i the
    same seed in both. The slope of the stable share on log2 G (least squares on the per-G shares) for
    each, and the difference GMC - TIC-trunc, with 95% percentile intervals from resampling whole seeds
    (rows of both tables together). CONFIRMED: both lower bounds above 0; REFUTED: GMC's slope or the
    difference at or below 0 as estimated; otherwise INCONCLUSIVE."""
    gmc, trunc = np.asarray(gmc, float), np.asarray(trunc, float)
    if gmc.shape != trunc.shape or gmc.ndim != 2 or gmc.shape[1] != len(Gs):
        raise ValueError(f"gmc {gmc.shape} and trunc {trunc.shape} must both be (seeds, {len(Gs)})")
    x = np.log2(np.asarray(Gs, float))
    xc = (x - x.mean()) / ((x - x.mean()) ** 2).sum()

    def slopes(a, b):
        return a.mean(-2) @ xc, b.mean(-2) @ xc

    sg, st = slopes(gmc, trunc)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(gmc), size=(n_boot, len(gmc)))
    bg, bt = slopes(gmc[pick], trunc[pick])
    q = (ALPHA / 2, 1 - ALPHA / 2)
    ci_g, ci_d = np.quantile(bg, q), np.quantile(bg - bt, q)
    if ci_g[0] > 0 and ci_d[0] > 0:
        verdict = "CONFIRMED"
    elif sg <= 0 or sg - st <= 0:
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "slope_gmc": float(sg), "slope_tic_trunc": float(st),
            "slope_gmc_ci": [float(c) for c in ci_g], "difference": float(sg - st),
            "difference_ci": [float(c) for c in ci_d], "seeds": int(len(gmc)),
            "shares_gmc": [float(v) for v in gmc.mean(0)], "shares_tic_trunc": [float(v) for v in trunc.mean(0)]}


def one_sided_drop(b_small: float, se_small: float, b_large: float, se_large: float, alpha: float = ALPHA) -> dict:
    """G1's per-pair test: the squared relative bias at the small G exceeds the one at the large G, one-sided
    z-test on the difference with the two jackknife errors (independent pools per G are not assumed: the
    errors add in quadrature, which is conservative for positively correlated estimates)."""
    from scipy import stats

    se = math.hypot(se_small, se_large)
    z = (b_small - b_large) / se if se > 0 else (math.inf if b_small > b_large else -math.inf)
    return {"z": float(z), "p": float(stats.norm.sf(z)), "drop": float(b_small - b_large), "se": float(se)}


# --------------------------------------------------------------------------- part 1: the frozen pairs

CAP_BINDS = 0.01
"""G1: GMC's cap binds at G = 2 when more than this share of its groups has lambda < 1."""
LOW_DRIFT_ESS = 0.5
PAIR_NAMES = tuple(f"p{i}" for i in range(1, 9))
VERDICTS_FORMAT = "gmc-grpo-group-size-verdicts/1"
G6_THRESHOLD = 0.57798249991828
"""The drift study's exploratory ESS-fraction threshold (from the first update), frozen by the
pre-registration."""
G5_MARGIN = 0.03


def _not_run(why: str) -> dict:
    return {"verdict": "INCONCLUSIVE", "why": f"not yet run: {why}"}


def pair_rows(doc: dict, pair: str, est: str) -> dict[int, dict]:
    return {int(r["G"]): r for r in doc["pairs"][pair]["rows"] if r["estimator"] == est}


def g1(doc: dict | None) -> dict:
    """G1 as pre-registered: GMC's squared relative bias falls from G = 2 to G = 128 at every qualifying pair
    (Holm), and reaches 0 (within 2 s.e.) by G = 32 at the low-drift pairs."""
    from stats import holm

    have = sorted(doc["pairs"]) if doc else []
    missing = [p for p in PAIR_NAMES if p not in have or doc["pairs"][p].get("quick")]
    if missing:
        return _not_run(f"pairs {', '.join(missing)} not measured")
    failed = [p for p in have if not doc["pairs"][p]["gates"]["passed"]]
    per, qual = {}, []
    for p in have:
        if p in failed:
            continue
        g = pair_rows(doc, p, "gmc")
        if g[2]["cap_share"] > CAP_BINDS:
            qual.append(p)
            per[p] = {"drop": one_sided_drop(g[2]["rel_bias_sq"], g[2]["se"], g[128]["rel_bias_sq"], g[128]["se"]),
                      "rise": one_sided_drop(g[128]["rel_bias_sq"], g[128]["se"], g[2]["rel_bias_sq"], g[2]["se"])}
    low = {}
    for p in have:
        if p in failed or doc["pairs"][p]["drift_ess"] < LOW_DRIFT_ESS:
            continue
        g = pair_rows(doc, p, "gmc")
        Gs = sorted(g)
        zero_from = next((G for G in Gs if all(abs(g[H]["rel_bias_sq"]) <= 2 * g[H]["se"] for H in Gs if H >= G)), None)
        above = all(g[H]["rel_bias_sq"] > 2 * g[H]["se"] for H in (32, 64, 128) if H in g)
        low[p] = {"zero_from_G": zero_from, "above_at_32_64_128": above}
    if len(qual) < 3:
        return {"verdict": "INCONCLUSIVE", "why": f"{len(qual)} pairs qualify (cap binds at G = 2, gates passed); "
                f"3 needed", "pairs": per, "low_drift": low, "failed_gates": failed}
    drop = holm({p: per[p]["drop"]["p"] for p in qual}, ALPHA)
    rise = holm({p: per[p]["rise"]["p"] for p in qual}, ALPHA)
    for p in qual:
        per[p]["drop_rejected_holm"], per[p]["rise_rejected_holm"] = bool(drop[p]), bool(rise[p])
    drops = all(drop[p] for p in qual)
    zero = all(v["zero_from_G"] is not None and v["zero_from_G"] <= 32 for v in low.values())
    if drops and zero:
        verdict = "CONFIRMED"
    elif any(rise[p] for p in qual) or any(v["above_at_32_64_128"] for v in low.values()):
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "qualifying": qual, "pairs": per, "low_drift": low, "failed_gates": failed}


def g2(doc: dict | None, predicted_b: float) -> dict:
    """G2: the law of G_half against the pair's chi^2, its slope against the exact model's."""
    from .predictions import fit_law, g_half

    have = sorted(doc["pairs"]) if doc else []
    missing = [p for p in PAIR_NAMES if p not in have or doc["pairs"][p].get("quick")]
    if missing:
        return _not_run(f"pairs {', '.join(missing)} not measured")
    pts, per = [], {}
    for p in have:
        if not doc["pairs"][p]["gates"]["passed"]:
            continue
        g, t = pair_rows(doc, p, "gmc"), pair_rows(doc, p, "tic_trunc")
        Gs = sorted(g)
        trunc = float(np.mean([t[G]["rel_bias_sq"] for G in Gs]))
        ratio = [g[G]["rel_bias_sq"] / trunc if trunc > 0 else math.inf for G in Gs]
        Gh, cens = g_half(Gs, ratio)
        chi2 = doc["pairs"][p]["drift_chi2"]
        per[p] = {"chi2": chi2, "G_half": Gh, "censored": cens, "tic_trunc_mean": trunc}
        if cens is None:
            pts.append((chi2, Gh))
    law = fit_law(*zip(*pts)) if len(pts) >= 3 else fit_law([], [])
    if law["b"] is None:
        return {"verdict": "INCONCLUSIVE", "why": f"{len(pts)} uncensored pairs; 3 needed", "pairs": per,
                "law": law, "predicted_b": predicted_b}
    inside = law["low"] <= predicted_b <= law["high"]
    return {"verdict": "CONFIRMED" if inside else "REFUTED", "pairs": per, "law": law, "predicted_b": predicted_b}


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
    from llm_runs.drift import EARLY_UPDATES
    from llm_runs.run_table import run_row
    from schema.results import read_run, read_run_config
    from studies.drift.analysis import d5_run

    row = run_row(run)
    if row is None or not row["complete"]:
        return None
    cfg = read_run_config(run)
    _, m = read_run(run)
    d = int(cfg["delay"])
    rec = d5_run(run) if d > 0 else None
    tc = rec["t_collapse"] if rec else None
    t = m["step"]
    kl = m["drift/kl"] if "drift/kl" in m else None
    early = {"kl_all": math.nan, "kl_pre": math.nan, "pre_updates": 0}
    if kl is not None and d > 0:
        win = (t >= d) & (t < d + EARLY_UPDATES)
        x = kl[win].dropna()
        early["kl_all"] = float(x.median()) if len(x) else math.nan
        pre = win & (t < tc) if tc is not None else win
        y = kl[pre].dropna()
        early["pre_updates"] = int(len(y))
        early["kl_pre"] = float(y.median()) if len(y) >= PRE_COLLAPSE_MIN else math.nan
    fixed = cfg["group_size"] == 32 and cfg["prompts_per_step"] == 16
    return {"run": run.name, "estimator": cfg["estimator"], "seed": int(cfg["seed"]), "delay": d,
            "G": int(cfg["group_size"]), "B": int(cfg["prompts_per_step"]), "fixed_prompts": fixed,
            "level": _level_of(cfg), "stable": bool(row["stable"]), "pc_final": float(row["pc_final"]),
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
    from studies.drift.analysis import boundary

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


def g4(recs, n_boot: int = 2000) -> dict:
    from llm_runs.run_table import BOOT_SEED as DRIFT_BOOT_SEED

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
    d0 = {(r["G"], r["seed"]): r["pc_final"] for r in recs if r["delay"] == 0 and r["level"] == "adamclip0.0001"}
    if any((G, s) not in d0 for G in (4, 8, 16, 32) for s in seeds):
        return _not_run("G5 needs the d = 0 control at every G, seeds 0-4")
    per, ps = {}, {}
    for G in (4, 16, 32):
        diff = np.array([d0[(G, s)] - d0[(8, s)] for s in seeds])
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
    return {"verdict": "CONFIRMED" if inside else "REFUTED" if outside else "INCONCLUSIVE", "margin": G5_MARGIN,
            "per_G": {str(G): v for G, v in per.items()}}


def g6(recs) -> dict:
    from stats import fisher_greater
    from studies.drift.analysis import _counts

    pos = [r["d5"] for r in recs if r["delay"] > 0 and r["d5"] is not None]
    if not pos:
        return _not_run("no complete d = 64 run")
    c = _counts(pos, "stale/ess@0", G6_THRESHOLD)
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
