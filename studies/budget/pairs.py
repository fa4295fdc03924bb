"""The second moment of every correction at the frozen pairs: the mean squared error of a batch of B prompts x G
completions, at every split of N = B G in {64, 128, 512} (docs/PREREGISTRATION-BUDGET.md).

    python -m studies.budget.pairs                    # every pair -> results/llm/budget/pairs.{csv,json},
                                                      #               results/llm/budget/pair_warning_stats.csv
    python -m studies.budget.pairs --only p1 --quick  # one pair on a small pool (a smoke run; not the result)

The pairs, their retraining from the committed warm start to update 70 (cached in ``results/cache/
group_size_pairs``, shared with the group-size study), their pools and the corrections' groups are those of
:mod:`studies.group_size.pairs` (the same seeds and draws: the expected-update vectors, hence the squared bias, are
the committed measurement's). One pass of per-completion gradients per pair (:mod:`studies.budget.pairs_pass`)
gives every (B, G, correction) cell (:mod:`studies.budget.pairs_moments` states the law and the estimates).
Checks, in the json: IS's bias is 0 within 2 s.e. (the committed gate a); the squared bias equals the committed
``pairs.csv`` within :data:`BIAS_Z` s.e.; at two cells one group's second moment meets a direct Monte Carlo
(:mod:`studies.budget.pairs_checks`); the sketched Gram matrix of two blocks meets the exact one. A pair already in
``pairs.json`` is kept (``--redo`` measures it again: nothing is overwritten silently); the pools are cached per
pair (``results/cache/budget_pairs``), so an interrupted run resumes at its pair's gradient pass.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from studies.common.pairs import PAIRS, PER_SAMPLE, REPLICATES, SIM_SEED, load_pools, pair_Gs
from studies.common.pool import POOL_SEED, drift_stats

from .pairs_checks import MC_CELLS, run_checks, warning_stats
from .pairs_grads import CountSketch
from .pairs_moments import cell_moments, equal_reward_share, moments_json, simulate, summary, table_row
from .pairs_pass import Q_STORED, TABLE_G, Accumulators, prompt_pass, replicate_coefficients, stored_coefficients

FORMAT = "gmc-grpo-budget-pairs/1"
BUDGETS = (64, 128, 512)
B_RANGE = (2, 128)
BIAS_Z = 2.0
"""The squared bias agrees with the committed measurement's when within this many combined standard errors (check
(c) as pre-registered; the committed table was measured with 4, which :mod:`studies.budget.analysis` records as a
departure: it applies 2 to the stored z values, and no pair's status changes)."""
COLUMNS = ("pair", "estimator", "B", "G", "N", "rel_mse", "bias_sq", "var", "cos_mean", "cos_neg_share", "max_share",
           "equal_reward_share", "se", "bias_se", "var_se", "within", "within_se", "between", "between_se", "cos_se",
           "cos_neg_share_se", "max_share_se", "max_coef_share", "zero_update_share", "target_ok", "checks_passed")
"""The table's columns: the 13 of the design, then the standard errors and terms behind them, and whether the pair's
target is measurable and its validity checks passed (``pairs.json`` holds each check)."""
WARN_COLUMNS = ("pair", "statistic", "G", "B", "N", "mean", "se", "median", "q10", "q90")


def splits(n: int) -> list[tuple[int, int, int]]:
    """Every (B, G, N) with N in :data:`BUDGETS`, B and G powers of two in [2, 128] and G at most ``n``."""
    return [(N // G, G, N) for N in BUDGETS for G in TABLE_G
            if G <= n and N % G == 0 and B_RANGE[0] <= N // G <= B_RANGE[1]]


def compute(ctx: dict, R: int = REPLICATES, mc_cells=MC_CELLS, log=print) -> dict:
    """Every cell of one pair from ``ctx`` (:func:`load`, or a test's small pool): rows, checks, costs."""
    pair, pi = ctx["pair"], ctx["models"][0]
    b, on, lp_b = ctx["b"], ctx["on"], ctx["lp_b"]
    eps = float(ctx["config"].eps)
    cost = dict(ctx.get("cost", {}))
    P, M = b["rewards"].shape
    n = M // R
    tok_lr = (lp_b - b["blogp"]) * b["mask"]
    logw = tok_lr.sum(-1)
    drift = drift_stats(logw, tok_lr, b["mask"])
    Gs = [G for G in pair_Gs(pair) if G <= n]
    keys = [(e, G) for e in _estimators() for G in TABLE_G if G <= n]
    rng = np.random.default_rng([POOL_SEED, int(pair.name[1:])])
    clock = _Clock()
    with clock("target"):
        on_coef_zero = all(bool((on["rewards"][:, r * n:(r + 1) * n] == on["rewards"][:, r * n:r * n + 1]).all())
                           for r in range(R))
        if on_coef_zero:  # every on-policy group has equal rewards: grad J's estimate is 0, nothing is relative to it
            T = None
        else:
            from .pairs_pass import target_vectors

            T = target_vectors(pi, on, R, n)
    sketch = CountSketch(sum(p.numel() for p in pi.parameters() if p.requires_grad))
    acc = None
    kept = {k: torch.zeros(3, P, R, Q_STORED, dtype=torch.float64) for k in keys}  # amax, asum, cmax
    caps, reps = {}, []
    for r in range(R):  # the coefficients first, every replicate, in the committed measurement's order of draws
        rows = slice(r * n, (r + 1) * n)
        with clock("coefficients"):
            rep = replicate_coefficients(lp_b[:, rows], b["blogp"][:, rows], b["mask"][:, rows], b["rewards"][:, rows],
                                         eps, rng, Gs)
            for k, stats in stored_coefficients(rep["groups"], b["rewards"][:, rows], n).items():
                for j, x in enumerate(stats):
                    kept[k][j, :, r] = x
            caps[r] = rep["cap"]
            rep["groups"] = {k: (pick.to(torch.int16 if n < 2**15 else torch.int64), coef)
                             for k, (pick, coef) in rep["groups"].items() if k in kept}
            reps.append(rep)
    names = reps[0]["names"]
    log(f"{pair.name}: coefficients of {R} replicates ({clock.total():.0f} s)")
    t_grad = 0.0
    if T is not None:
        acc = Accumulators(reps, P, sketch.dim, keys)
        for p in range(P):
            with clock("gradient_pass"):
                t_grad += prompt_pass(pi, b, p, reps, T, acc, sketch)
            if (p + 1) % 4 == 0 or p + 1 == P:
                log(f"{pair.name}: gradients of prompt {p + 1}/{P} ({clock.total():.0f} s)")
    cost["per_completion_gradients_cpu"] = t_grad
    rows_out, by_cell = [], {}
    with clock("cells"):
        gT = (T @ T.T).double() if T is not None else None
        V = acc.V if acc is not None else None
        from stats import offdiagonal_mean

        for ei, (est, G) in enumerate(keys):
            Bs = sorted({B for B, GG, _ in splits(n) if GG == G})
            i = names.index((est, 0) if est in PER_SAMPLE else (est, G))
            stored = {"G": G, **dict(zip(("amax", "asum", "cmax"), kept[(est, G)]))}
            mom = None
            if acc is not None:
                mom = cell_moments(V[:, i], T, acc.second[(est, G)], acc.gm[:, i], Bs)
                stored.update(U=acc.U[(est, G)], norm2=acc.norm2[(est, G)], dotT=acc.dotT[(est, G)])
            by_cell[f"{est}/G{G}"] = moments_json(mom, G)
            share = equal_reward_share(b["rewards"], G)
            for B in Bs:
                sim = simulate(stored, B, R, [SIM_SEED, int(pair.name[1:]), ei, G, B],
                               grad_sq=(lambda keep: offdiagonal_mean(gT, keep)) if acc is not None else None)
                rows_out.append(table_row(pair.name, est, B, G, mom, sim, share))
    checks = {}
    with clock("checks"):
        if acc is not None:
            checks = run_checks(ctx, acc, by_cell, eps, BIAS_Z, mc_cells, ctx.get("quick", False), log)
    with clock("warning_stats"):
        warn = [{"pair": pair.name, **w} for w in warning_stats(logw, eps, [SIM_SEED, int(pair.name[1:])])]
    cost.update(clock.costs)
    return {"pair": pair.name, "run": ctx.get("run"), "seed": ctx.get("seed"), "M": M, "replicates": R,
            "n_per_replicate": n, "prompts": P, "G": [G for G in TABLE_G if G <= n],
            **{f"drift_{k}": v for k, v in drift.items()}, "first_pool": ctx.get("first"),
            "committed_rows": ctx.get("committed_rows"), "cap_share": {G: float(np.mean([caps[r][G] for r in caps]))
                                                                      for G in Gs},
            "target_zero": T is None, "sketch_dim": sketch.k, "stored_groups_per_block": Q_STORED,
            "moments": by_cell, "summary": summary(rows_out, by_cell, BUDGETS), "checks": checks, "rows": rows_out,
            "warning_rows": warn, "cost_s": cost}


def _estimators():
    from studies.common.pairs import ESTIMATORS

    return ESTIMATORS


class _Clock:
    """Wall and CPU seconds per named stage, summed over its uses."""

    def __init__(self):
        self.costs: dict[str, dict] = {}

    def __call__(self, name: str):
        clock = self

        class _Stage:
            def __enter__(self):
                self.t, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                s = clock.costs.setdefault(name, {"wall": 0.0, "cpu": 0.0})
                s["wall"] += time.perf_counter() - self.t
                s["cpu"] += time.process_time() - self.c

        return _Stage()

    def total(self) -> float:
        return sum(s["wall"] for s in self.costs.values())


METHOD = {
    "law": "B distinct prompts of the task, one group of G each from pi_b: E|g - grad J|^2 = bias^2(G) + (V_b(G) + "
           "S_w(G) / G) / B, every term over |grad J|^2 (studies.budget.pairs_moments)",
    "bias_sq": "the committed estimator: off-diagonal mean of (V_r - T_r).(V_s - T_s) over that of T_r.T_s",
    "var": "(V_b + S_w / G) / (B |grad J|^2); S_w / G = S - mean_p |m_p|^2, V_b = P / (P - 1) (mean_p |m_p|^2 - "
           "|gbar|^2); S the mean sketched |u|^2 of the sampled groups, |gbar|^2 the off-diagonal mean of V_r.V_s, "
           "|m_p|^2 of m_p^r.m_p^s (exact); within = S_w / (G B |grad J|^2), between = V_b / (B |grad J|^2)",
    "sketch": "CountSketch of the per-completion gradients (k buckets): E<Sx,Sy> = <x,y>, Var <= (|x|^2|y|^2 + "
              "<x,y>^2) / k, so one s.d. of a squared norm is at most sqrt(2/k) of it",
    "batches": "prompts uniform with replacement on the pool's P (a repeat takes another replicate's group): the "
               "task's law up to (P-1)/P on V_b",
    "cos": "cosine of the simulated batch update to Tbar over sqrt of the cross-product |grad J|^2 (0 for a zero "
           "update); cross products of the kept groups from the sketch folded to 4096 buckets",
    "max_share": "mean over nonzero batch updates of max_i c_i / (B G), c_i = G a_i / A_i a trajectory's effective "
                 "weight (a_i its update coefficient, A_i its nonzero leave-one-out advantage)",
    "max_coef_share": "mean over nonzero batch updates of max_i |a_i| / sum_i |a_i|",
    "equal_reward_share": "mean over prompts of sum_v C(n_v, G) / C(M, G) (M the prompt's pool)",
    "se": "leave-one-replicate-out jackknife",
}


def write_tables(doc: dict, folder: Path) -> None:
    import pandas as pd

    from schema.io import atomic

    rows = [{**r, "checks_passed": p["checks"].get("passed", False)} for p in doc["pairs"].values() for r in p["rows"]]
    warn = [r for p in doc["pairs"].values() for r in p["warning_rows"]]
    atomic(folder / "pairs.csv", lambda tmp: pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp, index=False))
    atomic(folder / "pair_warning_stats.csv",
           lambda tmp: pd.DataFrame(warn, columns=list(WARN_COLUMNS)).to_csv(tmp, index=False))


def _ours(header: tuple, fixed: int):
    """A csv this command wrote: its header starts with the first ``fixed`` columns of ``header`` (later columns
    may have been added since)."""
    return lambda text: isinstance(text, str) and text.split("\n", 1)[0].startswith(",".join(header[:fixed]))


def measure_pair(name: str, quick: bool) -> dict:
    """One pair, loaded and computed, with its total cost (a worker of ``--jobs``)."""
    from schema.results import results_root

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = load_pools({p.name: p for p in PAIRS}[name], results_root() / "cache", quick)
    ctx["quick"] = quick
    res = compute(ctx)
    res["cost_s"]["total"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    res["quick"] = quick
    return res


def _measured(names: list[str], quick: bool, jobs: int, worker=None):
    """``worker(name, quick)`` (default :func:`measure_pair`) of every pair, as they finish: in this process, or
    ``jobs`` at a time in spawned worker processes."""
    worker = worker or measure_pair
    if jobs <= 1:
        for name in names:
            yield worker(name, quick)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        for fut in as_completed([ex.submit(worker, name, quick) for name in names]):
            yield fut.result()


def main(argv=None) -> int:
    from schema.io import check_output, write_json
    from schema.provenance import provenance
    from schema.results import MissingResults, read_json, results_root
    from schema.runlock import RunLock

    ap = argparse.ArgumentParser(prog="python -m studies.budget.pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, metavar="PAIR", help="pair names (without --only: every pair)")
    ap.add_argument("--quick", action="store_true", help="a small pool (4 prompts x 64-128): a smoke run, written "
                    "under results/cache/budget_pairs/quick, never as the result")
    ap.add_argument("--redo", action="store_true", help="measure pairs already in pairs.json again")
    ap.add_argument("--tables", action="store_true", help="only write pairs.csv and pair_warning_stats.csv again "
                    "from pairs.json")
    ap.add_argument("--jobs", type=int, default=1, help="pairs measured at once, each in its own process with one "
                    "torch thread (default 1)")
    args = ap.parse_args(argv)
    names = {p.name: p for p in PAIRS}
    bad = [n for n in (args.only or []) if n not in names]
    if bad:
        print(f"unknown pair {bad[0]!r}; valid: {', '.join(names)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    prereg = Path(__file__).resolve().parents[2] / "docs" / "PREREGISTRATION-BUDGET.md"
    if not args.quick and not prereg.is_file():
        print(f"error: {prereg} is missing: the pair table is measured only after its pre-registration",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    cache = results_root() / "cache"
    out = cache / "budget_pairs" / "quick" if args.quick else results_root() / "llm" / "budget"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pairs.json"
    check_output(path)
    check_output(out / "pairs.csv", legacy=_ours(COLUMNS, 13))
    check_output(out / "pair_warning_stats.csv", legacy=_ours(WARN_COLUMNS, len(WARN_COLUMNS)))
    doc = read_json(path) if path.is_file() else {"format": FORMAT, "pairs": {}}
    if doc.get("format") != FORMAT:
        print(f"error: {path} holds format {doc.get('format')!r}, not {FORMAT!r}; not replacing it", file=sys.stderr)
        return 2
    if args.tables:
        write_tables(doc, out)
        print(f"{out / 'pairs.csv'}, {out / 'pair_warning_stats.csv'}: {len(doc['pairs'])} pairs from {path}")
        return 0
    (cache / "budget_pairs").mkdir(parents=True, exist_ok=True)
    todo = [n for n in (dict.fromkeys(args.only) if args.only is not None else names)
            if n not in doc["pairs"] or args.redo]
    for name in (dict.fromkeys(args.only) if args.only is not None else names):
        if name not in todo:
            print(f"{name}: measured already ({path}); --redo to measure it again")
    try:
        with RunLock(cache / "budget_pairs"):
            start = time.perf_counter()
            run = {"pairs": [], "jobs": args.jobs, "wall": 0.0}
            doc.setdefault("invocations", []).append(run)
            for res in _measured(todo, args.quick, args.jobs):
                doc["pairs"][res["pair"]] = res
                run["pairs"].append(res["pair"])
                run["wall"] = time.perf_counter() - start
                doc.update(method=METHOD, provenance=provenance(), replicates=REPLICATES, budgets=list(BUDGETS),
                           cost_s={"wall": sum(p["cost_s"]["total"]["wall"] for p in doc["pairs"].values()),
                                   "cpu": sum(p["cost_s"]["total"]["cpu"] for p in doc["pairs"].values())})
                write_json(path, doc)
                write_tables(doc, out)
                ok = res["checks"].get("passed")
                state = "not run (no target)" if ok is None else "passed" if ok else "FAILED"
                print(f"{res['pair']}: done in {res['cost_s']['total']['wall']:.0f} s wall, "
                      f"{res['cost_s']['total']['cpu']:.0f} s CPU; checks {state} -> {path}", flush=True)
    except (MissingResults, ValueError) as exc:  # a committed run missing or unreadable, a busy lock: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
