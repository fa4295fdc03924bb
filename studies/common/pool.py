"""The frozen-pair measurement's pools and expected updates (:mod:`studies.group_size.pairs` runs them):
completions from a policy per prompt, their drift, each completion's expected coefficient in a
correction's update at group size G, the update vectors from per-completion gradients, and the
cross-product bias estimate against an independent target."""
from __future__ import annotations

import math

import numpy as np
import torch

from stats import jackknife, offdiagonal_mean

PROMPTS = 32
DRAWS = 2048
"""K x G completions drawn per prompt and replicate (K = max(1, round(DRAWS / G)) groups)."""
PROMPT_SEED = (20261206, 49)
POOL_SEED = 20261206


# --------------------------------------------------------------------------- pools


def pool_prompts(task) -> list[int]:
    return np.random.default_rng(list(PROMPT_SEED)).permutation(len(task.train))[:PROMPTS].tolist()


def sample_pool(model, tokenizer, task, idx: list[int], M: int, which: int, max_new_tokens: int, chunk: int = 128,
                start: int = 0) -> dict:
    """M completions per prompt of ``idx`` from ``model`` (keys from (POOL_SEED + which, chunk index)), as
    per-prompt blocks: ``ids (P, M, T)``, ``mask``, ``blogp`` (the sampler's log-probs), ``rewards (P, M)``."""
    from llm_runs.rollout import sample_groups, sample_keys

    problems = [task.train[i] for i in idx]
    parts = []
    for c in range(start // chunk, (start + M) // chunk):
        keys = sample_keys(POOL_SEED + which, c, len(idx), chunk)
        b = sample_groups(model, tokenizer, task, problems, idx, chunk, keys, 0, max_new_tokens)
        parts.append(b)
    P, T = len(idx), max_new_tokens

    def stack(name, pad=0):
        xs = []
        for b in parts:
            x = getattr(b, name)
            if x.dim() == 2 and x.shape[1] < T:
                x = torch.nn.functional.pad(x, (0, T - x.shape[1]), value=pad)
            xs.append(x.view(P, chunk, *x.shape[1:]))
        return torch.cat(xs, 1)

    return {"ids": stack("completion_ids", tokenizer.pad_token_id), "mask": stack("completion_mask"),
            "blogp": stack("behaviour_logp"), "rewards": stack("rewards"),
            "prompt_ids": parts[0].prompt_ids.view(P, chunk, -1)[:, 0], "prompt_mask": parts[0].prompt_mask.view(
                P, chunk, -1)[:, 0]}


def merge(a: dict, b: dict) -> dict:
    return {k: (torch.cat([a[k], b[k]], 1) if k not in ("prompt_ids", "prompt_mask") else a[k]) for k in a}


@torch.no_grad()
def token_logp(model, pool: dict, rows_per_call: int = 1024) -> torch.Tensor:
    """log pi(o^t | ...) of every pool completion under ``model``, ``(P, M, T)``."""
    from llm_runs.rollout import completion_logprobs

    P, M, T = pool["ids"].shape
    out = torch.zeros(P, M, T)
    step = max(1, rows_per_call // M) if M < rows_per_call else 1
    per = min(M, rows_per_call)
    for p0 in range(0, P, step):
        for m0 in range(0, M, per):
            ps = slice(p0, min(P, p0 + step))
            ids = pool["ids"][ps, m0:m0 + per]
            n_p, n_m = ids.shape[:2]
            lp = completion_logprobs(model, pool["prompt_ids"][ps].repeat_interleave(n_m, 0),
                                     pool["prompt_mask"][ps].repeat_interleave(n_m, 0), ids.reshape(n_p * n_m, T),
                                     1.0, n_m)
            out[ps, m0:m0 + per] = lp.view(n_p, n_m, T).float()
    return out * pool["mask"]


def drift_stats(logw: torch.Tensor, tok_lr: torch.Tensor, mask: torch.Tensor) -> dict:
    """The pair's drift from its pi_b pool: KL per token (:func:`llm_runs.theory.kl_per_token`), and per prompt
    (median over prompts) the sequence chi^2, the ESS fraction and the top-1% share of the weight mass."""
    from llm_runs.theory import kl_per_token

    w = torch.exp(logw.double() - logw.double().amax(1, keepdim=True))  # per prompt, scale-free
    P, M = w.shape
    ess = (w.sum(1) ** 2 / (M * (w**2).sum(1)))
    lw = logw.double()
    chi2 = torch.exp(torch.logsumexp(2 * lw, 1) - math.log(M)) - 1
    top = max(1, M // 100)
    share = w.sort(1, descending=True).values[:, :top].sum(1) / w.sum(1)
    return {"kl": float(kl_per_token(tok_lr.reshape(P * M, -1), mask.reshape(P * M, -1))),
            "chi2": float(chi2.median()), "ess": float(ess.median()), "top1_share": float(share.median())}


# --------------------------------------------------------------------------- coefficients


def coefficients(est: str, G: int, logp: torch.Tensor, blogp: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor,
                 eps: float, rng: np.random.Generator, exact: bool = False, advantage: str = "loo",
                 halves: bool = False):
    """Per completion of one replicate ``(P, n)``, the expected coefficient of its sequence log-probability
    in the correction's update at group size G (averaged over prompts: the update is ``sum_p,j coef
    grad log pi(o_pj)``). Sampled groups without replacement (K = max(1, round(DRAWS / G)) per prompt), or,
    with ``exact``, one group of the whole replicate (the exact expectation for a per-sample correction).
    With ``halves``: ``(average, average over the first half of the groups, over the second half)``."""
    pick, coef = group_coefficients(est, G, logp, blogp, mask, rewards, eps, rng, exact, advantage)
    P, n = logp.shape[:2]
    K = pick.shape[1]
    pidx = torch.arange(P)[:, None, None].expand_as(pick)
    per_tok = coef.reshape(-1)
    acc = completion_coefficients(pick, coef, n)
    if not halves:
        return acc
    # the same average from each half of the groups (each scaled to a whole average): their difference
    # measures the Monte Carlo spread of ``acc`` (gate b's reference)
    first = (torch.arange(K) < K // 2)[None, :, None].expand_as(pick).reshape(-1)
    a = torch.zeros(P, n, dtype=torch.float64)
    a.index_put_((pidx.reshape(-1)[first], pick.reshape(-1)[first]), per_tok[first], accumulate=True)
    return acc, a * (K / max(K // 2, 1)), (acc - a) * (K / max(K - K // 2, 1))


def completion_coefficients(pick: torch.Tensor, coef: torch.Tensor, n: int) -> torch.Tensor:
    """``(P, n)``: each completion's coefficient summed over the groups ``pick`` drew it into (coefficients ``coef``,
    both ``(P, K, G)``). The loss already averages over the P K groups, so the sum is the average over groups of
    each prompt's update, divided by P."""
    P = pick.shape[0]
    pidx = torch.arange(P)[:, None, None].expand_as(pick)
    acc = torch.zeros(P, n, dtype=torch.float64)
    acc.index_put_((pidx.reshape(-1), pick.reshape(-1)), coef.reshape(-1), accumulate=True)
    return acc


def group_coefficients(est: str, G: int, logp: torch.Tensor, blogp: torch.Tensor, mask: torch.Tensor,
                       rewards: torch.Tensor, eps: float, rng: np.random.Generator, exact: bool = False,
                       advantage: str = "loo") -> tuple[torch.Tensor, torch.Tensor]:
    """The groups :func:`coefficients` draws (the same draws from ``rng``) and each member's coefficient:
    ``(pick, coef)``, both ``(P, K, G)``: the completions of each of K groups per prompt, and the coefficient
    of each one's sequence log-probability in the gradient of the correction's loss over all P K groups
    (a group's own update, the loss of that group alone, is ``P K`` times its coefficients)."""
    import estimators
    from estimators.losses import policy_loss

    P, n, T = logp.shape
    if G > n:
        raise ValueError(f"a pool of {n} completions per prompt and replicate is too small for G = {G} (groups are "
                         f"drawn without replacement; need at least G completions)")
    if exact:
        pick = torch.arange(n)[None, None].expand(P, 1, n)
    else:
        K = max(1, round(DRAWS / G))
        keys = torch.from_numpy(rng.random((P, K, n)))
        # (P, K, G): uniform G-subsets, the G smallest keys in increasing order (argsort(-1)[..., :G], by a
        # partial sort: the same indices, as continuous keys do not tie)
        pick = keys.topk(G, -1, largest=False, sorted=True).indices
    K, Gk = pick.shape[1], pick.shape[2]
    pidx = torch.arange(P)[:, None, None].expand_as(pick)
    lp = logp[pidx, pick].reshape(P * K, Gk, T).reshape(P * K * Gk, T).detach().double().requires_grad_(True)
    blp = blogp[pidx, pick].reshape(P * K * Gk, T).double()
    msk = mask[pidx, pick].reshape(P * K * Gk, T).double()
    r = rewards[pidx, pick].reshape(P * K, Gk).double()
    adv = estimators.advantages(r, advantage)
    out = policy_loss(est, lp, blp, msk, adv.reshape(-1), Gk, eps=eps)
    (g,) = torch.autograd.grad(out.loss, lp)
    coef_tok = -g  # (P K G, T): the update is sum coef grad log pi
    seq = (coef_tok * msk).sum(-1)
    ntok = msk.sum(-1).clamp_min(1)
    per_tok = seq / ntok
    spread = ((coef_tok - per_tok[:, None]) * msk).abs().amax()
    if float(spread) > 1e-9 * max(1.0, float(coef_tok.abs().max())):
        # a coefficient that varies along the tokens: the per-sequence form below does not hold
        raise ValueError(f"{est}: its coefficient varies along a completion's tokens (by {float(spread):.3g}); the "
                         "frozen-pair measurement needs one coefficient per completion")
    return pick, per_tok.detach().view(P, K, Gk)


def loo_target(rewards: torch.Tensor) -> torch.Tensor:
    """The on-policy coefficient of each completion of one replicate ``(P, n)``: (1 / (P n)) (r - mean of the
    other n - 1), whose update is an unbiased estimate of grad J averaged over the prompts."""
    P, n = rewards.shape
    r = rewards.double()
    return (r - (r.sum(1, keepdim=True) - r) / (n - 1)) / (P * n)


# --------------------------------------------------------------------------- gradients


def update_vectors(model, pool: dict, rows: slice, coefs: torch.Tensor, rows_per_call: int = 512) -> torch.Tensor:
    """``(k, params)``: for each of the k coefficient matrices ``coefs (k, P, n)`` the vector
    ``sum_p,j coef_pj grad log pi(o_pj)`` over the pool's completions ``rows`` of every prompt: one forward per
    chunk, then one backward per vector (the graph kept between them)."""
    from llm_runs.rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    k, P, n = coefs.shape
    ids = pool["ids"][:, rows]
    mask = pool["mask"][:, rows]
    out = torch.zeros(k, sum(p.numel() for p in params), dtype=torch.float64)
    step = max(1, rows_per_call // n)
    for p0 in range(0, P, step):
        ps = slice(p0, min(P, p0 + step))
        n_p = ps.stop - ps.start
        lp = completion_logprobs(model, pool["prompt_ids"][ps].repeat_interleave(n, 0),
                                 pool["prompt_mask"][ps].repeat_interleave(n, 0), ids[ps].reshape(n_p * n, -1), 1.0, n)
        seq = (lp * mask[ps].reshape(n_p * n, -1)).sum(-1)
        for i in range(k):
            gs = torch.autograd.grad(seq, params, grad_outputs=coefs[i, ps].reshape(-1).to(seq.dtype),
                                     retain_graph=i < k - 1)
            out[i] += torch.cat([g.reshape(-1) for g in gs]).double()
    return out


def per_sample_vectors(model, pool: dict, rows: slice, coefs: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """What :func:`update_vectors` computes, from per-completion gradients: for each prompt, the gradient of
    every completion's sequence log-probability (``torch.func.vmap`` over ``grad`` of the model's own
    forward on the unpadded prompt and the completion; the tokens after EOS are masked out of the sum and,
    the attention being causal, change nothing before it), then ``coefs @ gradients``. One backward's
    work for all k vectors instead of k backwards."""
    from torch.func import functional_call, grad, vmap

    names = [k for k, p in model.named_parameters() if p.requires_grad]
    params = {k: p.detach() for k, p in model.named_parameters()}
    k, P, n = coefs.shape
    ids, mask = pool["ids"][:, rows], pool["mask"][:, rows]
    out = torch.zeros(k, sum(params[x].numel() for x in names), dtype=torch.float64)

    for p in range(P):
        q = pool["prompt_ids"][p][pool["prompt_mask"][p].bool()]
        L = q.numel()

        def seq_logp(prm, row, msk, L=L):
            logits = functional_call(model, prm, (row[None],), {"use_cache": False}).logits[0, L - 1:-1].float()
            lp = logits.gather(-1, row[L:, None])[:, 0] - torch.logsumexp(logits, -1)
            return (lp * msk).sum()

        per_row = vmap(grad(seq_logp), in_dims=(None, 0, 0))
        full = torch.cat([q[None].expand(n, -1), ids[p]], 1)
        for a in range(0, n, chunk):
            g = per_row(params, full[a:a + chunk], mask[p, a:a + chunk].float())
            flat = torch.cat([g[x].reshape(g[x].shape[0], -1) for x in names], 1).double()
            out += coefs[:, p, a:a + chunk].double() @ flat
    return out


def cross_norm(X: torch.Tensor) -> tuple[float, float]:
    """:func:`stats.offdiagonal_mean` of the replicates ``X`` (unbiased for |E X|^2) and
    its jackknife s.e."""
    gram = (X @ X.T).double()
    return jackknife(lambda keep: offdiagonal_mean(gram, keep), len(X))


def relative_bias(D: torch.Tensor, T: torch.Tensor, V: torch.Tensor) -> tuple[float, float, float, float]:
    """``(rel_bias_sq, jackknife s.e., cosine of mean V to mean T, |mean V| / |mean T|)``: the ratio of the
    cross-product estimates of |E D|^2 and |E T|^2 (D = V - T per replicate, T independent of V). NaN where
    the target's estimate is not above 0 (a policy whose on-policy groups all have equal rewards has no
    gradient to be biased against: the measurement fails, :func:`studies.group_size.pairs.gate_table`)."""
    gD, gT = (D @ D.T).double(), (T @ T.T).double()

    def ratio(keep):  # undefined (NaN) where the target's squared norm is not estimated above 0
        den = offdiagonal_mean(gT, keep)
        return offdiagonal_mean(gD, keep) / den if den > 0 else math.nan

    full, se = jackknife(ratio, len(D))
    mv, mt = V.mean(0), T.mean(0)
    norm = float(mv.norm() * mt.norm())
    cos = float(mv @ mt) / norm if norm > 0 else math.nan
    return full, se, cos, float(mv.norm() / mt.norm()) if float(mt.norm()) > 0 else math.nan


def mc_agreement(sampled: list, exact: list) -> dict:
    """Gate (b): whether sampled-group averages agree with the exact expectation within their own Monte Carlo
    error. Per completion, ``x = (c - c_exact)^2 - (c_A - c_B)^2 / 4`` has mean 0 when the sampled average
    ``c = (c_A + c_B) / 2`` (halves of independent groups) is unbiased for ``c_exact``; the z-statistic of the
    mean of x over every completion and replicate, with its computed standard error. ``sampled``: the
    ``(c, c_A, c_B)`` of each replicate; ``exact``: each replicate's exact coefficients."""
    dist = float(torch.cat([(c - e).reshape(-1) for (c, _, _), e in zip(sampled, exact)]).norm()
                 / torch.cat([e.reshape(-1) for e in exact]).norm().clamp_min(1e-300))
    if all(float((a - b).norm()) <= 1e-9 * float(a.norm()) for (_, a, b) in sampled):
        # no Monte Carlo spread beyond rounding (G is the whole replicate: every group holds the same completions,
        # in another order): the average must equal the exact expectation up to rounding
        return {"z": 0.0 if dist < 1e-9 else math.inf, "relative_distance": dist}
    x = torch.cat([((c - e) ** 2 - (a - b) ** 2 / 4).reshape(-1) for (c, a, b), e in zip(sampled, exact)])
    scale = torch.cat([e.reshape(-1) for e in exact]).abs().max().clamp_min(1e-300) ** 2
    x = x / scale
    se = float(x.std() / math.sqrt(len(x))) if len(x) > 1 else 0.0
    m = float(x.mean())
    z = m / se if se > 0 else (0.0 if abs(m) < 1e-24 else math.inf)
    return {"z": z, "relative_distance": dist}
