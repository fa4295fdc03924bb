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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

T_PAIR = 70
DELAY = 64
PROMPTS = 32
M_BASE = 1024
M_LOW_ESS = 4096
LOW_ESS = 0.02
REPLICATES = 8
DRAWS = 2048
"""K x G completions drawn per prompt and replicate (K = max(1, round(DRAWS / G)) groups)."""
PAIR_G = (2, 4, 8, 16, 32, 64, 128)
PAST_G = 512
ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is", "snis", "vespo", "gspo")
PER_SAMPLE = ("is", "tic_trunc", "tic_mask")
"""Corrections whose coefficient depends on a completion's own ratio and reward only: their expected
coefficient over groups is exact (the leave-one-out baseline over the rest of the replicate), and the
sampled-group average is checked against it (gate b)."""
PROMPT_SEED = (20261206, 49)
POOL_SEED = 20261206
FORMAT = "gmc-grpo-group-size-pairs/1"


@dataclass(frozen=True)
class Pair:
    name: str
    grid: str
    run_prefix: str  # the committed runs' name before "-s<seed>"
    overrides: dict
    rank: int  # which qualifying seed (0: the lowest)
    past_boundary: bool


PAIRS = (
    Pair("p1", "drift", "long-adamclip1e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-5}, 0, False),
    Pair("p2", "drift", "long-adamclip3e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 3e-5}, 0, False),
    Pair("p3", "drift", "long-adamclip3e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 3e-5}, 1, False),
    Pair("p4", "mechanism", "long-adamclip-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-4}, 0, True),
    Pair("p5", "mechanism", "long-adamclip-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-4}, 1, True),
    Pair("p6", "primary", "long-gmc-d64", {"lr": 1e-4}, 0, True),
    Pair("p7", "drift", "long-sgd0.0003-gmc-d64", {"optimizer": "sgd", "lr": 3e-4}, 0, True),
    Pair("p8", "drift", "long-sgd0.0006-gmc-d64", {"optimizer": "sgd", "lr": 6e-4}, 0, True),
)
"""The pre-registered pairs (docs/PREREGISTRATION-GROUP-SIZE.md)."""


def pair_Gs(pair: Pair) -> tuple[int, ...]:
    return PAIR_G + ((PAST_G,) if pair.past_boundary else ())


# --------------------------------------------------------------------------- choosing and retraining


def committed_run(pair: Pair) -> tuple[Path, int, list[dict]]:
    """The committed run the pair retrains: the ``rank``-th lowest seed whose run had not collapsed by
    update :data:`T_PAIR` (seed 0 if none qualifies), with every candidate's collapse update."""
    from schema.results import grid_folder, run_folders
    from studies.drift.analysis import d5_run

    runs = {r.name: r for r in run_folders(grid_folder(pair.grid)) if r.name.startswith(pair.run_prefix + "-s")}
    seeds = sorted(int(n.rsplit("-s", 1)[1]) for n in runs)
    if not seeds:
        raise ValueError(f"no committed run named {pair.run_prefix}-s<seed> in {grid_folder(pair.grid)}")
    cand, ok = [], []
    for s in seeds:
        rec = d5_run(runs[f"{pair.run_prefix}-s{s}"])
        tc = None if rec is None else rec["t_collapse"]
        cand.append({"seed": s, "t_collapse": tc})
        if tc is None or tc > T_PAIR:
            ok.append(s)
    seed = ok[pair.rank] if len(ok) > pair.rank else seeds[0]
    return runs[f"{pair.run_prefix}-s{seed}"], seed, cand


def retrain(pair: Pair, run: Path, cache: Path, log=print) -> dict:
    """theta_{t-64} and theta_t of the committed run's settings retrained to update t = :data:`T_PAIR`
    (cached in ``cache/<pair>``), and the retrained rows against the committed ones."""
    from llm_runs.config import resolve_config
    from llm_runs.trainer import Trainer
    from schema.results import read_run, read_run_config

    folder = cache / pair.name
    saved = folder / "pair.pt"
    if saved.is_file():
        return torch.load(saved, weights_only=False)
    cfg = dict(read_run_config(run))
    for k, v in pair.overrides.items():
        if cfg.get(k, v) != v:
            raise ValueError(f"{run}: the committed run has {k} = {cfg.get(k)!r}, the pair {pair.name} {v!r}")
    cfg.update({"steps": T_PAIR, "checkpoint_every": 0, "keep_checkpoints": 1})
    config = resolve_config(cfg)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)  # an unfinished retrain of this pair's own cache (never a result)
    trainer = Trainer(config, folder / "run", progress=False, log=log)
    t0 = time.perf_counter()
    trainer.run()
    behaviour = trainer.source.ring.get(T_PAIR - DELAY)
    current = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    _, mine = read_run(folder / "run")
    _, theirs = read_run(run)
    cmp = {}
    for col in ("train/reward_mean", "train/grad_norm"):
        a = mine.set_index("step")[col].dropna()
        b = theirs.set_index("step")[col].dropna().reindex(a.index)
        cmp[col] = {"max_abs_diff": float((a - b).abs().max()), "identical": bool((a.to_numpy() == b.to_numpy()).all())}
    out = {"behaviour": behaviour, "current": current, "config": config.to_dict(), "retrain_s": time.perf_counter() - t0,
           "committed_rows": cmp}
    torch.save(out, saved)
    return out


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
                 eps: float, rng: np.random.Generator, exact: bool = False, advantage: str = "loo") -> torch.Tensor:
    """Per completion of one replicate ``(P, n)``, the expected coefficient of its sequence log-probability
    in the correction's update at group size G (averaged over prompts: the update is ``sum_p,j coef
    grad log pi(o_pj)``). Sampled groups without replacement (K = max(1, round(DRAWS / G)) per prompt), or,
    with ``exact``, one group of the whole replicate (the exact expectation for a per-sample correction)."""
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
        pick = keys.argsort(-1)[..., :G]  # (P, K, G): uniform G-subsets
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
    # per completion (sum over the groups it was drawn into); the loss already averages over P K groups,
    # so the sum is the average over groups of each prompt's update, divided by P
    acc = torch.zeros(P, n, dtype=torch.float64)
    acc.index_put_((pidx.reshape(-1), pick.reshape(-1)), per_tok.detach(), accumulate=True)
    return acc


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

        def seq_logp(prm, row, msk):
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
                    c = coefficients(est, G, lp, blp, msk, rw, eps, rng)
                    gate_b.setdefault((est, G), []).append(float((c - exact).norm() / exact.norm().clamp_min(1e-300)))
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
        uniq, where = [], []  # a coefficient matrix equal to an earlier one (GMC where no cap binds is IS) is one vector
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


def cross_norm(X: torch.Tensor) -> tuple[float, float]:
    """``sum_{r != s} <X_r, X_s> / (R (R - 1))`` (unbiased for |E X|^2) and its jackknife s.e."""
    gram = (X @ X.T).double()
    R = len(X)

    def est(keep):
        sub = gram[np.ix_(keep, keep)]
        return float((sub.sum() - torch.trace(sub)) / (len(keep) * (len(keep) - 1)))

    full = est(list(range(R)))
    jack = np.array([est([j for j in range(R) if j != i]) for i in range(R)])
    return full, float(math.sqrt((R - 1) / R * ((jack - jack.mean()) ** 2).sum()))


def relative_bias(D: torch.Tensor, T: torch.Tensor, V: torch.Tensor) -> tuple[float, float, float, float]:
    """``(rel_bias_sq, jackknife s.e., cosine of mean V to mean T, |mean V| / |mean T|)``: the ratio of the
    cross-product estimates of |E D|^2 and |E T|^2 (D = V - T per replicate, T independent of V)."""
    R = len(D)
    gD, gT = (D @ D.T).double(), (T @ T.T).double()

    def est(keep):
        k = len(keep)
        a, b = gD[np.ix_(keep, keep)], gT[np.ix_(keep, keep)]
        return float((a.sum() - torch.trace(a)) / (k * (k - 1))) / float((b.sum() - torch.trace(b)) / (k * (k - 1)))

    full = est(list(range(R)))
    jack = np.array([est([j for j in range(R) if j != i]) for i in range(R)])
    se = float(math.sqrt((R - 1) / R * ((jack - jack.mean()) ** 2).sum()))
    mv, mt = V.mean(0), T.mean(0)
    cos = float(mv @ mt / (mv.norm() * mt.norm()))
    return full, se, cos, float(mv.norm() / mt.norm())


GATE_B_TOL = 0.35
"""Gate (b)'s bound on the sampled-group average's relative distance to the exact expectation, per
replicate (the Monte Carlo spread of K x G = 2,048 draws over a replicate of 128 is about 0.1-0.2)."""


def gate_table(rows: list[dict], gate_b: dict, target_sq: float, target_se: float) -> dict:
    """Gate (a): IS within 2 s.e. of 0 at every G; (b): the per-sample corrections' sampled-group averages
    match their exact expectation at every G; (c): the target's replicate spread."""
    is_rows = [r for r in rows if r["estimator"] == "is"]
    a = all(abs(r["rel_bias_sq"]) <= 2 * r["se"] for r in is_rows)
    b_worst = {f"{e}/G{G}": float(np.median(v)) for (e, G), v in gate_b.items()}
    b = all(v <= GATE_B_TOL for v in b_worst.values())
    return {"a_is_unbiased": bool(a), "a_is_values": [[r["rel_bias_sq"], r["se"]] for r in is_rows[:1]],
            "b_tic_invariant": bool(b), "b_median_relative_distance": b_worst,
            "c_target_sq": target_sq, "c_target_se": target_se, "passed": bool(a and b)}


# --------------------------------------------------------------------------- command


def main(argv=None) -> int:
    from schema.io import write_json
    from schema.results import grid_folder, read_json, results_root

    ap = argparse.ArgumentParser(prog="python -m studies.group_size.pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="pair names (default: every pair)")
    ap.add_argument("--quick", action="store_true", help="a small pool (4 prompts x 64-128): a smoke run, written "
                    "under results/cache, never as the result")
    ap.add_argument("--redo", action="store_true", help="measure pairs already in pairs.json again")
    args = ap.parse_args(argv)
    names = {p.name: p for p in PAIRS}
    bad = [n for n in (args.only or []) if n not in names]
    if bad:
        print(f"unknown pair {bad[0]!r}; valid: {', '.join(names)}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    cache = results_root() / "cache" / "group_size_pairs"
    out = (cache / "quick") if args.quick else grid_folder("group_size")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pairs.json"
    doc = read_json(path) if path.is_file() else {"format": FORMAT, "pairs": {}}
    for name in args.only or names:
        if name in doc["pairs"] and not args.redo:
            print(f"{name}: measured already ({path}); --redo to measure it again")
            continue
        doc["pairs"][name] = measure(names[name], cache, args.quick)
        write_json(path, doc)
        write_csv(doc, out / "pairs.csv")
        print(f"{name}: done in {doc['pairs'][name]['cost_s']['total']:.0f} s -> {path}")
    return 0


CSV_COLUMNS = ("pair", "kl", "chi2", "ess", "estimator", "G", "rel_bias", "rel_bias_sq", "cos", "norm_ratio", "se",
               "cap_share", "gates_passed")


def write_csv(doc: dict, path: Path) -> None:
    import pandas as pd

    rows = [{**r, "gates_passed": p["gates"]["passed"]} for p in doc["pairs"].values() for r in p["rows"]]
    pd.DataFrame(rows, columns=list(CSV_COLUMNS)).to_csv(path, index=False)


if __name__ == "__main__":
    raise SystemExit(main())
