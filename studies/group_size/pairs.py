"""The frozen-pair measurement of the group-size bias law (docs/PREREGISTRATION-GROUP-SIZE.md, part 1).

    python -m studies.group_size.pairs                 # every pair -> results/llm/group_size/pairs.{csv,json}
    python -m studies.group_size.pairs --only p1 --quick   # one pair on a small pool (a smoke run; not the result)

Per pair (pi_b, pi) = (theta_{t-64}, theta_t) at update t = :data:`T_PAIR` of a d = 64 run retrained from the
committed warm start, a pool of completions from pi_b and an independent on-policy pool from pi, each
split into replicates. The expected update of a correction at group size G is the average of each
completion's coefficient -d loss / d log pi (the correction's registered loss, :func:`estimators.losses.
policy_loss`) over random groups of G drawn without replacement from the replicate's completions of a
prompt; one backward pass of ``sum coefficient x log pi`` per (correction, G) vector gives the update.
The bias is measured by cross-products of independent replicates (:func:`studies.group_size.predictions.
cross_bias`'s estimator, here against a target with its own noise). Every pair's retraining resumes from
its cached weights (``results/cache/group_size_pairs``), and a pair already in ``pairs.json`` is not
measured again (``--redo`` to replace it: nothing is overwritten silently).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from studies.common.pairs import (
    ESTIMATORS,
    LOW_ESS,
    M_BASE,
    M_LOW_ESS,
    PAIRS,
    PER_SAMPLE,
    REPLICATES,
    T_PAIR,
    Pair,
    committed_run,
    pair_Gs,
    pair_runs,
    retrain,
)
from studies.common.pool import (
    DRAWS,
    POOL_SEED,
    PROMPTS,
    coefficients,
    cross_norm,
    drift_stats,
    loo_target,
    mc_agreement,
    merge,
    per_sample_vectors,
    pool_prompts,
    relative_bias,
    sample_pool,
    token_logp,
)

FORMAT = "gmc-grpo-group-size-pairs/1"

# --------------------------------------------------------------------------- one pair


def measure(pair: Pair, cache: Path, quick: bool = False, log=print) -> dict:
    from llm_runs.config import resolve_config
    from llm_runs.presets import load_pretrained
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import default_max_new_tokens, get_warm_start

    t0 = time.perf_counter()
    run, seed, cand = committed_run(pair)
    log(f"{pair.name}: retraining {run.name} to update {T_PAIR}")
    trained = retrain(pair, run, cache, log)
    config = resolve_config(trained["config"])
    task = build_task(config)
    ws = get_warm_start(config, task, log)
    pi, tok = load_pretrained(ws.path, config.dtype, config.device)
    pib, _ = load_pretrained(ws.path, config.dtype, config.device)
    pi.load_state_dict(trained["current"])
    pib.load_state_dict(trained["behaviour"])
    pi.eval()
    pib.eval()
    for p in pib.parameters():
        p.requires_grad_(False)
    max_new = default_max_new_tokens(config, task)
    idx = pool_prompts(task)[: (4 if quick else PROMPTS)]
    m_base, m_low = (64, 128) if quick else (M_BASE, M_LOW_ESS)
    t1 = time.perf_counter()
    with torch.no_grad():
        b = sample_pool(pib, tok, task, idx, m_base, 0, max_new, chunk=min(128, m_base))
        lp_b = token_logp(pi, b)
        first = drift_stats(((lp_b - b["blogp"]) * b["mask"]).sum(-1), (lp_b - b["blogp"]), b["mask"])
        M = m_base
        if first["ess"] < LOW_ESS:
            more = sample_pool(pib, tok, task, idx, m_low - m_base, 0, max_new, chunk=min(128, m_base), start=m_base)
            b = merge(b, more)
            lp_b = torch.cat([lp_b, token_logp(pi, more)], 1)
            M = m_low
        on = sample_pool(pi, tok, task, idx, M, 1, max_new, chunk=min(128, m_base))
    t_sample = time.perf_counter() - t1
    tok_lr = (lp_b - b["blogp"]) * b["mask"]
    logw = tok_lr.sum(-1)
    drift = drift_stats(logw, tok_lr, b["mask"])
    n = M // REPLICATES
    Gs = [G for G in pair_Gs(pair) if G <= n]
    rng = np.random.default_rng([POOL_SEED, int(pair.name[1:])])
    eps = float(config.eps)
    t2 = time.perf_counter()
    vecs: dict[tuple, list] = {}
    targets, caps, gate_b = [], {}, {}
    for r in range(REPLICATES):
        rows = slice(r * n, (r + 1) * n)
        lp, blp, msk, rw = lp_b[:, rows], b["blogp"][:, rows], b["mask"][:, rows], b["rewards"][:, rows]
        names, mats = [], []
        for est in ESTIMATORS:
            if est in PER_SAMPLE:
                exact = coefficients(est, n, lp, blp, msk, rw, eps, rng, exact=True)
                names.append((est, 0))
                mats.append(exact)
                for G in Gs:  # gate b: the sampled groups' average against the exact expectation
                    gate_b.setdefault((est, G), []).append(
                        (coefficients(est, G, lp, blp, msk, rw, eps, rng, halves=True), exact))
                continue
            for G in Gs:
                names.append((est, G))
                mats.append(coefficients(est, G, lp, blp, msk, rw, eps, rng))
        lw = logw[:, rows]
        for G in Gs:  # the share of groups whose GMC cap binds, over random groups of G
            K = max(1, round(DRAWS / G))
            pick = torch.from_numpy(rng.random((lw.shape[0], K, n))).argsort(-1)[..., :G]
            gl = torch.gather(lw[:, None].expand(-1, K, -1).double(), 2, pick)
            caps.setdefault(("gmc", G), []).append(float((torch.logsumexp(gl, -1) - math.log(G) >
                                                          math.log1p(eps)).double().mean()))
        for est in ("tic_trunc", "tic_mask"):
            caps.setdefault((est, 0), []).append(float((lw > math.log1p(eps)).double().mean()))
        # a coefficient matrix equal to an earlier one (GMC where no cap binds is IS) is one vector
        uniq, where = [], []
        for m in mats:
            j = next((j for j, u in enumerate(uniq) if torch.equal(u, m)), None)
            if j is None:
                uniq.append(m)
                j = len(uniq) - 1
            where.append(j)
        V = per_sample_vectors(pi, b, rows, torch.stack(uniq))
        for key, j in zip(names, where):
            vecs.setdefault(key, []).append(V[j])
        targets.append(per_sample_vectors(pi, on, rows, loo_target(on["rewards"][:, rows])[None])[0])
        log(f"{pair.name}: replicate {r + 1}/{REPLICATES} ({time.perf_counter() - t2:.0f} s)")
    t_grad = time.perf_counter() - t2
    Tm = torch.stack(targets)
    rows_out = []
    for (est, G), vs in vecs.items():
        D = torch.stack(vs) - Tm
        rb, se, cos, ratio = relative_bias(D, Tm, torch.stack(vs))
        for GG in (Gs if G == 0 else [G]):
            cap = caps.get((est, GG), caps.get((est, 0), [math.nan]))
            rows_out.append({"pair": pair.name, "kl": drift["kl"], "chi2": drift["chi2"], "ess": drift["ess"],
                             "estimator": est, "G": GG, "rel_bias_sq": rb, "rel_bias": math.sqrt(max(rb, 0.0)),
                             "cos": cos, "norm_ratio": ratio, "se": se, "cap_share": float(np.mean(cap)),
                             "exact_expectation": G == 0})
    target_sq, target_se = cross_norm(Tm)
    gates = gate_table(rows_out, gate_b, target_sq, target_se)
    return {"pair": pair.name, "run": run.name, "grid": pair.grid, "seed": seed, "candidates": cand, "M": M,
            "replicates": REPLICATES, "n_per_replicate": n, "G": Gs, **{f"drift_{k}": v for k, v in drift.items()},
            "first_pool": first, "committed_rows": trained["committed_rows"], "gates": gates, "rows": rows_out,
            "quick": quick, "cost_s": {"retrain": trained["retrain_s"], "sample": t_sample, "gradients": t_grad,
                                       "total": time.perf_counter() - t0}}


GATE_B_Z = 4.0
"""Gate (b) fails when a per-sample correction's sampled-group average departs from its exact expectation by
more than this many computed standard errors (:func:`studies.common.pool.mc_agreement`)."""


def gate_table(rows: list[dict], gate_b: dict, target_sq: float, target_se: float) -> dict:
    """Gate (a): IS within 2 s.e. of 0 at every G; (b): the per-sample corrections' sampled-group averages
    agree with their exact expectation at every G (within :data:`GATE_B_Z` computed standard errors);
    (c): the target's replicate spread."""
    is_rows = [r for r in rows if r["estimator"] == "is"]
    a = all(abs(r["rel_bias_sq"]) <= 2 * r["se"] for r in is_rows)
    b_all = {f"{e}/G{G}": mc_agreement([s for s, _ in v], [x for _, x in v]) for (e, G), v in gate_b.items()}
    b = all(abs(v["z"]) <= GATE_B_Z for v in b_all.values())
    target = bool(target_sq > 2 * target_se)  # a relative bias needs a target measurably away from 0
    out = {"a_is_unbiased": bool(a), "a_is_values": [[r["rel_bias_sq"], r["se"]] for r in is_rows],
           "b_tic_invariant": bool(b), "b_agreement": b_all,
           "c_target_sq": target_sq, "c_target_se": target_se, "passed": bool(a and b and target)}
    if not target:
        out["failed"] = (f"the on-policy target's squared norm is {target_sq:.3g} +- {target_se:.3g}, not above "
                         "2 s.e.: pi's groups have (nearly) all equal rewards, so there is no gradient to measure a "
                         "bias against")
    return out


# --------------------------------------------------------------------------- command


def main(argv=None) -> int:
    from grids import grid_folder
    from schema.results import MissingResults, results_root
    from schema.runlock import RunLock

    ap = argparse.ArgumentParser(prog="python -m studies.group_size.pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, metavar="PAIR",
                    help="pair names, at least one (without --only: every pair)")
    ap.add_argument("--quick", action="store_true", help="a small pool (4 prompts x 64-128): a smoke run, written "
                    "under results/cache, never as the result")
    ap.add_argument("--redo", action="store_true", help="measure pairs already in pairs.json again")
    args = ap.parse_args(argv)
    names = {p.name: p for p in PAIRS}
    bad = [n for n in (args.only or []) if n not in names]
    if bad:
        print(f"unknown pair {bad[0]!r}; valid: {', '.join(names)}", file=sys.stderr)
        return 2
    requested = list(dict.fromkeys(args.only)) if args.only is not None else list(names)
    torch.set_num_threads(1)
    cache = results_root() / "cache" / "group_size_pairs"
    out = (cache / "quick") if args.quick else grid_folder("group_size")
    try:
        doc, todo = _todo(out / "pairs.json", requested, args.redo, say=True)
        for name in todo:  # every pair's committed runs, before any work
            pair_runs(names[name])
        if not todo:
            return 0
        cache.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        with RunLock(cache):  # one measurement at a time: the retrain cache and pairs.json are shared
            doc, todo = _todo(out / "pairs.json", todo, args.redo)  # as another measurement may have left it
            for name in todo:
                doc["pairs"][name] = measure(names[name], cache, args.quick)
                _write(doc, out)
                print(f"{name}: done in {doc['pairs'][name]['cost_s']['total']:.0f} s -> {out / 'pairs.json'}")
    except (MissingResults, ValueError) as exc:  # a committed run missing or unreadable, a torn pairs.json: named
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _todo(path: Path, requested: list[str], redo: bool, say: bool = False) -> tuple[dict, list[str]]:
    """``pairs.json`` at ``path`` (empty if absent; a torn or foreign file is a ValueError naming it) and the
    pairs of ``requested`` still to measure (all of them with ``redo``)."""
    from schema.results import read_json

    doc = read_json(path) if path.is_file() else {"format": FORMAT, "pairs": {}}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("pairs"), dict):
        raise ValueError(f"{path} is not a pairs file of format {FORMAT!r}: move it away (it is never overwritten)")
    done = [n for n in requested if n in doc["pairs"] and not redo]
    for name in done if say else ():
        print(f"{name}: measured already ({path}); --redo to measure it again")
    return doc, [n for n in requested if n not in done]


def _write(doc: dict, out: Path) -> None:
    from schema.io import write_json

    write_json(out / "pairs.json", doc)
    write_csv(doc, out / "pairs.csv")


CSV_COLUMNS = ("pair", "kl", "chi2", "ess", "estimator", "G", "rel_bias", "rel_bias_sq", "cos", "norm_ratio", "se",
               "cap_share", "gates_passed")


def write_csv(doc: dict, path: Path) -> None:
    import pandas as pd

    rows = [{**r, "gates_passed": p["gates"]["passed"]} for p in doc["pairs"].values() for r in p["rows"]]
    pd.DataFrame(rows, columns=list(CSV_COLUMNS)).to_csv(path, index=False)


if __name__ == "__main__":
    raise SystemExit(main())
