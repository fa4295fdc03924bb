"""Checks and side statistics of the frozen-pair second moment (:mod:`studies.budget.pairs`).

* :func:`direct_second_moment`: one group's second moment ``E|u|^2`` at a (correction, G) by direct Monte Carlo:
  fresh groups drawn from pi_b for every pool prompt, each group's update the gradient of the correction's
  registered loss on that group alone (:func:`estimators.losses.policy_loss`, one backward pass per group through
  the model), against the pool's estimate (:func:`agreement`).
* :func:`warning_stats`: ratio-only statistics of simulated batches at G = 4 .. 128 and a fixed budget N, the
  candidates of an early-warning rule whose value should not depend on the split: the pooled chi^2 estimate
  ``mean(w^2) - 1`` over the batch's trajectories, the largest trajectory's share ``max w / sum w`` of the batch's
  raw ratio mass, the mean group ESS fraction ``(sum w)^2 / (G sum w^2)`` and the share of groups whose GMC cap
  binds (mean w > 1 + eps).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from studies.common.pairs import WARN_BATCHES, WARN_G, WARN_N, warning_batches

MC_CELLS = (("gmc", 8), ("topr", 32))
"""The two (correction, G) where the pool's second moment meets a direct Monte Carlo."""
MC_GROUPS = 8
"""Fresh groups per prompt of the direct Monte Carlo."""
MC_WHICH = 10
"""Pool key offset of the direct Monte Carlo's draws (the pools use 0 and 1): cell i draws with MC_WHICH + i."""
MC_Z = 4.0
"""The direct Monte Carlo agrees when it is within this many combined standard errors of the pool's estimate."""


def direct_second_moment(model, behaviour, tokenizer, task, idx: list[int], est: str, G: int, eps: float,
                         max_new_tokens: int, which: int, groups: int = MC_GROUPS) -> dict:
    """Mean over the prompts ``idx`` of ``|u|^2`` of ``groups`` fresh groups of G each (sampled from
    ``behaviour``), u the parameter gradient (ascent) of ``est``'s loss on the group alone under ``model``
    (leave-one-out advantages; :func:`group_second_moments`), with its standard error (prompts fixed: the spread
    within each prompt)."""
    from studies.common.pool import sample_pool

    M = G * groups
    pool = sample_pool(behaviour, tokenizer, task, idx, M, which, max_new_tokens, chunk=min(128, M))
    x = group_second_moments(model, pool, est, G, eps, groups)
    return {"estimator": est, "G": G, "groups_per_prompt": groups, "prompts": len(idx), **direct_mean(x)}


def group_second_moments(model, pool: dict, est: str, G: int, eps: float, groups: int) -> np.ndarray:
    """``(P, groups)``: ``|u|^2`` of each group of G consecutive completions of each prompt of ``pool``
    (:func:`studies.common.pool.sample_pool`'s blocks), u the parameter gradient (ascent) of ``est``'s loss
    (:func:`estimators.losses.policy_loss`, leave-one-out advantages, the pool's behaviour log-probs) on the group
    alone under ``model``, by one backward pass per group."""
    from estimators import advantages
    from estimators.losses import policy_loss
    from llm_runs.rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    P = pool["ids"].shape[0]
    if pool["ids"].shape[1] < G * groups:
        raise ValueError(f"a pool of {pool['ids'].shape[1]} completions per prompt holds fewer than {groups} groups "
                         f"of G = {G}")
    out = np.zeros((P, groups))
    for p in range(P):
        for q in range(groups):
            sl = slice(q * G, (q + 1) * G)
            lp = completion_logprobs(model, pool["prompt_ids"][p:p + 1].expand(G, -1),
                                     pool["prompt_mask"][p:p + 1].expand(G, -1), pool["ids"][p, sl], 1.0, G)
            adv = advantages(pool["rewards"][p:p + 1, sl].double(), "loo").reshape(-1)
            loss = policy_loss(est, lp, pool["blogp"][p, sl], pool["mask"][p, sl].to(lp.dtype), adv, G, eps=eps)
            grads = torch.autograd.grad(loss.loss, params)
            out[p, q] = sum(float(g.double().pow(2).sum()) for g in grads)
    return out


def direct_mean(x: np.ndarray) -> dict:
    """The mean of per-group values ``x`` ``(P, groups)`` and its standard error with the prompts fixed (the
    spread within each prompt): ``{"direct", "direct_se"}``."""
    P, groups = x.shape
    se = math.sqrt((x.var(1, ddof=1) / groups).sum()) / P if groups > 1 else math.nan
    return {"direct": float(x.mean()), "direct_se": se}


def agreement(direct: dict, pool_value: float, pool_se: float, sketch_k: int) -> dict:
    """``direct`` (:func:`direct_second_moment`) against the pool's ``E|u|^2`` estimate: z over the combined
    standard error (the direct draws', the pool's jackknife and the sketch's one s.d., sqrt(2/k) of the value)."""
    sk = math.sqrt(2 / sketch_k) * abs(pool_value)
    se = math.sqrt(direct["direct_se"] ** 2 + pool_se**2 + sk**2)
    z = (direct["direct"] - pool_value) / se if se > 0 else math.inf
    return {**direct, "pool": pool_value, "pool_se": pool_se, "sketch_sd": sk, "z": z, "agrees": bool(abs(z) <= MC_Z)}


def _lse(x: np.ndarray, axis) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def warning_stats(logw: torch.Tensor, eps: float, seed, Gs=WARN_G, Ns=WARN_N, nb: int = WARN_BATCHES) -> list[dict]:
    """Rows ``{statistic, G, B, N, mean, se, median, q10, q90}`` over ``nb`` simulated batches of B = N / G
    prompts (drawn uniformly with replacement) of one group of G each, drawn without replacement from the
    prompt's pool (``logw`` ``(P, M)``: each completion's log-ratio log pi - log pi_b). A group is a block of G
    consecutive completions of one of :data:`WARN_PERMS` random orders of its prompt's pool."""
    lw = logw.double().numpy()
    rows = []
    for N, G, B, p, members in warning_batches(*lw.shape, seed, Gs, Ns, nb):
        x = lw[p[..., None], members]
        flat = x.reshape(nb, B * G)
        g_lse, g_lse2 = _lse(x, 2), _lse(2 * x, 2)
        with np.errstate(over="ignore"):
            stats = {"chi2_pooled": np.expm1(_lse(2 * flat, 1) - math.log(B * G)),
                     "max_w_share": np.exp(flat.max(1) - _lse(flat, 1)),
                     "ess_frac": np.exp(2 * g_lse - g_lse2 - math.log(G)).mean(1),
                     "gmc_cap_share": (g_lse - math.log(G) > math.log1p(eps)).mean(1)}
        for name, v in stats.items():
            finite = np.isfinite(v).all()
            rows.append({"statistic": name, "G": G, "B": B, "N": N, "mean": float(v.mean()),
                         "se": float(v.std(ddof=1) / math.sqrt(nb)) if finite else math.nan,
                         "median": float(np.median(v)), "q10": float(np.quantile(v, 0.1)),
                         "q90": float(np.quantile(v, 0.9))})
    return rows


SKETCH_Z = 4.0
"""The sketch meets the exact Gram matrix when every checked block's group second moment (the quantity the table
uses) is within this many of its s.d. bounds, sqrt(2/k) of itself (Chebyshev: each misses with chance below 1/16,
and near 1e-4 for a Gaussian error). The Gram matrix's entries are reported in the same units (their mean square
has expectation at most 1, but they share one sketch, so it varies far more than a mean of independent terms)."""


def committed_bias(pair: str, by_cell: dict, bias_z: float) -> dict:
    """Each (correction, G)'s squared bias against the committed measurement's (``results/llm/group_size/
    pairs.json``): the largest |difference| and z over the combined standard error, and whether every cell is
    within ``bias_z``."""
    from grids import grid_folder
    from schema.results import read_json

    path = grid_folder("group_size") / "pairs.json"
    rows = read_json(path)["pairs"].get(pair, {}).get("rows", []) if path.is_file() else []
    theirs = {(r["estimator"], r["G"]): (r["rel_bias_sq"], r["se"]) for r in rows}
    cells = []
    for key, mom in by_cell.items():
        est, G = key.split("/G")
        if mom is None or (est, int(G)) not in theirs:
            continue
        (tv, ts), mv, ms = theirs[(est, int(G))], mom["bias_sq"]["value"], mom["bias_sq"]["se"]
        if tv is None or not (math.isfinite(tv) and math.isfinite(mv)):
            continue
        se = math.sqrt(ts**2 + ms**2)
        cells.append({"cell": key, "committed": tv, "committed_se": ts, "here": mv, "here_se": ms,
                      "z": (mv - tv) / se if se > 0 else (0.0 if mv == tv else math.inf)})
    if not cells:
        return {"available": False, "file": str(path)}
    zmax = max(abs(c["z"]) for c in cells)
    return {"available": True, "cells": cells, "max_abs_diff": max(abs(c["here"] - c["committed"]) for c in cells),
            "max_abs_z": zmax, "passed": bool(zmax <= bias_z)}


def run_checks(ctx: dict, acc, by_cell: dict, eps: float, bias_z: float, mc_cells=MC_CELLS, quick: bool = False,
               log=print) -> dict:
    """Every check of one pair (the module docstring of :mod:`studies.budget.pairs`)."""
    from .pairs_grads import SKETCH_DIM

    out = {}
    is_cell = next((v for k, v in by_cell.items() if k.startswith("is/") and v is not None), None)
    if is_cell is not None:
        b = is_cell["bias_sq"]
        out["is_unbiased"] = {"bias_sq": b["value"], "se": b["se"], "passed": bool(abs(b["value"]) <= 2 * b["se"])}
    out["committed_bias"] = ({"available": False, "why": "a quick pool is not the committed one"} if quick
                             else committed_bias(ctx["pair"].name, by_cell, bias_z))
    bound = math.sqrt(2 / SKETCH_DIM)
    worst = max((abs(v["rel_err"]) for c in acc.checks for v in c["second_moment"].values()), default=0.0)
    z_rms = max((c["gram"]["z_rms"] for c in acc.checks), default=0.0)
    out["sketch"] = {"blocks": acc.checks, "max_second_moment_rel_err": worst, "sd_bound": bound,
                     "max_z_rms": z_rms, "passed": bool(worst <= SKETCH_Z * bound)}
    pi, pib = ctx["models"]
    mc = []
    for i, (est, G) in enumerate(mc_cells):
        cell = by_cell.get(f"{est}/G{G}")
        if cell is None:
            continue
        d = direct_second_moment(pi, pib, ctx["tokenizer"], ctx["task"], ctx["idx"], est, G, eps, ctx["max_new"],
                                 MC_WHICH + i)
        mc.append(agreement(d, cell["second_abs"]["value"], cell["second_abs"]["se"], SKETCH_DIM))
        log(f"  direct Monte Carlo {est} G = {G}: {mc[-1]['direct']:.4g} +- {mc[-1]['direct_se']:.2g} against the "
            f"pool's {mc[-1]['pool']:.4g} +- {mc[-1]['pool_se']:.2g} (z = {mc[-1]['z']:.2f})")
    out["direct_mc"] = mc
    parts = [out.get("is_unbiased", {}).get("passed", True), out["sketch"]["passed"],
             all(m["agrees"] for m in mc), out["committed_bias"].get("passed", True)]
    out["passed"] = bool(all(parts))
    return out
