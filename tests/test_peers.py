"""Published stale-rollout corrections as peers: hand-derived values and surrogate gradients against
their closed forms (the papers' defaults and bad knobs: tests/test_peers_knobs.py; the adapters' registries
and the trainer: tests/test_peers_adapters.py; exact measurement: tests/test_peers_exact.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import _softmax_policy_batch

import estimators
from estimators import SCHEMES, advantages, weights
from estimators.losses import loss_names, m2po_keep_mask, policy_loss

PEERS_TRAJ = ("topr", "seq_tis", "seq_tis_bn", "seq_mis", "seq_geo_mask", "vespo")
PEERS_TOKEN = ("m2po", "cispo", "opsm", "icepop", "sapo", "dppo_tv")


# ----------------------------------------------------------------- hand-derived values


def test_topr_hand_values():
    # w = (3, 0.5, 2, 0.25), A = (+1, 0, -1, -1): A >= 0 -> c = 1 (the ratio is ignored);
    # A < 0 -> c = min(w, 1): min(2, 1) = 1, min(0.25, 1) = 0.25
    lr = np.log([[3.0, 0.5, 2.0, 0.25]])
    A = np.array([[1.0, 0.0, -1.0, -1.0]])
    np.testing.assert_allclose(weights("topr", lr, 0.2, A), [[1.0, 1.0, 1.0, 0.25]], rtol=1e-15)
    with pytest.raises(ValueError, match="needs `advantages`"):
        weights("topr", lr, 0.2)


def test_seq_tis_truncates_without_normalising():
    from estimators import SCHEMES

    lr = np.log([[3.0, 1.0, 0.5, 10.0]])
    np.testing.assert_allclose(weights("seq_tis", lr, 0.2), [[2.0, 1.0, 0.5, 2.0]], rtol=1e-14)
    np.testing.assert_allclose(weights("seq_tis", lr, 0.2, C=8.0), [[3.0, 1.0, 0.5, 8.0]], rtol=1e-14)
    assert SCHEMES["seq_tis"].sup_mass(0.2, 4, C=8.0) == 8.0 and not SCHEMES["seq_tis"].in_class


def test_seq_tis_bn_normalises_over_the_batch_not_the_group():
    # two groups, C = 2: min(w, 2) = (2, 1, .5, .25 | 1, 1, 1, 1); batch mean 7.75/8 = 0.96875,
    # so c = min(w, 2) / 0.96875; the first group's mass is 3.75/4/0.96875 = 0.9677..., the
    # second 1/0.96875 = 1.0322...; the batch mass is exactly 1
    lr = np.log([[3.0, 1.0, 0.5, 0.25], [1.0, 1.0, 1.0, 1.0]])
    c = weights("seq_tis_bn", lr, 0.2)
    t = np.array([[2.0, 1.0, 0.5, 0.25], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(c, t / 0.96875, rtol=1e-14)
    assert c.mean() == pytest.approx(1.0, rel=1e-14)
    # one group alone: SNIS of the truncated ratios (mass exactly 1)
    np.testing.assert_allclose(weights("seq_tis_bn", lr[:1], 0.2), t[:1] / t[0].mean(), rtol=1e-14)
    # C is a knob; torch agrees
    np.testing.assert_allclose(weights("seq_tis_bn", lr, 0.2, C=3.0), np.minimum(np.exp(lr), 3) / (8.75 / 8),
                               rtol=1e-14)
    np.testing.assert_allclose(weights("seq_tis_bn", torch.from_numpy(lr), 0.2).numpy(), c, rtol=1e-14)
    # the per-group mass approaches the number of groups B when the other groups' ratios vanish
    B = 4
    lr_b = np.full((B, 2), math.log(1e-12))
    lr_b[0] = 0.0
    assert weights("seq_tis_bn", lr_b, 0.2)[0].mean() == pytest.approx(B, rel=1e-9)


def test_seq_mis_hand_values():
    # w = (3, 1, 0.5, 0.25, 2): kept iff 0.5 <= w <= 2 -> (0, 1, 0.5, 0, 2)
    lr = np.log([[3.0, 1.0, 0.5, 0.25, 2.0]])
    np.testing.assert_allclose(weights("seq_mis", lr, 0.2), [[0.0, 1.0, 0.5, 0.0, 2.0]], rtol=1e-14)
    np.testing.assert_allclose(weights("seq_mis", lr, 0.2, lo=0.0, hi=1.0), [[0, 1, 0.5, 0.25, 0]], rtol=1e-14)


def _tokens(log_r, A):
    """(B, T) logp leaf with old_logp = logp - log_r; one group of B rows."""
    log_r = torch.tensor(log_r, dtype=torch.float64)
    logp = torch.full_like(log_r, -1.0).requires_grad_(True)
    return logp, (logp - log_r).detach(), torch.ones_like(log_r), torch.tensor(A, dtype=torch.float64)


def test_m2po_mask_and_gradient_hand_values():
    # log r = (0.5, -0.1 | 0.05, 0): (log r)^2 = (.25, .01 | .0025, 0), mean .065625 > tau = .04;
    # masking the largest leaves (.01 + .0025 + 0)/3 = .00417 <= .04: one token masked.
    # J = (1/4) sum_t M_t r_t A: d(-J)/d logp_t = -M_t r_t A / 4
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -2.0])
    keep = m2po_keep_mask(logp - old, m, 0.04)
    np.testing.assert_array_equal(keep.numpy(), [[0, 1], [1, 1]])
    out = policy_loss("m2po", logp, old, m, A, 2, 0.2)
    (g,) = torch.autograd.grad(out.loss, logp)
    r = np.exp([[0.5, -0.1], [0.05, 0.0]])
    expected = -np.array([[0, 1], [1, 1]]) * r * np.array([[1.0], [-2.0]]) / 4
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-14)
    assert out.metrics["token_clip_frac"] == 0.25 and out.metrics["m2po_m2"] == pytest.approx(0.065625)
    # tau above the batch M2: nothing masked; every token above tau: everything masked
    assert m2po_keep_mask(logp - old, m, 0.07).sum() == 4
    logp2, old2, m2, _ = _tokens([[0.5, -0.5], [0.6, 0.7]], [1.0, -2.0])
    assert m2po_keep_mask(logp2 - old2, m2, 0.04).sum() == 0


def test_cispo_gradient_hand_values():
    # r = (e^0.5, e^-0.1 | e^0.05, 1); clip to [1 - 10, 1 + 0.2]: (1.2, e^-0.1 | e^0.05, 1);
    # J = (1/4) sum_t sg(clip r_t) A log pi_t: d(-J)/d logp_t = -clip(r_t) A / 4
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -2.0])
    out = policy_loss("cispo", logp, old, m, A, 2, 0.2)
    (g,) = torch.autograd.grad(out.loss, logp)
    w = np.array([[1.2, math.exp(-0.1)], [math.exp(0.05), 1.0]])
    np.testing.assert_allclose(g.numpy(), -w * np.array([[1.0], [-2.0]]) / 4, rtol=1e-14)
    assert out.metrics["token_clip_frac"] == 0.25
    # a finite lower clip: eps_low = 0.05 lifts e^-0.1 to 0.95
    out = policy_loss("cispo", logp, old, m, A, 2, 0.2, eps_low=0.05)
    (g,) = torch.autograd.grad(out.loss, logp)
    assert float(g[0, 1]) == pytest.approx(-0.95 / 4, rel=1e-14)


def test_opsm_drops_only_negative_and_far_sequences():
    # rows: A = (-1, -1, +1, +1) (one group, zero-sum); mean_t log(pi_b/pi_theta) = -mean log r
    # = (0.6, 0.4, 0.9, 0.0): row 0 dropped (A < 0 and 0.6 > 0.5), row 1 kept (0.4 <= 0.5),
    # row 2 kept (A > 0); with no token clipped, -d loss/d logp_t = keep_i r_t A_i / (|o_i| B)
    log_r = [[-0.6, -0.6], [-0.4, -0.4], [-0.9, -0.9], [0.0, 0.0]]
    logp, old, m, A = _tokens(log_r, [-1.0, -1.0, 1.0, 1.0])
    out = policy_loss("opsm", logp, old, m, A, 4, 10.0)  # eps = 10: the token clip never binds
    (g,) = torch.autograd.grad(out.loss, logp)
    keep = np.array([0.0, 1.0, 1.0, 1.0])[:, None]
    expected = -keep * np.exp(log_r) * np.array([-1.0, -1.0, 1.0, 1.0])[:, None] / (2 * 4)
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-14)
    assert out.metrics["seq_clip_frac"] == 0.25
    out = policy_loss("opsm", logp, old, m, A, 4, 10.0, delta=0.3)  # now row 1 goes too
    assert out.metrics["seq_clip_frac"] == 0.5


def test_gspo_uses_its_own_clip_range_not_eps():
    # s = exp(mean_t log r): e^0.001 > 1 + 4e-4 with A > 0 and e^-0.001 < 1 - 3e-4 with A < 0: both
    # clipped by GSPO's default range whatever eps is (the trainer's eps = 0.2 once leaked in as
    # the lower clip); with eps_high = 0.01 only the second is
    logp, old, m, A = _tokens([[0.001, 0.001], [-0.001, -0.001]], [1.0, -1.0])
    for eps in (0.2, 3e-4):
        assert policy_loss("gspo", logp, old, m, A, 2, eps).metrics["seq_clip_frac"] == 1.0
    assert policy_loss("gspo", logp, old, m, A, 2, 0.2, eps_high=0.01).metrics["seq_clip_frac"] == 0.5


# ----------------------------------------------------------------- surrogate gradient = closed form


def _policy(scale, seed=11, prompts_per_step=3, G=4, T=5, V=3):
    theta0, theta_b, tokens, mask, rewards = _softmax_policy_batch(seed, prompts_per_step, G, T, V, scale)
    theta = theta0.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1).gather(1, tokens.T).T
    old = torch.log_softmax(theta_b, -1).gather(1, tokens.T).T
    score = ((torch.nn.functional.one_hot(tokens, V).to(torch.float64) - torch.softmax(theta0, -1)[None])
             * mask[..., None]).detach()  # (B, T, V): grad of log pi(o_t) in row t
    A = advantages(rewards, "loo").reshape(-1)
    return theta, logp, old, mask, A, score, G


@pytest.mark.parametrize("scale", [0.05, 0.8])
@pytest.mark.parametrize("name", PEERS_TOKEN)
def test_token_peer_gradient_equals_closed_form(name, scale):
    theta, logp, old, mask, A, score, G = _policy(scale)
    log_r = ((logp - old) * mask).detach()
    r = torch.exp(log_r)
    if name == "cispo":  # (1/N) sum_{i,t} clip(r) A_i s_t
        coef = torch.clamp(r, 1 - 10.0, 1.2) * A[:, None] * mask / mask.sum()
    elif name == "m2po":  # (1/N) sum_{i,t} M r A_i s_t, M from the batch second moment
        coef = m2po_keep_mask(log_r, mask, 0.04) * r * A[:, None] * mask / mask.sum()
        assert 0 < float(m2po_keep_mask(log_r, mask, 0.04).sum()) <= float(mask.sum())
    elif name == "icepop":  # (1/B) sum_i (1/|o_i|) sum_t r 1{0.5 <= r <= 5} A_i s_t
        inside = (r >= 0.5) & (r <= 5.0)
        coef = inside * r * A[:, None] * mask / mask.sum(-1, keepdim=True) / len(A)
    elif name == "sapo":  # (1/B) sum_i (1/|o_i|) sum_t 4 sigmoid(x) sigmoid(-x) r A_i s_t, x = tau (r - 1)
        tau = torch.where(A[:, None] > 0, torch.ones_like(r), torch.full_like(r, 1.05))
        x = tau * (r - 1)
        gate_slope = 4 * torch.sigmoid(x) * torch.sigmoid(-x) * r
        coef = gate_slope * A[:, None] * mask / mask.sum(-1, keepdim=True) / len(A)
    elif name == "dppo_tv":  # (1/N) sum_{i,t} 1{TV mask} min(r, 1e4) A_i s_t
        diff = torch.exp(logp.detach()) - torch.exp(old)
        valid = torch.where(A[:, None] > 0, diff <= 0.15, diff >= -0.15)
        coef = valid * torch.clamp(r, max=1e4) * A[:, None] * mask / mask.sum()
        assert 0 < int(valid.sum()) < valid.numel() or scale < 0.1
    else:  # opsm: (1/B) sum_i keep_i (1/|o_i|) sum_t r 1{unclipped} A_i s_t
        kl = -(log_r.sum(-1) / mask.sum(-1))
        keep = ~((A < 0) & (kl > 0.5))
        a = A[:, None]
        unclipped = ~(((r > 1.2) & (a > 0)) | ((r < 0.8) & (a < 0)))
        coef = keep[:, None] * unclipped * r * a * mask / mask.sum(-1, keepdim=True) / len(A)
    expected = (coef[..., None] * score).sum((0,))  # (T, V)
    (grad,) = torch.autograd.grad(policy_loss(name, logp, old, mask, A, G, 0.2).loss, theta)
    torch.testing.assert_close(-grad, expected, rtol=1e-10, atol=1e-12)


def test_trajectory_peer_gradients_equal_their_weights():
    # (also covered for every registered scheme by test_estimators.test_surrogate_gradient_equals_closed_form)
    theta, logp, old, mask, A, score, G = _policy(0.8)
    lr = ((logp - old) * mask).sum(-1).detach().reshape(-1, G)
    for name in PEERS_TRAJ:
        assert SCHEMES[name].surrogate == "detached"
        c = weights(name, lr, 0.2, A.reshape(-1, G)).reshape(-1)
        (grad,) = torch.autograd.grad(policy_loss(name, logp, old, mask, A, G, 0.2).loss, theta, retain_graph=True)
        expected = ((c * A)[:, None, None] * score).sum(0) / len(A)
        torch.testing.assert_close(-grad, expected, rtol=1e-10, atol=1e-12)
    assert SCHEMES["tic_mask"].surrogate == "clamp"  # the only shipped one: test_estimators.test_schemes_registered


def test_losses_leave_the_ratio_diagnostics_to_the_caller():
    # the diagnostics are computed once per update from seq_log_ratio (llm_runs.update), never per loss call
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -1.0])
    for name in loss_names():
        out = policy_loss(name, logp, old, m, A, 2, 0.2)
        assert not set(out.metrics) & set(estimators.diagnostics(out.seq_log_ratio, 0.2)), name
        torch.testing.assert_close(out.seq_log_ratio, torch.tensor([[0.4, 0.05]], dtype=torch.float64))
