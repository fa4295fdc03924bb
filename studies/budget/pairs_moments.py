"""From a pair's accumulated inner products (:mod:`studies.budget.pairs_pass`) to the table's cells.

**The law.** A batch holds B groups: B distinct prompts of the task (its prompts are many, so they are independent
draws q_1..q_B of the prompt law), and for each a group of G completions drawn from pi_b, independent of the others.
Its update is ``g = (1/B) sum_b u_b``, u a group's own update (:mod:`studies.budget.pairs_pass`). With
``m_q = E[u | q]`` and ``mu = E_q m_q`` (the B group updates are independent with mean mu, so the variance of
their mean is a B-th of one group's, which is its variance given the prompt plus the variance of its prompt's mean):

    E|g - grad J|^2 = |mu - grad J|^2 + (V_b(G) + S_w(G) / G) / B,
    V_b(G) = E_q |m_q - mu|^2 (between prompts),   S_w(G) / G = E_q E[|u - m_q|^2 | q] (within a group)

(Proposition 9.1's form: ``bias^2 + V_b / B + S_w / (B G)``), each term divided by ``|grad J|^2``: ``var = (V_b +
S_w / G) / (B |grad J|^2)``, ``between = V_b / (B |grad J|^2)``, ``within = S_w / (G B |grad J|^2)``. It is linear in
1/B; a B above the pool's P = 32 prompts uses the same V_b, estimated on the 32.

**Estimates** from the pools' P prompts and R independent replicates (cross-products of replicates, so that no
replicate's own noise enters a squared mean; m_p^r is replicate r's estimate of m_p, V_r = (1/P) sum_p m_p^r):

* ``bias^2``: the committed measurement's (:func:`studies.common.pool.relative_bias`): the off-diagonal mean of
  ``(V_r - T_r).(V_s - T_s)``, J and grad J the pool prompts' average as there; ``|grad J|^2`` the off-diagonal mean
  of ``T_r.T_s``;
* ``S = (1/P) sum_p E[|u|^2 | p]``: the mean of the sampled groups' sketched squared norms (a random G-subset of a
  replicate's i.i.d. draws is G i.i.d. draws, so it is unbiased);
* ``|gbar|^2`` (gbar = (1/P) sum_p m_p): the off-diagonal mean of ``V_r.V_s``; ``mean_p |m_p|^2``: of
  ``m_p^r.m_p^s`` (exact vectors, float32 sums);
* ``S_w / G = S - mean_p |m_p|^2``; ``V_b = P / (P - 1) (mean_p |m_p|^2 - |gbar|^2)`` (the unbiased between-prompt
  variance of a sample of P prompts).

Standard errors: the leave-one-replicate-out jackknife of each ratio; the sketch's own error (one s.d. at most
sqrt(2/k) of a squared norm, :mod:`studies.budget.pairs_grads`) is stated beside it.

**Simulated batches** (:func:`simulate`) give the cosine of the batch update to grad J, the largest share and the
share of zero updates, from the groups kept per block. Their prompts are drawn uniformly with replacement from the
P (a prompt drawn again takes an independent group of another replicate): the task's law up to a factor (P-1)/P on
V_b, where drawing without replacement would remove a share (B-1)/(P-1) of it (all of it at B = 32). The cosine is
taken against ``Tbar``, the mean of the targets (unbiased for grad J, independent of the groups), over the square
root of the cross-product ``|grad J|^2``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from stats import jackknife, offdiagonal_mean

BATCHES = 1000
"""Simulated batches per (correction, B, G)."""


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def cell_moments(V: torch.Tensor, T: torch.Tensor, second: torch.Tensor, gm: torch.Tensor, Bs) -> dict:
    """One (correction, G): ``V`` ``(R, dim)`` its expected-update replicates, ``T`` ``(R, dim)`` the targets,
    ``second`` ``(P, R)`` the mean sketched |u|^2 per block, ``gm`` ``(P, R, R)`` the Gram matrices of each prompt's
    replicate means m_p^r; ``Bs`` the batch sizes. Relative terms with their jackknife standard errors, and
    ``rel_mse``/``var`` per B."""
    R = V.shape[0]
    gV, gT, gVT = (V @ V.T).double(), (T @ T.T).double(), (V @ T.T).double()
    gD = gV - gVT - gVT.T + gT
    gm = gm.double()

    cache: dict[tuple, tuple] = {}

    def parts(keep):
        key = tuple(keep)
        if key not in cache:
            k = len(keep)
            J2 = offdiagonal_mean(gT, keep)
            sub = gm[:, keep][:, :, keep]
            m2 = float(((sub.sum((1, 2)) - sub.diagonal(dim1=1, dim2=2).sum(-1)) / (k * (k - 1))).mean())
            cache[key] = (J2, _ratio(offdiagonal_mean(gD, keep), J2), float(second[:, keep].mean()),
                          offdiagonal_mean(gV, keep), m2)
        return cache[key]

    def stat(fn):
        return jackknife(lambda keep: fn(*parts(keep)), R)

    P = second.shape[0]
    fpc = P / (P - 1) if P > 1 else math.nan  # one prompt: no between-prompt variance to estimate
    # each term relative to |grad J|^2: S the group second moment, W = S - mean_p |m_p|^2 the within-prompt variance
    # (S_w = G W), V_b = P / (P - 1) (mean_p |m_p|^2 - |gbar|^2) the between-prompt variance of the task's prompts
    terms = {"grad_sq": lambda J2, b, S, g2, m2: J2,
             "bias_sq": lambda J2, b, S, g2, m2: b,
             "second": lambda J2, b, S, g2, m2: _ratio(S, J2),
             "within": lambda J2, b, S, g2, m2: _ratio(S - m2, J2),
             "between": lambda J2, b, S, g2, m2: _ratio((m2 - g2) * fpc, J2),
             "group_var": lambda J2, b, S, g2, m2: _ratio(S - m2 + (m2 - g2) * fpc, J2),
             "second_abs": lambda J2, b, S, g2, m2: S}
    out = {k: stat(f) for k, f in terms.items()}
    out["by_B"] = {}
    for B in Bs:
        var = (lambda J2, b, S, g2, m2, B=B: terms["group_var"](J2, b, S, g2, m2) / B)
        out["by_B"][B] = {"rel_mse": stat(lambda *a, var=var: a[1] + var(*a)), "var": stat(var)}
    return out


def occurrence_ranks(prompts: np.ndarray) -> np.ndarray:
    """``(nb, B)``: for each position of each batch, how many earlier positions of the batch drew the same
    prompt (0 for the first)."""
    nb, B = prompts.shape
    order = np.argsort(prompts, axis=1, kind="stable")
    s = np.take_along_axis(prompts, order, 1)
    idx = np.broadcast_to(np.arange(B), (nb, B))
    start = np.concatenate([np.ones((nb, 1), bool), s[:, 1:] != s[:, :-1]], 1)
    run_start = np.maximum.accumulate(np.where(start, idx, 0), axis=1)
    ranks = np.empty_like(prompts)
    np.put_along_axis(ranks, order, idx - run_start, 1)
    return ranks


def draw_batches(P: int, R: int, B: int, nb: int, seed) -> dict:
    """The random numbers of ``nb`` batches of B prompts, shared by every leave-one-out (common random numbers):
    the prompts, each occurrence's rank among the batch's draws of its prompt, and per batch and prompt a random
    order of the replicates (a prompt drawn again takes its next replicate's kept group, then the next slot)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(0, P, (nb, B))
    return {"prompts": prompts, "ranks": occurrence_ranks(prompts), "order": rng.random((nb, P, R)).argsort(-1)}


def group_index(draws: dict, keep: list[int], R: int, Q: int, q_eff: int) -> np.ndarray:
    """``(nb, B)`` flat indices ``(p R + r) Q + slot`` of the kept groups each batch uses, from replicates ``keep``
    only and slots below ``q_eff``."""
    prompts, ranks, order = draws["prompts"], draws["ranks"], draws["order"]
    kept = np.isin(order, keep)
    sub = order[kept].reshape(order.shape[0], order.shape[1], len(keep))  # the same order, left-out dropped
    rep = sub[np.arange(prompts.shape[0])[:, None], prompts, ranks % len(keep)]
    slot = (ranks // len(keep)) % q_eff
    return (prompts * R + rep) * Q + slot


def simulate(stored: dict, B: int, R: int, seed, nb: int = BATCHES, grad_sq=None) -> dict:
    """Batches of B of the kept groups (``stored``: ``amax``, ``asum`` ``(P, R, Q)``; with gradients also ``U``
    ``(P, R, Q, k)``, ``norm2`` ``(P, R, Q)`` and ``dotT`` ``(P, R, Q, R)``, and ``grad_sq(keep)``, the
    cross-product estimate of |grad J|^2): the mean cosine of the batch update to grad J and the share of batches
    below 0 (a zero update has cosine 0), the mean over nonzero updates of the largest share
    ``max_i |a_i| / sum_i |a_i|`` one trajectory takes of the batch's coefficients, and the share of zero updates;
    each with its leave-one-replicate-out jackknife s.e. (common random numbers)."""
    amax = stored["amax"]
    P, _, Q = amax.shape
    q_eff = int((~torch.isnan(amax[0, 0])).sum())
    draws = draw_batches(P, R, B, nb, seed)
    has_grad = "U" in stored and grad_sq is not None
    if has_grad:
        if "C" not in stored:  # the kept groups' Gram matrix, once per (correction, G): kept in ``stored``
            U = stored["U"].reshape(P * R * Q, -1).double()
            stored["C"] = U @ U.T
            # the squared norms from the k-bucket sketch; a slot not kept (NaN) is never drawn: 0 keeps it out
            stored["C"].diagonal().copy_(stored["norm2"].reshape(-1).nan_to_num(0.0))
        C = stored["C"]
        dotT = stored["dotT"].reshape(P * R * Q, R).nan_to_num(0.0)
    am, asm, cm = (stored[k].reshape(-1).numpy() for k in ("amax", "asum", "cmax"))

    def run(keep):
        idx = group_index(draws, keep, R, Q, q_eff)
        tot = asm[idx].sum(1)
        nz = tot > 0
        cmax = cm[idx].max(1)
        out = {"max_share": float(cmax[nz].mean() / (B * stored["G"])) if nz.any() else math.nan,
               "max_coef_share": float((am[idx].max(1)[nz] / tot[nz]).mean()) if nz.any() else math.nan,
               "zero_update_share": float((~nz).mean())}
        if has_grad:
            it = torch.from_numpy(idx)
            if B <= 32:  # |sum_b u_b|^2 = sum_b,b' C[b, b']
                sq = C[it[:, :, None], it[:, None, :]].sum((1, 2)) / B**2
            else:  # the same from each batch's row sums of C (a sparse product), read at its own groups
                nb = it.shape[0]
                member = torch.sparse_coo_tensor(
                    torch.stack([torch.arange(nb)[:, None].expand_as(it).reshape(-1), it.reshape(-1)]),
                    torch.ones(it.numel(), dtype=C.dtype), (nb, C.shape[0]), check_invariants=False)
                sq = torch.sparse.mm(member, C).gather(1, it).sum(1) / B**2
            dot = dotT[:, keep].mean(-1)[it].sum(1) / B
            J2 = grad_sq(keep)
            norm = sq.clamp_min(0).sqrt() * (math.sqrt(J2) if J2 > 0 else math.nan)
            cos = torch.where(torch.from_numpy(nz), dot / norm, torch.zeros_like(dot))
            out["cos_mean"] = float(cos.mean())
            out["cos_neg_share"] = float((cos < 0).double().mean())
        return out

    full = run(list(range(R)))
    jack = [run([j for j in range(R) if j != i]) for i in range(R)]
    res = {}
    for key, value in full.items():
        vals = np.array([j[key] for j in jack])
        res[key] = value
        res[key + "_se"] = (float(math.sqrt((R - 1) / R * ((vals - vals.mean()) ** 2).sum()))
                            if np.isfinite(vals).all() else math.nan)
    return res


def equal_reward_share(rewards: torch.Tensor, G: int) -> float:
    """The chance that a group of G drawn without replacement from a prompt's pool has all rewards equal,
    averaged over the prompts: ``sum_v C(n_v, G) / C(M, G)`` per prompt (n_v completions of reward v among M),
    unbiased for ``sum_v P(r = v)^G`` of G i.i.d. draws."""
    out = []
    for row in rewards.double():
        M = row.numel()
        _, counts = torch.unique(row, return_counts=True)
        lc = [math.lgamma(c + 1) - math.lgamma(G + 1) - math.lgamma(c - G + 1) for c in counts.tolist() if c >= G]
        total = math.lgamma(M + 1) - math.lgamma(G + 1) - math.lgamma(M - G + 1)
        out.append(sum(math.exp(x - total) for x in lc))
    return float(np.mean(out))


def moments_json(mom, G: int) -> dict | None:
    """A cell's terms with their s.e., and S_w = G x within (the within-group second-moment term of §9)."""
    if mom is None:
        return None
    out = {k: {"value": v[0], "se": v[1]} for k, v in mom.items() if k != "by_B"}
    out["S_w"] = {"value": G * mom["within"][0], "se": G * mom["within"][1]}
    return out


def summary(rows: list[dict], by_cell: dict, budgets) -> dict:
    """Per correction: S_w and V_b by G (relative to |grad J|^2), V_b's share of a group's variance, and per N the
    split of the smallest rel_mse."""
    out = {}
    for key, mom in by_cell.items():
        if mom is None:
            continue
        est, G = key.split("/G")
        e = out.setdefault(est, {"S_w": {}, "V_b": {}, "V_b_share": {}, "best_split": {}})
        e["S_w"][int(G)], e["V_b"][int(G)] = mom["S_w"]["value"], mom["between"]["value"]
        gv = mom["group_var"]["value"]
        e["V_b_share"][int(G)] = mom["between"]["value"] / gv if gv and math.isfinite(gv) and gv > 0 else math.nan
    for est, e in out.items():
        for N in budgets:
            cand = [r for r in rows if r["estimator"] == est and r["N"] == N and math.isfinite(r["rel_mse"])]
            if cand:
                best = min(cand, key=lambda r: r["rel_mse"])
                e["best_split"][N] = {"B": best["B"], "G": best["G"], "rel_mse": best["rel_mse"], "se": best["se"]}
    return out


def table_row(pair: str, est: str, B: int, G: int, mom, sim: dict, share: float) -> dict:
    nan = (math.nan, math.nan)
    by = mom["by_B"][B] if mom is not None else {"rel_mse": nan, "var": nan}
    m = mom or {}
    return {"pair": pair, "estimator": est, "B": B, "G": G, "N": B * G,
            "rel_mse": by["rel_mse"][0], "bias_sq": m.get("bias_sq", nan)[0], "var": by["var"][0],
            "cos_mean": sim.get("cos_mean", math.nan), "cos_neg_share": sim.get("cos_neg_share", math.nan),
            "max_share": sim["max_share"], "equal_reward_share": share, "se": by["rel_mse"][1],
            "bias_se": m.get("bias_sq", nan)[1], "var_se": by["var"][1],
            "within": m.get("within", nan)[0] / B, "within_se": m.get("within", nan)[1] / B,
            "between": m.get("between", nan)[0] / B, "between_se": m.get("between", nan)[1] / B,
            "cos_se": sim.get("cos_mean_se", math.nan), "cos_neg_share_se": sim.get("cos_neg_share_se", math.nan),
            "max_share_se": sim["max_share_se"], "max_coef_share": sim["max_coef_share"],
            "zero_update_share": sim["zero_update_share"],
            "target_ok": mom is not None and mom["grad_sq"][0] > 2 * mom["grad_sq"][1]}
