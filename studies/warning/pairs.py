"""The frozen rule's statistic and the other candidates on the frozen pairs' pools, at G = 4 .. 128
(docs/PREREGISTRATION-WARNING.md: the law against G, shown there on the exact models only).

    python -m studies.warning --pairs              # -> results/llm/budget/pair_warning_candidates.{csv,json}
    python -m studies.warning --pairs --only p1    # one pair (pairs already measured are kept; --redo measures again)

The pools are the budget pair measurement's (``results/cache/budget_pairs/<pair>/pools.pt``, made by
:func:`studies.common.pairs.load_pools`, which makes them again where they are missing): per prompt, M completions from
pi_b with every token's log-probability under pi_b and under pi_theta, so the per-token statistics are computed, not
approximated from the sequence log-ratios. The batches are those of :func:`studies.budget.pairs_checks.warning_stats`,
the same draws in the same order from the same seed (B = N / G prompts uniform with replacement on the pool's P, one
group of G drawn without replacement from each prompt's pool): the three statistics it wrote to
``pair_warning_stats.csv`` are computed again here on the same batches, and the json records their agreement.

Each batch's statistics are read as the rule reads a run's logged columns: the update's columns (``drift/kl`` by
:func:`llm_runs.theory.kl_per_token`, ``stale/chi2`` and ``stale/chi2_token`` by :func:`llm_runs.theory.ratio_metrics`,
the ``stale/`` diagnostics by :func:`estimators.diagnostics`) through :func:`studies.warning.analysis.statistic_trace`
(``ess`` is reported as the fraction itself, not negated).

**The invariance test** (:func:`invariance`): per statistic and pair, at N = :data:`N_TEST`, the weighted least-squares
slope of the Monte Carlo mean on log2 G (weights 1 / s.e.^2; the means at different G come from independent draws),
its 95% interval and two-sided p-value; Holm over the pairs at :data:`ALPHA`. A statistic is invariant on the pools
where no pair's slope is rejected. The estimand is each pool's own law: a mean over the batch's trajectories has the
same expectation at every split of N (each trajectory is a uniform draw of a uniform prompt's pool), so for those the
test is a check of the computation; a ratio of sums over tokens (``kl``, ``chi2_token``) carries a ratio bias of order
1 / N that may differ with G; ``ess`` and ``max_share`` are not batch means.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from studies.common.pairs import WARN_BATCHES, WARN_G, WARN_N
from studies.common.pairs import warning_batches as batches  # the batches of pair_warning_stats.csv

FORMAT = "gmc-grpo-warning-pairs/1"
CSV_NAME = "pair_warning_candidates.csv"
JSON_NAME = "pair_warning_candidates.json"
COLUMNS = ("pair", "statistic", "G", "B", "N", "mean", "se", "median", "q10", "q90", "n")
"""The rows' columns: those of ``pair_warning_stats.csv`` (:data:`studies.budget.pairs.WARN_COLUMNS`), then the
number of values behind them (batches; windows for :data:`RULE`)."""
STATS = ("kl", "chi2_log", "chi2", "abs_log_w", "chi2_token", "max_share", "ess")
"""The candidates (:data:`studies.warning.analysis.STATISTICS`), ``kl`` the frozen rule's."""
RULE = "rule_fires"
"""The frozen rule at the pool's fixed drift: the share of disjoint windows of W consecutive batches (W the rule's
window) whose summary of ``kl`` (:func:`llm_runs.warning.rolling_summary`) reaches the frozen threshold."""
COMMITTED = {"chi2": "chi2_pooled", "max_share": "max_w_share", "ess": "ess_frac"}
"""The statistics ``pair_warning_stats.csv`` already holds, under its names."""
N_TEST = 128
ALPHA = 0.05
DIAG_EPS = 0.2
"""``estimators.diagnostics`` needs an eps; none of the statistics read here depends on it."""
AGREE = 1e-9
"""The recomputed statistics agree with the committed rows when every mean, median and quantile is within this of
theirs, relative to 1 + |theirs| (the same batches give the same values up to the rounding of another formula)."""


def batch_columns(lr: np.ndarray, tok_lr: torch.Tensor, mask: torch.Tensor) -> dict:
    """The logged columns the candidates are read from, of one batch: trajectory log-ratios ``lr (B, G)``, per-token
    log-ratios ``tok_lr (B G, T)`` and the completion mask ``(B G, T)``."""
    import estimators
    from llm_runs.theory import kl_per_token, ratio_metrics

    d = estimators.diagnostics(lr, DIAG_EPS)
    r = ratio_metrics(torch.from_numpy(lr), None, tok_lr, mask, "is", DIAG_EPS)
    return {"drift/kl": kl_per_token(tok_lr, mask), "stale/chi2": r["stale/chi2"],
            "stale/chi2_token": r["stale/chi2_token"], "stale/log_ratio_mean": d["log_ratio_mean"],
            "stale/log_ratio_abs_mean": d["log_ratio_abs_mean"], "stale/log_ratio_max": d["log_ratio_max"],
            "stale/mass_mean": d["mass_mean"], "stale/ess": d["ess_frac_mean"]}


def cell_values(cols, B: int, G: int) -> dict:
    """Each candidate's value per batch from the batches' columns (a DataFrame, one row per batch)."""
    from .analysis import statistic_trace

    out = {}
    for name in STATS:
        with np.errstate(over="ignore", invalid="ignore"):
            v = statistic_trace(name, cols, B, G)
        out[name] = -v if name == "ess" else v
    return out


def pool_statistics(pair: str, logw: torch.Tensor, tok_lr: torch.Tensor, mask: torch.Tensor, seed, Gs=WARN_G,
                    Ns=WARN_N, nb: int = WARN_BATCHES) -> list[dict]:
    """Rows (:data:`COLUMNS`) of every candidate at every cell of :func:`batches` over a pool: ``logw (P, M)``,
    ``tok_lr (P, M, T)`` (zero off the mask) and ``mask (P, M, T)``."""
    import pandas as pd

    P, M, T = tok_lr.shape
    if logw.shape != (P, M) or mask.shape != tok_lr.shape:
        raise ValueError(f"pool shapes disagree: logw {tuple(logw.shape)}, tok_lr {tuple(tok_lr.shape)}, "
                         f"mask {tuple(mask.shape)}")
    lw = logw.double().numpy()
    rows = []
    for N, G, B, p, members in batches(P, M, seed, Gs, Ns, nb):
        pt, mt = torch.from_numpy(p[..., None]), torch.from_numpy(members)
        tok, msk = tok_lr[pt, mt].reshape(nb, N, T), mask[pt, mt].reshape(nb, N, T)
        x = lw[p[..., None], members]
        cols = pd.DataFrame([batch_columns(x[i], tok[i], msk[i]) for i in range(nb)])
        values = cell_values(cols, B, G)
        for name, v in {**values, RULE: rule_windows(values["kl"])}.items():
            finite = bool(np.isfinite(v).all()) and len(v) > 1
            rows.append({"pair": pair, "statistic": name, "G": G, "B": B, "N": N, "mean": float(v.mean()),
                         "se": float(v.std(ddof=1) / math.sqrt(len(v))) if finite else math.nan,
                         "median": float(np.median(v)), "q10": float(np.quantile(v, 0.1)),
                         "q90": float(np.quantile(v, 0.9)), "n": len(v)})
    return rows


def rule_windows(kl: np.ndarray) -> np.ndarray:
    """1.0 per disjoint window of the frozen rule's W consecutive batches whose summary of ``kl`` reaches the frozen
    threshold, else 0.0 (:data:`RULE`)."""
    from llm_runs.warning import FROZEN, rolling_summary

    W = FROZEN["window"]
    s = rolling_summary(np.asarray(kl, float), W, FROZEN["summary"])[W - 1::W]
    return (s >= FROZEN["threshold"]).astype(float)


def agreement(rows: list[dict], committed: list[dict]) -> dict:
    """The recomputed :data:`COMMITTED` statistics against the committed rows of the same pair: the largest difference
    relative to 1 + |committed| over mean, median, q10 and q90, per statistic, and whether all are within
    :data:`AGREE` (the same batches)."""
    theirs = {(r["statistic"], int(r["G"]), int(r["N"])): r for r in committed}
    out, cells = {}, 0
    for r in rows:
        c = theirs.get((COMMITTED.get(r["statistic"]), int(r["G"]), int(r["N"])))
        if c is None:
            continue
        cells += 1
        d = max(abs(r[k] - float(c[k])) / (1 + abs(float(c[k]))) for k in ("mean", "median", "q10", "q90"))
        out[r["statistic"]] = max(out.get(r["statistic"], 0.0), d)
    return {"cells": cells, "max_rel_diff": out,
            "passed": bool(cells > 0 and all(v <= AGREE for v in out.values()))}


def pool_expectations(logw: torch.Tensor) -> dict:
    """The exact expectation, under the batches' law, of the candidates that are means over the batch's trajectories
    (each trajectory a uniform draw of a uniform prompt's pool): the mean over prompts of the mean over the prompt's
    completions of -2 log w, |log w| and w^2 (minus 1)."""
    lw = logw.double()
    P, M = lw.shape
    sq = torch.logsumexp(2 * lw, 1) - math.log(M)  # log of each prompt's mean w^2
    return {"chi2_log": float(-2 * lw.mean(1).mean()), "abs_log_w": float(lw.abs().mean(1).mean()),
            "chi2": float(torch.exp(torch.logsumexp(sq, 0) - math.log(P)) - 1)}


def exact_check(rows: list[dict], exact: dict) -> dict:
    """Per statistic of ``exact`` (:func:`pool_expectations`): the largest |mean - exact| / se over the cells."""
    out = {}
    for name, v in exact.items():
        z = [abs(r["mean"] - v) / r["se"] for r in rows if r["statistic"] == name and r["se"] > 0]
        out[name] = {"exact": v, "cells": len(z), "max_abs_z": max(z, default=math.nan)}
    return out


# --------------------------------------------------------------------------- the invariance test


def slope_test(Gs, means, ses) -> dict:
    """The weighted least-squares slope of ``means`` on log2 G (weights 1 / se^2), its s.e., 95% interval, z and
    two-sided p; the slope per doubling relative to the weighted mean. NaN p where a s.e. is not finite and > 0."""
    from scipy.stats import norm

    x, y, se = np.log2(np.asarray(Gs, float)), np.asarray(means, float), np.asarray(ses, float)
    if len(x) < 3 or not (np.isfinite(se).all() and (se > 0).all() and np.isfinite(y).all()):
        return {"slope": math.nan, "se": math.nan, "ci": [math.nan, math.nan], "z": math.nan, "p": math.nan,
                "rel_slope": math.nan, "rel_ci": [math.nan, math.nan], "mean": math.nan}
    w = 1 / se**2
    xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
    sxx = (w * (x - xm) ** 2).sum()
    b = float((w * (x - xm) * (y - ym)).sum() / sxx)
    s = float(1 / math.sqrt(sxx))
    q = float(norm.ppf(1 - ALPHA / 2))
    z = b / s
    rel = (lambda v: v / abs(ym)) if ym != 0 else (lambda v: math.nan)
    return {"slope": b, "se": s, "ci": [b - q * s, b + q * s], "z": z, "p": float(2 * norm.sf(abs(z))),
            "rel_slope": rel(b), "rel_ci": [rel(b - q * s), rel(b + q * s)], "mean": float(ym)}


def homogeneity_test(shares, ns) -> dict:
    """Pearson's chi^2 test that the share of windows the rule fires in is the same at every G (shares over ``ns``
    windows each); p = 1 where no window fires at any G, or every window at every G (identical shares)."""
    from scipy.stats import chi2_contingency

    k = np.rint(np.asarray(shares, float) * np.asarray(ns)).astype(int)
    n = np.asarray(ns, int)
    if k.sum() == 0 or (k == n).all():
        return {"chi2": 0.0, "p": 1.0}
    res = chi2_contingency(np.stack([k, n - k]), correction=False)
    return {"chi2": float(res.statistic), "p": float(res.pvalue)}


def invariance(rows: list[dict], N: int = N_TEST, alpha: float = ALPHA) -> dict:
    """Per statistic: :func:`slope_test` at every pair (the rows at N; for :data:`RULE`, :func:`homogeneity_test`),
    Holm over the pairs at ``alpha``, the pairs whose null (no change with G) is rejected, and the spread (s.d. over
    batches) at the largest G over that at the smallest."""
    from stats import holm

    out = {}
    for name in dict.fromkeys(r["statistic"] for r in rows):
        per = {}
        for pair in sorted({r["pair"] for r in rows}):
            cell = sorted((r for r in rows if r["pair"] == pair and r["statistic"] == name and int(r["N"]) == N),
                          key=lambda r: int(r["G"]))
            if not cell:
                continue
            Gs = [int(r["G"]) for r in cell]
            if name == RULE:
                t = homogeneity_test([float(r["mean"]) for r in cell], [int(r["n"]) for r in cell])
            else:
                t = slope_test(Gs, [float(r["mean"]) for r in cell], [float(r["se"]) for r in cell])
            sd = [float(r["se"]) * math.sqrt(int(r["n"])) for r in (cell[0], cell[-1])]
            per[pair] = {**t, "G": Gs, "means": [float(r["mean"]) for r in cell],
                         "spread_ratio": sd[1] / sd[0] if sd[0] > 0 else math.nan}
        rejected = holm({k: v["p"] for k, v in per.items()}, alpha)
        for k, v in per.items():
            v["holm_rejected"] = bool(rejected[k])
        bad = [k for k, v in per.items() if v["holm_rejected"]]
        untested = [k for k, v in per.items() if math.isnan(v["p"])]
        out[name] = {"N": N, "alpha": alpha, "pairs": per, "rejected": bad, "untested": untested,
                     "invariant": bool(per) and not bad and not untested}
    return out


# --------------------------------------------------------------------------- the command

METHOD = {
    "pools": "the budget pair measurement's behaviour pools (results/cache/budget_pairs/<pair>/pools.pt): per-token "
             "log-probabilities under pi_b and pi_theta of M completions of each of P prompts",
    "batches": "studies.budget.pairs_checks.warning_stats's draws (seed [SIM_SEED, pair index]): B = N / G prompts "
               "uniform with replacement, one group of G without replacement from each prompt's pool",
    "statistics": "each batch's logged columns (llm_runs.theory.kl_per_token, ratio_metrics, estimators.diagnostics) "
                  "read by studies.warning.analysis.statistic_trace; ess as the fraction",
    "se": "s.d. over the batches / sqrt(batches)",
    "invariance": f"per statistic and pair at N = {N_TEST}: weighted least-squares slope of the mean on log2 G "
                  f"(weights 1 / se^2), two-sided z-test, Holm over the pairs at {ALPHA}",
    "rule_fires": "the frozen rule at the pool's fixed drift: share of disjoint windows of the rule's W consecutive "
                  "batches whose mean per-token KL reaches the frozen threshold; Pearson's chi^2 test of one share at "
                  "every G, Holm over the pairs",
}


def pool_arrays(name: str, cache: Path, log=print) -> dict:
    """``logw``, ``tok_lr`` and ``mask`` of pair ``name``'s behaviour pool, as :func:`studies.budget.pairs.compute`
    forms them (the cached pools, or :func:`studies.common.pairs.load_pools` where they are missing)."""
    path = cache / "budget_pairs" / name / "pools.pt"
    if path.is_file():
        pools = torch.load(path, weights_only=False)
    else:
        from studies.common.pairs import PAIRS, load_pools

        log(f"{name}: {path} is missing; making the pools as the pair measurement does")
        pools = load_pools(next(p for p in PAIRS if p.name == name), cache, False, log)
    b = pools["b"]
    tok_lr = (pools["lp_b"] - b["blogp"]) * b["mask"]
    return {"logw": tok_lr.sum(-1), "tok_lr": tok_lr, "mask": b["mask"]}


def main(only=None, redo: bool = False) -> int:
    import pandas as pd

    from grids import grid_folder
    from schema.io import atomic, check_output, write_json
    from schema.provenance import provenance
    from schema.results import read_json, results_root
    from schema.runlock import RunLock
    from studies.common.pairs import PAIRS, SIM_SEED

    names = [p.name for p in PAIRS]
    bad = [n for n in (only or []) if n not in names]
    if bad:
        print(f"unknown pair {bad[0]!r}; valid: {', '.join(names)}", file=sys.stderr)
        return 2
    folder = grid_folder("budget")
    csv, js = folder / CSV_NAME, folder / JSON_NAME
    committed_csv = folder / "pair_warning_stats.csv"
    try:
        check_output(js)
        check_output(csv, legacy=lambda t: isinstance(t, str) and t.startswith(",".join(COLUMNS[:10])))
        doc = read_json(js) if js.is_file() else {"format": FORMAT, "pairs": {}}
        if doc.get("format") != FORMAT:
            raise ValueError(f"{js} holds format {doc.get('format')!r}, not {FORMAT!r}; not replacing it")
        committed = pd.read_csv(committed_csv).to_dict("records") if committed_csv.is_file() else []
        cache = results_root() / "cache"
        torch.set_num_threads(1)
        with RunLock(cache / "budget_pairs"):
            for name in (only or names):
                if name in doc["pairs"] and not redo:
                    print(f"{name}: measured already ({js}); --redo to measure it again")
                    continue
                t0, c0 = time.perf_counter(), time.process_time()
                pool = pool_arrays(name, cache, print)
                seed = [SIM_SEED, int(name[1:])]
                rows = pool_statistics(name, pool["logw"], pool["tok_lr"], pool["mask"], seed)
                agree = agreement(rows, [r for r in committed if r["pair"] == name])
                exact = exact_check(rows, pool_expectations(pool["logw"]))
                P, M, T = pool["tok_lr"].shape
                doc["pairs"][name] = {"rows": rows, "seed": seed, "prompts": P, "M": M, "T": T,
                                      "batches": WARN_BATCHES, "agreement_with_pair_warning_stats": agree,
                                      "exact_check": exact,
                                      "cost_s": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}}
                every = [r for p in doc["pairs"].values() for r in p["rows"]]
                doc.update(method=METHOD, provenance=provenance(), invariance=invariance(every))
                write_json(js, doc)
                table = pd.DataFrame(every, columns=list(COLUMNS))
                atomic(csv, lambda tmp, table=table: table.to_csv(tmp, index=False))
                kl = [r for r in rows if r["statistic"] == "kl" and r["N"] == N_TEST]
                print(f"{name}: {doc['pairs'][name]['cost_s']['wall']:.0f} s; per-token KL at N = {N_TEST}: "
                      + ", ".join(f"G = {r['G']} {r['mean']:.4g}" for r in kl) + "; the committed statistics "
                      + ("agree" if agree["passed"] else "were not found" if not agree["cells"]
                         else f"DISAGREE ({agree['max_rel_diff']})"), flush=True)
    except ValueError as exc:  # an output not ours, a busy lock, a missing committed run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in invariance_lines(doc.get("invariance", {})):
        print(line)
    return 0


def invariance_lines(inv: dict) -> list[str]:
    """One line per statistic: invariant or the pairs whose slope on log2 G Holm rejects, with the largest
    relative slope per doubling."""
    out = []
    for name, v in inv.items():
        rel = [abs(p.get("rel_slope", math.nan)) for p in v["pairs"].values()]
        rel = [x for x in rel if math.isfinite(x)]
        size = f"; largest |slope| per doubling {max(rel):.2%} of the mean" if rel else ""
        said = ("no pair's change with G rejected (Holm)" if v["invariant"] else
                f"rejected at {', '.join(v['rejected']) or 'none'}"
                + (f", not testable at {', '.join(v['untested'])}" if v["untested"] else ""))
        out.append(f"{name}: {said} over {len(v['pairs'])} pairs at N = {v['N']}{size}")
    return out
