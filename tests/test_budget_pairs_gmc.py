"""GMC's group update in the frozen-pair table (studies.budget.pairs*) where its cap binds (lambda < 1): the pool
pass's u (a group's own coefficients from the registered loss, times the per-completion gradients) against the
gradient of the loss on the group alone by autograd through the model, as a vector, through the pass's second
moment and through the pool groups of the direct Monte Carlo probe; and the probe's tail statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

G, EPS = 8, 0.2
U32 = 2.0**-24
"""float32's unit roundoff: the table's dtype (the committed config's)."""


@pytest.fixture(scope="module")
def capped():
    """pi_b the committed long-horizon warm start, pi a perturbed copy (as tests/test_budget_pairs.py's pair), and
    one prompt's 64 completions of pi_b, reordered so that the first G are the largest pi / pi_b (a group whose GMC
    cap binds); rewards planted 1, 0, 1, 0, ... so that every leave-one-out advantage of every group of G
    consecutive completions is nonzero (u does not depend on where the rewards came from)."""
    from llm_runs.presets import load_pretrained
    from llm_runs.reference import committed_config
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import default_max_new_tokens, get_warm_start
    from studies.common.pool import pool_prompts, sample_pool, token_logp

    torch.set_num_threads(1)
    cfg = committed_config("long")
    task = build_task(cfg)
    path = get_warm_start(cfg, task, lambda m: None).path
    pib, tok = load_pretrained(path, cfg.dtype, cfg.device)
    pi, _ = load_pretrained(path, cfg.dtype, cfg.device)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in pi.parameters():
            p.add_(0.004 * torch.randn(p.shape, generator=g))
    for m in (pi, pib):
        m.eval()
    mx = default_max_new_tokens(cfg, task)
    with torch.no_grad():
        b = sample_pool(pib, tok, task, pool_prompts(task)[:1], 64, 0, mx, chunk=64)
        lp = token_logp(pi, b)
    logw = ((lp - b["blogp"]) * b["mask"]).sum(-1)[0]
    top = logw.topk(G).indices
    order = torch.cat([top, torch.tensor([j for j in range(64) if j not in set(top.tolist())])])
    pool = {k: (v if k.startswith("prompt") else v[:, order]) for k, v in b.items()}
    pool["rewards"] = (torch.arange(64) % 2 == 0).float()[None]
    return {"pi": pi, "pool": pool, "lp": lp[:, order], "T": b["ids"].shape[-1]}


def _rtol(T: int) -> float:
    """Rounding allowed between the two paths, relative to ``S = sum_i |a_i| |grad log pi(o_i)|`` (the size of u's
    terms, which u's own norm may cancel below): each path forms a completion's log-probabilities and their gradient
    in float32 from a sum over its T positions (the hooks of a batched pass against autograd through a shared prompt
    cache), each position's term rounded to u = 2^-24 relative; 16 T u bounds the difference with a margin for the
    depth (4 layers) and for the weights, which are exponentials of the same float32 sums."""
    return 16 * T * U32


def _direct_vector(model, pool: dict, sl: slice, est: str) -> torch.Tensor:
    """u of the group ``sl`` by autograd of the registered loss through the model (the direct Monte Carlo's calls)."""
    from estimators import advantages
    from estimators.losses import policy_loss
    from llm_runs.rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    lp = completion_logprobs(model, pool["prompt_ids"][:1].expand(G, -1), pool["prompt_mask"][:1].expand(G, -1),
                             pool["ids"][0, sl], 1.0, G)
    adv = advantages(pool["rewards"][:, sl].double(), "loo").reshape(-1)
    out = policy_loss(est, lp, pool["blogp"][0, sl], pool["mask"][0, sl].to(lp.dtype), adv, G, eps=EPS)
    return -torch.cat([g.reshape(-1) for g in torch.autograd.grad(out.loss, params)]).double()


def _pool_terms(c: dict, est: str, sl: slice):
    """The pool pass's pieces of the group ``sl``: its own coefficients ``a`` ``(G,)`` (the table's
    :func:`studies.common.pool.group_coefficients`, one group: P K = 1) and per-completion gradients
    ``(G, dim)``."""
    from studies.budget.pairs_grads import per_completion_gradients
    from studies.common.pool import group_coefficients

    pool = c["pool"]
    _, coef = group_coefficients(est, G, c["lp"][:, sl], pool["blogp"][:, sl], pool["mask"][:, sl],
                                 pool["rewards"][:, sl], EPS, None, exact=True)
    prompt = pool["prompt_ids"][0][pool["prompt_mask"][0].bool()]
    grads = per_completion_gradients(c["pi"], prompt, pool["ids"][0, sl], pool["mask"][0, sl].float()).double()
    return coef[0, 0], grads


def _lambda(c: dict, sl: slice) -> float:
    """GMC's lambda of the group, from its float64 trajectory log-ratios (as the loss widens them)."""
    import estimators
    from estimators.losses import trajectory_log_ratio

    pool = c["pool"]
    lr = trajectory_log_ratio(c["lp"][0, sl].double(), pool["blogp"][0, sl].double(), pool["mask"][0, sl].double())
    return float(estimators.gmc_lambda(lr[None], EPS).reshape(-1)[0])


def test_a_capped_gmc_group_s_pool_update_is_the_gradient_of_its_loss(capped):
    first = slice(0, G)
    lam = _lambda(capped, first)
    assert lam < 0.9, f"the fixture's first group must have its GMC cap binding, lambda = {lam}"
    a, grads = _pool_terms(capped, "gmc", first)
    assert bool((a != 0).all())  # every member counts (nonzero advantages)
    u_pool = a @ grads
    u_direct = _direct_vector(capped["pi"], capped["pool"], first, "gmc")
    S = float((a.abs() * grads.norm(dim=1)).sum())
    assert float((u_pool - u_direct).norm()) <= _rtol(capped["T"]) * S
    # the pool's GMC coefficients are lambda times IS's (float64 arithmetic on the same log-ratios), and lambda's
    # share of u is far above the rounding: a pass that lost lambda (or kept it on the gradient path) fails above
    a_is, _ = _pool_terms(capped, "is", first)
    assert torch.allclose(a, lam * a_is, rtol=1e-12, atol=0)
    assert float((a_is @ grads - u_direct).norm()) > 1e3 * _rtol(capped["T"]) * S


def test_the_pass_s_second_moment_of_a_capped_group_is_the_direct_one(capped):
    """The table's own code path (replicate_coefficients, Accumulators, prompt_pass) on a replicate of exactly the
    capped group: every sampled group is its G members (in some order), so the pass's mean |u|^2 is that group's;
    against the direct Monte Carlo's autograd value (group_second_moments); the sketched value within the sketch's
    bound (the table's SKETCH_Z s.d. of sqrt(2/k))."""
    from studies.budget.pairs_checks import SKETCH_Z, group_second_moments
    from studies.budget.pairs_grads import CountSketch
    from studies.budget.pairs_pass import Accumulators, prompt_pass, replicate_coefficients

    first = slice(0, G)
    pool = {k: (v if k.startswith("prompt") else v[:, first]) for k, v in capped["pool"].items()}
    lp = capped["lp"][:, first]
    rep = replicate_coefficients(lp, pool["blogp"], pool["mask"], pool["rewards"], EPS, np.random.default_rng(0), [G])
    assert rep["cap"][G] == 1.0  # the pass sees the cap binding in every draw
    dim = sum(p.numel() for p in capped["pi"].parameters() if p.requires_grad)
    acc = Accumulators([rep], 1, dim, [("gmc", G)])
    sketch = CountSketch(dim)
    prompt_pass(capped["pi"], pool, 0, [rep], torch.zeros(1, dim), acc, sketch)
    exact = acc.checks[0]["second_moment"][f"gmc/G{G}"]["exact"]
    direct = float(group_second_moments(capped["pi"], pool, "gmc", G, EPS, 1)[0, 0])
    a, grads = _pool_terms(capped, "gmc", first)
    S = float((a.abs() * grads.norm(dim=1)).sum())
    # ||x|^2 - |y|^2| <= (|x| + |y|) |x - y|, |x - y| within the vectors' tolerance
    assert abs(exact - direct) <= 2.01 * math.sqrt(direct) * _rtol(capped["T"]) * S
    assert abs(float(acc.second[("gmc", G)][0, 0]) / exact - 1) <= SKETCH_Z * math.sqrt(2 / sketch.k)


def test_the_probe_s_pool_groups_are_the_direct_groups(capped):
    """The probe's pool side (disjoint groups of G consecutive completions, the table's formula) against autograd of
    the loss on the same groups, every group: the capped first group and the others."""
    from studies.budget.pairs_checks import group_second_moments
    from studies.budget.pairs_mc_probe import pool_group_second_moments

    got = pool_group_second_moments(capped["pi"], capped["pool"], capped["lp"], "gmc", G, EPS, 2)
    direct = group_second_moments(capped["pi"], capped["pool"], "gmc", G, EPS, 64 // G)
    assert got["u2"].shape == direct.shape == (1, 64 // G)
    assert got["lam"][0, 0] == pytest.approx(_lambda(capped, slice(0, G)), rel=1e-12) and got["lam"][0, 0] < 0.9
    for k in range(64 // G):
        a, grads = _pool_terms(capped, "gmc", slice(k * G, (k + 1) * G))
        S = float((a.abs() * grads.norm(dim=1)).sum())
        assert abs(got["u2"][0, k] - direct[0, k]) <= 2.01 * math.sqrt(direct[0, k]) * _rtol(capped["T"]) * S, k
    with pytest.raises(ValueError, match="does not cut into 3 replicates"):
        pool_group_second_moments(capped["pi"], capped["pool"], capped["lp"], "gmc", G, EPS, 3)


def test_tail_statistics_and_the_resampled_check_by_enumeration():
    from studies.budget.pairs_mc_probe import resampled_check, tail_stats

    # 99 values 1 and one 100 (two prompts of 50): moments of a two-point law, the top 1% one value
    x = np.ones(100)
    x[7] = 100.0
    st = tail_stats(x.reshape(2, 50))
    p = 0.01
    assert st["direct"] == pytest.approx(1.99, abs=1e-12)
    assert st["skewness"] == pytest.approx((1 - 2 * p) / math.sqrt(p * (1 - p)), rel=1e-12)
    assert st["excess_kurtosis"] == pytest.approx((1 - 6 * p * (1 - p)) / (p * (1 - p)), rel=1e-12)
    assert st["top1pct_groups"] == 1 and st["top1pct_share"] == pytest.approx(100 / 199, rel=1e-12)
    assert st["direct_se"] == pytest.approx(math.sqrt(np.var(x[:50], ddof=1) / 50) / 2, rel=1e-12)
    # one prompt of 4 groups, 2 drawn: every pair equally likely; the mean falls below mu unless the pair holds 9
    u2 = np.array([[1.0, 1.0, 1.0, 9.0]])
    rc = resampled_check(u2, 2, 6000, seed=0)
    assert rc["mu"] == 3.0
    share = 0.5  # 3 of the 6 pairs miss the 9
    assert abs(rc["share_below_mean"] - share) <= 4 * math.sqrt(share * (1 - share) / 6000)
    assert rc["ratio_q05"] == pytest.approx(1 / 3, abs=1e-12) and rc["ratio_q95"] == pytest.approx(5 / 3, abs=1e-12)
