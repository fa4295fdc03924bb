"""One pass over a pair's behaviour pool (:mod:`studies.budget.pairs`): the corrections' groups and coefficients,
then the per-completion gradients block by block (one prompt's completions of one replicate), each block reduced
at once to what the table needs.

Per replicate r (:func:`replicate_coefficients`): the groups and coefficients of every correction at every G,
drawn from the generator in exactly the order :func:`studies.group_size.pairs.measure` draws them, so the
expected-update vectors are the committed measurement's. Per block (:func:`prompt_pass`):

* ``V[r, v] += C_v[p] grad log pi(o_p.)``: the exact expected-update vectors of the committed bias measurement;
* ``dots = grad log pi(o_pj) . T_s``: inner products with every replicate's on-policy target (exact up to float32
  sums, as ``V``);
* ``Gram = (S g)(S g)^T`` with S the CountSketch (:mod:`studies.budget.pairs_grads`): each sampled group's
  squared norm ``|u|^2 = a^T Gram[S, S] a``, averaged per block (``second[(e, G)][p, r]``);
* the per-prompt expected updates ``m_p^r`` of the R replicates, reduced to their exact Gram matrix (``gm``), for
  the within/between split (blocks go prompt by prompt, so a prompt's replicates are in memory together);
* :data:`Q_STORED` sampled groups per block kept for the batch simulation: their sketch folded to :data:`FOLD`
  buckets, ``|u|^2``, ``u . T_s``, and their largest and summed |coefficient|.

A group's own update is ``u = sum_i a_i grad log pi(o_i)`` with ``a = P K coef`` (:func:`studies.common.pool.
group_coefficients`: the loss averages over the P K groups of one call).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from studies.common.pairs import ESTIMATORS, PER_SAMPLE
from studies.common.pool import DRAWS, completion_coefficients, group_coefficients

from .pairs_grads import CountSketch, per_completion_gradients, sketch_error

TABLE_G = (2, 4, 8, 16, 32, 64, 128)
"""Every G of the table (B, G in {2, ..., 128} with B G in {64, 128, 512})."""
Q_STORED = 2
"""Sampled groups kept per (prompt, replicate) for the batch simulation (one where G is the whole replicate)."""
FOLD = 4096
"""Buckets of the stored groups' sketches (the CountSketch folded: one s.d. sqrt(2 / 4096) = 2.2% of a norm)."""
CHECK_BLOCKS = 2
"""Blocks (prompts 0 and 1 of replicate 0) whose sketched Gram matrix is checked against the exact one."""


def replicate_coefficients(lp, blp, msk, rw, eps: float, rng: np.random.Generator, Gs) -> dict:
    """One replicate's coefficients, drawn as :func:`studies.group_size.pairs.measure` draws them: ``names`` and
    ``mats`` (the expected-update coefficients ``(P, n)`` of each (correction, G), G = 0 for a per-sample
    correction's exact expectation), ``groups[(e, G)] = (pick, coef)`` for every G of ``Gs`` and ``cap`` (GMC's
    share of capped groups per G, as the committed file records it)."""
    P, n = rw.shape
    names, mats, groups = [], [], {}
    for est in ESTIMATORS:
        if est in PER_SAMPLE:
            pick, coef = group_coefficients(est, n, lp, blp, msk, rw, eps, rng, exact=True)
            names.append((est, 0))
            mats.append(completion_coefficients(pick, coef, n))
            for G in Gs:  # the committed gate b's sampled groups: the same draws
                groups[(est, G)] = group_coefficients(est, G, lp, blp, msk, rw, eps, rng)
            continue
        for G in Gs:
            pick, coef = group_coefficients(est, G, lp, blp, msk, rw, eps, rng)
            names.append((est, G))
            mats.append(completion_coefficients(pick, coef, n))
            groups[(est, G)] = (pick, coef)
    logw = (lp - blp).mul(msk).sum(-1).double()
    cap = {}
    for G in Gs:  # measure's draws for the share of groups whose GMC cap binds
        K = max(1, round(DRAWS / G))
        pick = torch.from_numpy(rng.random((P, K, n))).topk(G, -1, largest=False, sorted=True).indices
        gl = torch.gather(logw[:, None].expand(-1, K, -1), 2, pick)
        cap[G] = float((torch.logsumexp(gl, -1) - math.log(G) > math.log1p(eps)).double().mean())
    return {"names": names, "mats": mats, "groups": groups, "cap": cap}


def dedup(mats: list) -> tuple[list, list]:
    """Equal coefficient matrices (GMC where no cap binds is IS) share one vector: ``(unique, index of each)``."""
    uniq, where = [], []
    for m in mats:
        j = next((j for j, u in enumerate(uniq) if torch.equal(u, m)), None)
        if j is None:
            uniq.append(m)
            j = len(uniq) - 1
        where.append(j)
    return uniq, where


def stored_coefficients(groups: dict, rewards: torch.Tensor, n: int) -> dict:
    """Per table (correction, G), of the groups kept for the batch simulation ``(P, Q)`` each: the largest and the
    summed |a| (a = P K coef, the group's own update coefficients) and the largest effective weight
    ``c_i = G a_i / A_i`` over the members with a nonzero leave-one-out advantage A_i (a trajectory scheme's own
    weight c_i; the weight GSPO's and VESPO's losses give it), -inf where no member has one. NaN in a slot not kept
    (G the whole replicate keeps one)."""
    from estimators import advantages

    out = {}
    P = rewards.shape[0]
    for (est, G), (pick, coef) in groups.items():
        if G not in TABLE_G:
            continue
        K = pick.shape[1]
        q = 1 if G == n else Q_STORED
        a = coef[:, :q] * (P * K)  # (P, q, G)
        r = torch.gather(rewards.double()[:, None].expand(-1, q, -1), 2, pick[:, :q])
        A = advantages(r.reshape(-1, G), "loo").reshape(P, q, G)
        c = torch.where(A != 0, G * a / torch.where(A != 0, A, 1.0), torch.tensor(-math.inf, dtype=a.dtype))
        stats = [torch.full((P, Q_STORED), math.nan, dtype=torch.float64) for _ in range(3)]
        stats[0][:, :q], stats[1][:, :q], stats[2][:, :q] = a.abs().amax(-1), a.abs().sum(-1), c.amax(-1)
        out[(est, G)] = tuple(stats)
    return out


class Accumulators:
    """What the gradient pass keeps of one pair, sized ``R`` replicates x ``P`` prompts, for the replicates'
    coefficients ``reps`` (:func:`replicate_coefficients`, names in the same order in each)."""

    def __init__(self, reps: list[dict], P: int, dim: int, keys: list):
        R, names = len(reps), reps[0]["names"]
        self.dedup = [dedup(rep["mats"]) for rep in reps]
        self.Vu = [torch.zeros(len(u), dim, dtype=torch.float64) for u, _ in self.dedup]
        self.gm = torch.zeros(P, len(names), R, R, dtype=torch.float64)
        self.second = {k: torch.full((P, R), math.nan, dtype=torch.float64) for k in keys}
        self.U = {k: torch.zeros(P, R, Q_STORED, FOLD) for k in keys}
        self.norm2 = {k: torch.full((P, R, Q_STORED), math.nan, dtype=torch.float64) for k in keys}
        self.dotT = {k: torch.full((P, R, Q_STORED, R), math.nan, dtype=torch.float64) for k in keys}
        self.checks: list[dict] = []

    @property
    def V(self) -> torch.Tensor:
        """``(R, names, dim)``: each replicate's expected-update vector of each (correction, G)."""
        return torch.stack([Vu[where] for Vu, (_, where) in zip(self.Vu, self.dedup)])


def prompt_pass(model, pool: dict, p: int, reps: list[dict], T: torch.Tensor, acc: Accumulators,
                sketch: CountSketch) -> float:
    """The blocks of prompt ``p`` (its completions of each replicate), into ``acc``; the CPU seconds spent on the
    per-completion gradients. Replicate r's block adds ``C_r[p] grad log pi`` to ``V_r`` (as the committed
    measurement, prompt by prompt) and gives ``m_p^r = P C_r[p] grad log pi``, whose exact cross-replicate Gram
    matrix ``gm[p]`` is kept."""
    R = len(reps)
    n = pool["ids"].shape[1] // R
    P = pool["ids"].shape[0]
    prompt = pool["prompt_ids"][p][pool["prompt_mask"][p].bool()]
    m = torch.zeros(R, len(reps[0]["names"]), acc.Vu[0].shape[1])  # m_p^r of every name, float32
    T32 = T.float()
    t_grad = 0.0
    for r, rep in enumerate(reps):
        rows = slice(r * n, (r + 1) * n)
        uniq, where = acc.dedup[r]
        C = torch.stack(uniq)[:, p].float()  # (v, n)
        t0 = time.process_time()
        blocks = per_completion_gradients(model, prompt, pool["ids"][p, rows], pool["mask"][p, rows].float(),
                                          flat=False)
        t_grad += time.process_time() - t0
        dots = torch.zeros(n, R, dtype=torch.float64)
        for a, b, blk in blocks:  # the expected-update vectors and inner products with the targets (float32 sums)
            part = C @ blk
            acc.Vu[r][:, a:b] += part.double()
            m[r, :, a:b] = (part * P)[where]
            dots += (blk @ T32[:, a:b].T).double()
        z = sketch(blocks)
        z64 = z.double()
        gram = z64 @ z64.T
        z4 = CountSketch.fold(z, FOLD)
        check = r == 0 and p < CHECK_BLOCKS
        if check:
            flat = torch.cat([blk for _, _, blk in blocks], 1).double()
            exact = flat @ flat.T
            del flat
            rec = {"prompt": p, "replicate": r, "gram": sketch_error(exact, gram, sketch.k), "second_moment": {}}
        for key in acc.second:
            pick, coef = rep["groups"][key]
            K = pick.shape[1]
            a = coef[p] * (P * K)  # (K, G): each group's own update coefficients
            pk = pick[p].long()
            q = _quadratic(gram, pk, a)
            acc.second[key][p, r] = q.mean()
            if check:
                qe = _quadratic(exact, pk, a).mean()
                rec["second_moment"][f"{key[0]}/G{key[1]}"] = {"exact": float(qe), "sketched": float(q.mean()),
                                                               "rel_err": float(q.mean() / qe - 1) if qe > 0 else 0.0}
            for s in range(1 if key[1] == n else Q_STORED):
                acc.U[key][p, r, s] = a[s].float() @ z4[pk[s]]
                acc.norm2[key][p, r, s] = q[s]
                acc.dotT[key][p, r, s] = a[s] @ dots[pk[s]]
        if check:
            acc.checks.append(rec)
    for i in range(m.shape[1]):
        mi = m[:, i].double()
        acc.gm[p, i] = mi @ mi.T
    return t_grad


def _quadratic(gram: torch.Tensor, pick: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``a_k^T gram[pick_k, pick_k] a_k`` for each group k: ``(K,)``."""
    sub = gram[pick[:, :, None], pick[:, None, :]]
    return torch.einsum("kg,kgh,kh->k", a, sub, a)


def target_vectors(model, on: dict, R: int, n: int) -> torch.Tensor:
    """``(R, params)``: each replicate's on-policy target ``sum (r - mean of the others) / (P n) grad log pi``
    (:func:`studies.common.pool.loo_target`), by one backward pass per chunk
    (:func:`studies.common.pool.update_vectors`)."""
    from studies.common.pool import loo_target, update_vectors

    return torch.stack([update_vectors(model, on, slice(r * n, (r + 1) * n),
                                       loo_target(on["rewards"][:, r * n:(r + 1) * n])[None])[0] for r in range(R)])
