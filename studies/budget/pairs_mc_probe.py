"""The frozen-pair table's direct Monte Carlo check of one group's second moment ``E|u|^2``
(:func:`studies.budget.pairs_checks.direct_second_moment`), probed at one pair with more groups, per-group values kept:

    python -m studies.budget.pairs_mc_probe --pair p2                # gmc, G = 8, 32 groups per prompt
    python -m studies.budget.pairs_mc_probe --pair p2 --out probe.json

Two samples of the same law (groups of G completions of pi_b per pool prompt, u the gradient of the correction's
loss on the group alone under pi):

* **direct**: ``--groups`` fresh groups per prompt, drawn and differentiated as the table's check draws them (the
  same keys: its first 8 groups per prompt are the committed check's), ``|u|^2`` by autograd of the registered loss
  (:func:`studies.budget.pairs_checks.group_second_moments`);
* **pool**: the pair's behaviour pool (the table's completions, ``results/cache/budget_pairs/<pair>/pools.pt``) cut
  into disjoint groups of G consecutive completions within each replicate, ``|u|^2 = a^T Gram a`` by the table's
  formula (:func:`studies.common.pool.group_coefficients` for a group's own coefficients ``a``, the exact Gram
  matrix of :func:`studies.budget.pairs_grads.per_completion_gradients`).

Printed (and written with ``--out``): each sample's mean and s.e. (prompts fixed) as the groups grow, skewness and
excess kurtosis of ``|u|^2``, the share of the sum carried by the top 1% of groups, quantiles, the share of the mean
carried by groups whose GMC cap binds; a rank test of the two samples; and, resampling the committed check's design
(8 groups per prompt) from the pool's groups, how its mean and naive z fall about the pool groups' mean. Per-prompt
values are cached in ``results/cache/budget_pairs/<pair>/mc_probe-<est>-G<G>/`` (a run resumes there).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .pairs_checks import MC_CELLS, MC_GROUPS, MC_WHICH, direct_mean, group_second_moments
from .pairs_pass import _quadratic

RESAMPLES = 4000
RESAMPLE_SEED = 20261209


def pool_group_second_moments(model, pool: dict, lp: torch.Tensor, est: str, G: int, eps: float, R: int,
                              log=None) -> dict:
    """Per prompt of ``pool`` ``(P, M, T)``, cut into R replicates of n = M / R: each replicate's disjoint groups of G
    consecutive completions, ``|u|^2`` by the table's formula (a group's own coefficients from
    :func:`studies.common.pool.group_coefficients` with each group alone, the exact Gram matrix of the
    replicate's per-completion gradients), and each group's GMC lambda: ``{"u2", "lam"}``, ``(P, R n / G)`` each."""
    import estimators
    from estimators.losses import trajectory_log_ratio
    from studies.common.pool import group_coefficients

    from .pairs_grads import per_completion_gradients

    P, M, T = pool["ids"].shape
    n = M // R
    if n * R != M or n % G:
        raise ValueError(f"a pool of {M} completions per prompt does not cut into {R} replicates of whole groups of "
                         f"G = {G}")
    k = n // G
    u2, lam = np.zeros((P, R * k)), np.zeros((P, R * k))
    logw = trajectory_log_ratio(lp.double(), pool["blogp"].double(), pool["mask"].double())  # as the loss has it
    for p in range(P):
        prompt = pool["prompt_ids"][p][pool["prompt_mask"][p].bool()]
        for r in range(R):
            rows = slice(r * n, (r + 1) * n)
            # each group as its own "prompt" of one exact group: its own update is k times its coefficients
            _, coef = group_coefficients(est, G, lp[p, rows].reshape(k, G, T), pool["blogp"][p, rows].reshape(k, G, T),
                                         pool["mask"][p, rows].reshape(k, G, T), pool["rewards"][p, rows].reshape(k, G),
                                         eps, None, exact=True)
            a = coef[:, 0] * k  # (k, G)
            g = per_completion_gradients(model, prompt, pool["ids"][p, rows], pool["mask"][p, rows].float()).double()
            gram = g @ g.T
            u2[p, r * k:(r + 1) * k] = _quadratic(gram, torch.arange(n).reshape(k, G), a).numpy()
            lam[p, r * k:(r + 1) * k] = estimators.gmc_lambda(logw[p, rows].reshape(k, G), eps).reshape(-1).numpy()
        if log is not None:
            log(p)
    return {"u2": u2, "lam": lam}


def tail_stats(x: np.ndarray) -> dict:
    """Of per-group values ``x`` ``(P, groups)``: the mean and its s.e. (:func:`direct_mean`), skewness and excess
    kurtosis of all values together, the share of their sum carried by the top 1% (at least one), quantiles."""
    v = np.sort(x.reshape(-1))[::-1]
    c = v - v.mean()
    m2 = (c**2).mean()
    top = max(1, math.ceil(0.01 * v.size))
    return {"groups": int(v.size), **direct_mean(x), "skewness": float((c**3).mean() / m2**1.5),
            "excess_kurtosis": float((c**4).mean() / m2**2 - 3), "top1pct_groups": top,
            "top1pct_share": float(v[:top].sum() / v.sum()), "max_over_mean": float(v[0] / v.mean()),
            **{f"q{q}": float(np.quantile(v, q / 100)) for q in (10, 50, 90, 99)}}


def resampled_check(u2: np.ndarray, groups: int, n: int, seed) -> dict:
    """The committed check's design (``groups`` per prompt, the s.e. of :func:`direct_mean`) drawn ``n`` times without
    replacement from the pool's groups ``u2`` ``(P, K)``: how its mean falls about the pool groups' mean ``mu``
    (ratio quantiles, the chance of a mean below 0.8 mu and below 0.65 mu) and its naive z = (mean - mu) / se."""
    rng = np.random.default_rng(seed)
    P, K = u2.shape
    mu = float(u2.mean())
    pick = np.argsort(rng.random((n, P, K)), -1)[..., :groups]
    x = np.take_along_axis(np.broadcast_to(u2, (n, P, K)), pick, 2)  # (n, P, groups)
    means = x.mean((1, 2))
    se = np.sqrt((x.var(2, ddof=1) / groups).sum(1)) / P
    with np.errstate(divide="ignore", invalid="ignore"):  # a draw of equal values has se 0: z = +-inf, counted
        ratio, z = means / mu, (means - mu) / se
    return {"draws": n, "groups_per_prompt": groups, "mu": mu, "ratio_median": float(np.median(ratio)),
            "ratio_q05": float(np.quantile(ratio, 0.05)), "ratio_q95": float(np.quantile(ratio, 0.95)),
            "share_below_mean": float((ratio < 1).mean()), "share_ratio_below_0.8": float((ratio < 0.8).mean()),
            "share_ratio_below_0.65": float((ratio < 0.65).mean()), "z_median": float(np.median(z)),
            "z_sd": float(z[np.isfinite(z)].std(ddof=1)), "share_z_below_-2": float((z < -2).mean()),
            "share_z_below_-4": float((z < -4).mean()), "share_z_above_2": float((z > 2).mean())}


def _cached(path: Path, compute, P: int, log):
    """Per-prompt rows of ``compute(p0) -> dict of (1, ...) arrays`` resumed from ``path`` (one prompt at a time)."""
    done = torch.load(path, weights_only=False) if path.is_file() else {}
    from schema.io import atomic

    for p in range(P):
        if p in done:
            continue
        done[p] = compute(p)
        atomic(path, lambda tmp: torch.save(done, tmp))
        log(f"  {path.stem}: prompt {p + 1}/{P}")
    return {k: np.concatenate([done[p][k] for p in range(P)]) for k in done[0]}


def probe(pair_name: str, est: str, G: int, groups: int, log=print) -> dict:
    from schema.results import results_root
    from schema.runlock import RunLock
    from studies.common.pairs import PAIRS, REPLICATES
    from studies.common.pairs import load_pools as load
    from studies.common.pool import sample_pool

    if (est, G) not in MC_CELLS:
        raise ValueError(f"({est!r}, G = {G}) is not a cell of the table's direct check; valid: {list(MC_CELLS)}")
    if groups < MC_GROUPS:
        raise ValueError(f"--groups {groups} is below the committed check's {MC_GROUPS}")
    torch.set_num_threads(1)
    cache = results_root() / "cache"
    ctx = load({p.name: p for p in PAIRS}[pair_name], cache, False, log)
    pi, pib = ctx["models"]
    eps = float(ctx["config"].eps)
    folder = cache / "budget_pairs" / pair_name / f"mc_probe-{est}-G{G}"
    folder.mkdir(parents=True, exist_ok=True)
    P = len(ctx["idx"])
    t0 = time.process_time()
    with RunLock(folder):
        M = G * groups
        which = MC_WHICH + MC_CELLS.index((est, G))

        # sample_pool's keys depend on a prompt's slot in the pool: every prompt's groups are drawn at once, as the
        # table's check draws them, then differentiated prompt by prompt
        full = {}

        def direct_slot(p):
            if not full:
                full.update(sample_pool(pib, ctx["tokenizer"], ctx["task"], ctx["idx"], M, which, ctx["max_new"],
                                        chunk=min(128, M)))
            one = {k: v[p:p + 1] for k, v in full.items()}
            return {"u2": group_second_moments(pi, one, est, G, eps, groups)}

        d = _cached(folder / f"direct-g{groups}.pt", direct_slot, P, log)
        b = ctx["b"]
        pool = _cached(folder / "pool.pt", lambda p: pool_group_second_moments(
            pi, {k: v[p:p + 1] for k, v in b.items()}, ctx["lp_b"][p:p + 1], est, G, eps, REPLICATES), P, log)
    out = {"pair": pair_name, "estimator": est, "G": G, "eps": eps, "prompts": P, "cpu_s": time.process_time() - t0,
           "direct": {g: tail_stats(d["u2"][:, :g]) for g in sorted({MC_GROUPS, 2 * MC_GROUPS, groups})},
           "pool_groups": tail_stats(pool["u2"])}
    capped = pool["lam"] < 1
    out["pool_groups"].update(capped_share=float(capped.mean()),
                              capped_mass_share=float(pool["u2"][capped].sum() / pool["u2"].sum()))
    from scipy.stats import mannwhitneyu

    mw = mannwhitneyu(d["u2"].reshape(-1), pool["u2"].reshape(-1))
    out["rank_test"] = {"p_direct_above_pool": float(mw.statistic / (d["u2"].size * pool["u2"].size)),
                        "p_value": float(mw.pvalue)}
    out["resampled_check"] = resampled_check(pool["u2"], MC_GROUPS, RESAMPLES, [RESAMPLE_SEED, int(pair_name[1:])])
    return out


def main(argv=None) -> int:
    from schema.io import check_output, dumps_json, write_json

    ap = argparse.ArgumentParser(prog="python -m studies.budget.pairs_mc_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="p2")
    ap.add_argument("--estimator", default=MC_CELLS[0][0])
    ap.add_argument("--G", type=int, default=MC_CELLS[0][1])
    ap.add_argument("--groups", type=int, default=4 * MC_GROUPS, help="fresh groups per prompt (default 32)")
    ap.add_argument("--out", type=Path, default=None, help="write the summary as json here")
    args = ap.parse_args(argv)
    try:
        if args.out is not None:
            check_output(args.out)
        res = probe(args.pair, args.estimator, args.G, args.groups, log=lambda m: print(m, file=sys.stderr, flush=True))
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(dumps_json(res))
    if args.out is not None:
        write_json(args.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
