"""The 2026 corrections (p3o, ctpo, minpro, trm_k2, trm_k3, dispo, oapl): each loss against its reference
formula (P3O against FeynRL's P3O.compute_policy_loss, transcribed below) on fixed batches, value and
gradient; claim 23's exact check."""
import math

import pytest
import torch

from estimators.losses import (
    CORRECTIONS_2026,
    TOKEN_LOSSES,
    batch_token_ess,
    is_batch_coupled,
    is_bounded,
    oapl_optimal_advantages,
    policy_loss,
    trm_keep_rows,
)


def _batch(seed=0, B=8, T=5, scale=0.4):
    g = torch.Generator().manual_seed(seed)
    lp = (torch.randn(B, T, generator=g, dtype=torch.float64) * scale - 1.0).clamp(max=-1e-3)
    old = (torch.randn(B, T, generator=g, dtype=torch.float64) * scale - 1.0).clamp(max=-1e-3)
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[5, 2:] = 0
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    return lp, old, mask, adv


def _grad(name, lp, old, mask, adv, G=4, eps=0.2, **kw):
    x = lp.clone().requires_grad_(True)
    out = policy_loss(name, x, old, mask, adv, G, eps, **kw)
    (g,) = torch.autograd.grad(out.loss, x)
    return out, g


def feynrl_p3o(logprobs, old_logprobs, advantages, mask):
    """FeynRL-project/FeynRL algs/P3O/p3o.py (P3O.calculate_ess, P3O.compute_policy_loss) and
    algs/RL/common.py (compute_kl_distance) at 2dbc6beb, no entropy and no reference KL, divided by the
    token count (normalize_loss)."""
    mask_bool = mask > 0.5
    m = mask_bool.to(logprobs.dtype)
    logratio = torch.where(mask_bool, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(logratio)
    v = ratio.detach()[mask_bool]
    ess = float((v.sum() ** 2) / (v.pow(2).sum() + 1e-8) / v.numel())
    kl = (logprobs - old_logprobs) + torch.exp(torch.clamp(old_logprobs - logprobs, -10.0, 10.0)) - 1
    kl = torch.where(mask_bool, kl, torch.zeros_like(kl))
    rho = torch.clamp(ratio, min=0, max=ess)
    pi_sum = -(rho.detach() * logprobs * advantages[:, None] * m).sum()
    total = pi_sum + (1 - ess) * (kl * m).sum()
    return total / m.sum(), ess


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_p3o_equals_feynrl_on_fixed_batches(seed):
    lp, old, mask, adv = _batch(seed)
    out, g = _grad("p3o", lp, old, mask, adv)
    x = lp.clone().requires_grad_(True)
    ref, ess = feynrl_p3o(x, old, adv, mask)
    (g_ref,) = torch.autograd.grad(ref, x)
    assert out.metrics["p3o_ess"] == pytest.approx(ess, rel=1e-9)
    assert float(out.loss) == pytest.approx(float(ref), rel=1e-9, abs=1e-12)
    assert torch.allclose(g, g_ref, rtol=1e-9, atol=1e-12)
    assert 0 < ess < 1 and is_batch_coupled("p3o")


def test_p3o_ess_is_the_batch_statistic_and_finite_at_extreme_ratios():
    lp, old, mask, adv = _batch(3)
    one, _ = _grad("p3o", lp[:4], old[:4], mask[:4], adv[:4])
    both, _ = _grad("p3o", lp, old, mask, adv)
    assert one.metrics["p3o_ess"] != pytest.approx(both.metrics["p3o_ess"])  # a batch statistic
    far = old.clone()
    far[0, 0] = -900.0  # log r = +899 at one token: FeynRL's exp overflows; here the ESS is 1/n in the limit
    out, g = _grad("p3o", lp, far, mask, adv)
    assert math.isfinite(float(out.loss)) and bool(torch.isfinite(g).all())
    assert out.metrics["p3o_ess"] == pytest.approx(1 / mask.sum().item(), rel=1e-6)


def test_ctpo_weights_are_the_clipped_prefix_ratios():
    lp, old, mask, adv = _batch(4)
    B, _T = lp.shape
    for delta in (0.05, 0.2, 1e6):
        _out, g = _grad("ctpo", lp, old, mask, adv, delta=delta)
        want = torch.zeros_like(lp)
        for b in range(B):
            L, n = 0.0, int(mask[b].sum())
            for t in range(n):
                L += float(lp[b, t] - old[b, t])
                bound = delta * math.sqrt(t + 1)
                want[b, t] = -math.exp(min(max(L, -bound), bound)) * float(adv[b]) / n / B
        assert torch.allclose(g, want, rtol=1e-10, atol=1e-14), delta


def test_minpro_uses_the_prefix_minimum_in_ppo_clip():
    lp, old, mask, adv = _batch(5)
    eps = 0.2
    B, _T = lp.shape
    _out, g = _grad("minpro", lp, old, mask, adv, eps=eps)
    want = torch.zeros_like(lp)
    for b in range(B):
        n = int(mask[b].sum())
        mn = math.inf
        for t in range(n):
            mn = min(mn, math.exp(float(lp[b, t] - old[b, t])))
            a = float(adv[b])
            clipped = (a > 0 and mn > 1 + eps) or (a < 0 and mn < 1 - eps)
            want[b, t] = 0.0 if clipped else -mn * a / n / B
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-14)
    assert not is_bounded("minpro")


@pytest.mark.parametrize("kind", ["k2", "k3"])
def test_trm_masks_whole_sequences_by_the_largest_token_divergence(kind):
    lp, old, mask, adv = _batch(6, scale=0.15)
    delta = 0.06
    out, g = _grad(f"trm_{kind}", lp, old, mask, adv, delta=delta)
    _ref_all, g_all = _grad("token_clip", lp, old, mask, adv)
    lr = (lp - old) * mask
    div = 0.5 * lr ** 2 if kind == "k2" else torch.expm1(lr) - lr
    kept = (torch.where(mask > 0, div, torch.zeros_like(div)).max(-1).values <= delta)
    assert 0 < int(kept.sum()) < len(kept)  # the batch exercises both branches
    assert torch.allclose(g[kept], g_all[kept], rtol=1e-12) and bool((g[~kept] == 0).all())
    assert out.metrics["seq_clip_frac"] == pytest.approx(float((~kept).double().mean()))


def test_dispo_four_regimes():
    lp, old, mask, adv = _batch(7, scale=0.5)
    kn = {"pos_low": 0.1, "pos_high": 0.3, "neg_low": 0.25, "neg_high": 0.05}
    out, g = _grad("dispo", lp, old, mask, adv, **kn)
    r = torch.exp(lp - old)
    pos = (adv > 0)[:, None]
    f = lambda v: torch.tensor(v, dtype=torch.float64)
    lo = torch.where(pos, f(1 - kn["pos_low"]), f(1 - kn["neg_low"]))
    hi = torch.where(pos, f(1 + kn["pos_high"]), f(1 + kn["neg_high"]))
    w = torch.minimum(torch.maximum(r, lo), hi)
    want = -(w * adv[:, None] * mask) / mask.sum()
    assert torch.allclose(g, want, rtol=1e-12, atol=1e-15)
    assert out.metrics["token_clip_frac"] > 0


def test_oapl_regresses_beta_log_ratio_on_the_optimal_advantage():
    lp, old, mask, adv = _batch(8)
    G, beta = 4, 0.7
    out, g = _grad("oapl", lp, old, mask, adv, G=G, beta=beta)
    a = adv.reshape(-1, G)
    a_star = a - beta * torch.log(torch.exp(a / beta).mean(-1, keepdim=True))
    lseq = ((lp - old) * mask).sum(-1).reshape(-1, G)
    assert float(out.loss) == pytest.approx(float(((beta * lseq - a_star) ** 2).mean() / (2 * beta)), rel=1e-12)
    want = ((beta * lseq - a_star) / a_star.numel()).reshape(-1, 1) * mask
    assert torch.allclose(g, want, rtol=1e-10, atol=1e-14)
    shifted, _ = _grad("oapl", lp, old, mask, adv + 3.0, G=G, beta=beta)  # A* ignores a common reward shift
    assert float(shifted.loss) == pytest.approx(float(out.loss), rel=1e-10)


def test_every_2026_correction_is_registered_with_its_declarations():
    assert set(CORRECTIONS_2026) <= set(TOKEN_LOSSES)
    assert [n for n in CORRECTIONS_2026 if is_batch_coupled(n)] == ["p3o"]
    assert {n for n in CORRECTIONS_2026 if not is_bounded(n)} == {"minpro", "trm_k2", "trm_k3"}
    for n in CORRECTIONS_2026:  # each names its reference code, or says it could not read one
        doc = " ".join(TOKEN_LOSSES[n].doc.split())
        assert "Followed:" in doc or "was not available to read" in doc, n


def test_claim_23_refutes_unbiasedness_on_e2_and_finds_equality_on_e1():
    from claims.prefix import BIAS_TOL, check_23, prefix_points

    pts = prefix_points(quick=True)
    e1 = [p for p in pts if p["case"] == "E1"]
    e2 = [p for p in pts if p["case"] == "E2"]
    assert all(p["prefix_bias"] <= BIAS_TOL and p["prefix_var"] == pytest.approx(p["is_var"], rel=1e-9) for p in e1)
    assert all(p["prefix_bias"] > 1e-3 and p["prefix_var"] < p["is_var"] for p in e2)
    res = check_23(quick=True)
    assert res.status == "FAIL" and "verdict: refuted" in res.evidence


@pytest.mark.parametrize("call, match", [
    (lambda: oapl_optimal_advantages(torch.tensor([[1.0, 0.0]]), 0.0), r"beta"),
    (lambda: oapl_optimal_advantages(torch.tensor([[1.0, 0.0]]), math.nan), r"beta"),
    (lambda: oapl_optimal_advantages(torch.tensor([[1.0, math.nan]]), 1.0), r"advantages .*\(0, 1\)"),
    (lambda: oapl_optimal_advantages(torch.zeros(2, 0), 1.0), r"advantages has an empty group"),
    (lambda: oapl_optimal_advantages(torch.zeros(4), 1.0), r"advantages must have shape \(prompts_per_step, G\)"),
    (lambda: oapl_optimal_advantages([[1.0, 0.0]], 1.0), r"torch tensor"),
    (lambda: batch_token_ess(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool)), r"at least one completion token"),
    (lambda: trm_keep_rows(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), "k2", math.nan), r"delta"),
    (lambda: trm_keep_rows(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), "k3", -0.1), r"delta"),
    (lambda: trm_keep_rows(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), "k9", 0.05), r"unknown TRM"),
])
def test_the_2026_corrections_helpers_refuse_what_their_losses_refuse(call, match):
    """The public helpers of the 2026 corrections check what their loss checks (a NaN delta dropped every
    row, a beta of 0 or NaN and a NaN advantage gave NaN advantages, an empty group 'math domain error', no
    completion token a NaN ESS): a ValueError naming the knob, the index or the shape."""
    with pytest.raises(ValueError, match=match):
        call()
