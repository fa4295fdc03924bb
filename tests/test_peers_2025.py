"""The 2025-2026 corrections of verl, TRL, AReaL and prime-rl (seq_geo_mask, vespo, icepop, sapo,
dppo_tv): hand-computed values, the boundaries of every mask and gate, exact membership, batches
where everything is masked, and log-ratios of +-1e4 in float32 and bfloat16."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from estimators import SCHEMES, weights
from estimators.losses import check_options, policy_loss
from estimators.peers_2025 import vespo_phi_max

E = math.e


def _tokens(log_r, A, old=None, dtype=torch.float64):
    """``(logp, old, mask, A)`` with ``logp - old = log_r`` (old = 0 unless given)."""
    lr = torch.tensor(log_r, dtype=torch.float64)
    old = torch.zeros_like(lr) if old is None else torch.tensor(old, dtype=torch.float64)
    logp = (old + lr).to(dtype).requires_grad_(True)
    return logp, old.to(dtype), torch.ones_like(lr, dtype=dtype), torch.tensor(A, dtype=dtype)


def _below(x):
    return float(np.nextafter(x, -np.inf))


def _above(x):
    return float(np.nextafter(x, np.inf))


# ----------------------------------------------------------------- seq_geo_mask


def test_seq_geo_mask_keeps_the_closed_interval_of_the_geometric_mean():
    # L = 2 tokens: kept iff lo <= exp(l / 2) <= hi, i.e. 2 log lo <= l <= 2 log hi (boundaries kept)
    lo, hi = 0.999, 1.001
    a, b = 2 * math.log(lo), 2 * math.log(hi)
    lr = np.array([[a, b, _below(a), _above(b), 0.0, 2 * math.log(1.0005)]])
    c = weights("seq_geo_mask", lr, 0.2, length=2.0)
    np.testing.assert_array_equal(c, [[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]])
    # the default length 1: the same trajectories judged as one-token sequences
    np.testing.assert_array_equal(weights("seq_geo_mask", lr, 0.2), [[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]])
    # torch, float32 and bfloat16 agree
    np.testing.assert_array_equal(weights("seq_geo_mask", torch.from_numpy(lr), 0.2, length=2.0).numpy(), c)


def test_seq_geo_mask_with_sequence_tis_hand_values():
    # lo = 0.5, hi = 2, L = 1: w = (3, 1.5, 0.5, 0.4) -> kept (no, yes, yes, no); C = 1.2 truncates 1.5
    lr = np.log([[3.0, 1.5, 0.5, 0.4]])
    np.testing.assert_allclose(weights("seq_geo_mask", lr, 0.2, lo=0.5, hi=2.0), [[0, 1, 1, 0]], rtol=0)
    np.testing.assert_allclose(weights("seq_geo_mask", lr, 0.2, lo=0.5, hi=2.0, C=1.2), [[0, 1.2, 0.5, 0]],
                               rtol=1e-15)


def test_seq_geo_mask_membership_is_exact():
    s = SCHEMES["seq_geo_mask"]
    assert s.in_class and s.group_mass_sup(0.2) == 1.0
    # with C > 0 a kept ratio is at most hi^L: sup = min(C, hi^L), attained at w = hi^L
    assert s.group_mass_sup(0.2, C=1.5, hi=1.1, length=2.0) == pytest.approx(1.21, rel=1e-15)
    assert s.group_mass_sup(0.2, C=1.15, hi=1.1, length=2.0) == 1.15
    assert s.member(0.22, C=1.5, hi=1.1, length=2.0) and not s.member(0.2, C=1.5, hi=1.1, length=2.0)
    lr = np.full((1, 3), 2 * math.log(1.1))
    assert weights("seq_geo_mask", lr, 0.2, C=1.5, hi=1.1, length=2.0).mean() == pytest.approx(1.21, rel=1e-14)


# ----------------------------------------------------------------- vespo


def test_vespo_hand_values():
    # phi(w) = w^k e^(lambda (1 - w)): A >= 0 -> (k, lambda) = (2, 3), A < 0 -> (3, 2); phi(1) = 1
    w = np.array([[1.0, 2 / 3, 1.5, 2.0, 1.0]])
    A = np.array([[0.0, 1.0, -1.0, -1.0, -1.0]])
    expected = [[1.0, (4 / 9) * E, 3.375 / E, 8 * E**-2, 1.0]]
    np.testing.assert_allclose(weights("vespo", np.log(w), 0.2, A), expected, rtol=1e-14)
    np.testing.assert_allclose(weights("vespo", torch.from_numpy(np.log(w)), 0.2, torch.from_numpy(A)).numpy(),
                               expected, rtol=1e-14)
    # knobs: k_pos = 1, lambda_pos = 1 -> phi(2) = 2 e^-1
    assert weights("vespo", np.log([[2.0]]), 0.2, np.ones((1, 1)), k_pos=1.0, lambda_pos=1.0)[0, 0] == \
        pytest.approx(2 / E, rel=1e-15)
    with pytest.raises(ValueError, match="needs `advantages`"):
        weights("vespo", np.zeros((1, 2)), 0.2)


def test_vespo_membership_is_exact_and_attained():
    s = SCHEMES["vespo"]
    sup = 3.375 / E  # the negative side peaks at w = k/lambda = 1.5
    assert vespo_phi_max(3.0, 2.0) == pytest.approx(sup, rel=1e-15)
    assert vespo_phi_max(2.0, 3.0) == pytest.approx(4 / 9 * E, rel=1e-15)
    assert vespo_phi_max(2.0, 3.0) < sup
    assert vespo_phi_max(0.0, 0.5) == pytest.approx(math.exp(0.5), rel=1e-15)  # k = 0: the supremum as w -> 0
    assert s.group_mass_sup(0.2) == pytest.approx(sup, rel=1e-15)
    assert not s.in_class and not s.member(0.2) and s.member(0.25)
    # k_neg = lambda_neg = 2: the negative side peaks at w = 1 (phi = 1); the positive side decides
    assert s.group_mass_sup(0.2, k_neg=2.0, lambda_neg=2.0) == pytest.approx(4 / 9 * E, rel=1e-15)
    # attained: every trajectory of a group at w = 1.5 with A < 0
    assert weights("vespo", np.full((1, 4), math.log(1.5)), 0.2, -np.ones((1, 4))).mean() == \
        pytest.approx(sup, rel=1e-14)
    from simulators.peers import grid_max_mass

    assert grid_max_mass("vespo", 0.2)[0] == pytest.approx(sup, rel=1e-12)  # the counterexample search finds it
    assert grid_max_mass("seq_geo_mask", 0.2)[0] == 1.0


def test_vespo_extreme_log_ratios_give_exact_zeros():
    lr = np.array([[1e4, -1e4, 1000.0, -1000.0, 800.0, 0.0]])
    for A in (np.ones_like(lr), -np.ones_like(lr)):
        c = weights("vespo", lr, 0.2, A)
        np.testing.assert_array_equal(c, [[0, 0, 0, 0, 0, 1]])
        for dt in (torch.float32, torch.bfloat16):
            ct = weights("vespo", torch.tensor(lr).to(dt), 0.2, torch.tensor(A).to(dt))
            assert ct.dtype == dt and torch.equal(ct.double(),
                                                  torch.tensor([[0.0, 0, 0, 0, 0, 1]], dtype=torch.float64))
    # a tiny lambda: lambda e^l is formed as exp(l + log lambda) once e^l overflows
    c = weights("vespo", np.array([[750.0]]), 0.2, np.ones((1, 1)), lambda_pos=1e-320, k_pos=0.0)
    assert c[0, 0] == pytest.approx(math.exp(1e-320 - math.exp(750.0 + math.log(1e-320))), rel=1e-12)


# ----------------------------------------------------------------- icepop


def test_icepop_keeps_the_closed_interval_hand_values():
    # one group G = 2, T = 2; row 0 sits on the boundaries r = 0.5, 5 (kept), row 1 just outside (masked)
    a, b = math.log(0.5), math.log(5.0)
    # old log-probs that keep every log-probability <= 0, with logp - old exact: old = -log r where r > 1
    logp, old, m, A = _tokens([[a, b], [_below(a), _above(b)]], [1.0, -1.0], old=[[0.0, -b], [0.0, -_above(b)]])
    out = policy_loss("icepop", logp, old, m, A, 2, 0.2)
    # J = (1/B) sum_i (1/|o_i|) sum_t 1{kept} r_t A_i: row 0 only: (0.5 + 5) / 2 / 2
    assert float(out.loss) == pytest.approx(-(0.5 + 5.0) / 4, rel=1e-15)
    (g,) = torch.autograd.grad(out.loss, logp)
    np.testing.assert_allclose(g.numpy(), [[-0.5 / 4, -5.0 / 4], [0.0, 0.0]], rtol=1e-15)
    assert out.metrics["token_clip_frac"] == 0.5
    # the knobs: [0.4, 6] keeps everything
    out = policy_loss("icepop", logp, old, m, A, 2, 0.2, lo=0.4, hi=6.0)
    assert out.metrics["token_clip_frac"] == 0.0


# ----------------------------------------------------------------- sapo


def _sig(x):
    return 1 / (1 + math.exp(-x))


def test_sapo_hand_values():
    # row 0: A = +1, tau_pos = 1, r = (1, 2); row 1: A = -1, tau_neg = 1.05, r = (1, 0.5)
    logp, old, m, A = _tokens([[0.0, math.log(2.0)], [0.0, math.log(0.5)]], [1.0, -1.0])
    out = policy_loss("sapo", logp, old, m, A, 2, 0.2)
    f = [[2.0, 4 * _sig(1.0)], [2 / 1.05, (4 / 1.05) * _sig(1.05 * -0.5)]]  # (4/tau) sigmoid(tau (r - 1))
    value = (f[0][0] + f[0][1]) / 2 - (f[1][0] + f[1][1]) / 2
    assert float(out.loss) == pytest.approx(-value / 2, rel=1e-14)
    (g,) = torch.autograd.grad(out.loss, logp)
    # d f / d log r = 4 sigmoid(x) sigmoid(-x) r: 1 at r = 1 for either tau
    slope = [[1.0, 4 * _sig(1.0) * _sig(-1.0) * 2], [1.0, 4 * _sig(-0.525) * _sig(0.525) * 0.5]]
    expected = -np.array(slope) * np.array([[1.0], [-1.0]]) / (2 * 2)
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-14)
    # A = 0 takes tau_neg (A > 0 picks tau_pos): no effect on the loss, whose term is f * 0
    logp0, old0, m0, A0 = _tokens([[0.3, 0.3], [0.0, 0.0]], [0.0, 0.0])
    assert float(policy_loss("sapo", logp0, old0, m0, A0, 2, 0.2).loss) == 0.0


# ----------------------------------------------------------------- dppo_tv


def test_dppo_tv_mask_boundaries_and_truncation():
    # probabilities chosen so that exp(log p) is p exactly
    for p in (0.5, 0.25, 0.75, 0.0625):
        assert math.exp(math.log(p)) == p
    mu_hi, mu_lo = 0.25 - 1e-15, _above(0.5)  # pi - mu just above delta = 0.25 (A > 0), just below -delta (A < 0)
    assert math.exp(math.log(0.5)) - math.exp(math.log(mu_hi)) > 0.25
    assert math.exp(math.log(0.25)) - math.exp(math.log(mu_lo)) < -0.25
    rows = [  # (log pi, log mu) per token; A = (+1, +1, -1, -1)
        [(math.log(0.5), math.log(0.25)), (math.log(0.5), math.log(mu_hi))],  # A > 0: kept (diff = delta), dropped
        [(math.log(0.0625), math.log(0.5)), (math.log(0.75), math.log(0.5))],  # A > 0: kept (diff < 0), kept
        [(math.log(0.25), math.log(0.5)), (math.log(0.25), math.log(mu_lo))],  # A < 0: kept (diff = -delta), dropped
        [(math.log(0.75), math.log(0.25)), (math.log(0.5), math.log(0.0625))],  # A < 0: kept (diff > 0), kept
    ]
    lp = [[t[0] for t in r] for r in rows]
    lo = [[t[1] for t in r] for r in rows]
    log_r = (np.array(lp) - np.array(lo)).tolist()
    A = [1.0, 1.0, -1.0, -1.0]
    logp, old, m, At = _tokens(log_r, A, old=lo)
    out = policy_loss("dppo_tv", logp, old, m, At, 4, 0.2, delta=0.25)
    valid = np.array([[1, 0], [1, 1], [1, 0], [1, 1]], dtype=float)
    r = np.exp(np.array(log_r))
    (g,) = torch.autograd.grad(out.loss, logp)
    # J = (1/N) sum 1{valid} sg(min(r, C)) A log pi: -dJ/dlogp = valid min(r, C) A / N (N = 8 tokens)
    np.testing.assert_allclose(-g.numpy(), valid * r * np.array(A)[:, None] / 8, rtol=1e-14)
    assert float(out.loss) == pytest.approx(-(valid * r * np.array(A)[:, None] * np.array(lp)).sum() / 8, rel=1e-14)
    assert out.metrics["token_clip_frac"] == 0.25
    # C truncates the detached ratio: r = 8 (0.5 / 0.0625) and 3 become 2.5
    (g,) = torch.autograd.grad(policy_loss("dppo_tv", logp, old, m, At, 4, 0.2, delta=0.25, C=2.5).loss, logp)
    np.testing.assert_allclose(-g.numpy(), valid * np.minimum(r, 2.5) * np.array(A)[:, None] / 8, rtol=1e-14)


# ----------------------------------------------------------------- everything masked; padding never leaks


@pytest.mark.parametrize("name, opts, log_r", [
    ("icepop", {}, [[3.0, -3.0], [2.0, 5.0]]),  # every ratio outside [0.5, 5]
    ("dppo_tv", {"delta": 1e-3}, None),  # every probability moved by more than delta, the way A pushes
    ("seq_geo_mask", {}, [[0.5, 0.5], [-0.5, -0.5]]),  # every geometric mean outside [0.999, 1.001]
    ("vespo", {}, [[1e4, 0.0], [-1e4, 0.0]]),  # trajectory ratios e^(+-1e4): phi = 0
])
def test_all_masked_batch_gives_zero_loss_and_gradient(name, opts, log_r):
    if name == "dppo_tv":  # A > 0 rows gained probability, A < 0 rows lost it
        old = [[math.log(0.2), math.log(0.2)], [math.log(0.6), math.log(0.6)]]
        log_r = [[math.log(0.5 / 0.2)] * 2, [math.log(0.3 / 0.6)] * 2]
    else:  # log-probabilities <= 0: old = -log r where r > 1
        old = [[-max(x, 0.0) for x in row] for row in log_r]
    logp, old_t, m, A = _tokens(log_r, [1.0, -1.0], old=old)
    out = policy_loss(name, logp, old_t, m, A, 2, 0.2, **opts)
    (g,) = torch.autograd.grad(out.loss, logp)
    assert float(out.loss) == 0.0 and torch.equal(g, torch.zeros_like(g))
    if name in ("icepop", "dppo_tv"):
        assert out.metrics["token_clip_frac"] == 1.0


@pytest.mark.parametrize("name", ["icepop", "sapo", "dppo_tv"])
def test_padding_holding_inf_or_nan_never_reaches_the_loss(name):
    lr = [[0.1, -0.2, 0.0], [0.05, 0.3, 0.0]]
    logp, old, m, A = _tokens(lr, [1.0, -1.0], old=[[-0.5, -0.7, 0.0], [-0.4, -0.9, 0.0]])
    m = m.clone()
    m[:, 2] = 0
    ref = policy_loss(name, logp, old, m, A, 2, 0.2)
    (g_ref,) = torch.autograd.grad(ref.loss, logp)
    for pad_new, pad_old in ((-math.inf, -math.inf), (math.nan, math.nan), (0.0, -math.inf)):
        lp = logp.detach().clone()
        ol = old.clone()
        lp[:, 2], ol[:, 2] = pad_new, pad_old
        lp.requires_grad_(True)
        out = policy_loss(name, lp, ol, m, A, 2, 0.2)
        (g,) = torch.autograd.grad(out.loss, lp)
        assert float(out.loss) == float(ref.loss), (name, pad_new)
        assert torch.equal(g, g_ref), (name, pad_new)


# ----------------------------------------------------------------- +-1e4 in float32 and bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["icepop", "sapo", "dppo_tv", "seq_geo_mask", "vespo"])
def test_huge_log_ratios_give_finite_loss_and_gradient(name, dtype):
    # log-probabilities <= 0 (a policy's), token log-ratios of +1e4 and -1e4, both advantage signs
    logp, old, m, A = _tokens([[0.0, -1e4], [-1e4, 0.0], [0.0, -0.5], [-1e4, -1e4]],
                              [1.0, -1.0, 1.0, -1.0], old=[[-1e4, 0.0], [0.0, -1e4], [-0.5, 0.0], [0.0, 0.0]],
                              dtype=dtype)
    out = policy_loss(name, logp, old, m, A, 2, 0.2)
    (g,) = torch.autograd.grad(out.loss, logp)
    assert torch.isfinite(out.loss) and bool(torch.isfinite(g).all()), (name, dtype, out.loss, g)
    assert g.dtype == dtype


# ----------------------------------------------------------------- bad knobs


@pytest.mark.parametrize("call, match", [
    (lambda: check_options("icepop", {"lo": 6.0}), "needs lo <= hi"),
    (lambda: check_options("icepop", {"lo": 0.0}), r"lo \(alpha\) must be a finite number in \(0"),
    (lambda: check_options("seq_geo_mask", {"lo": 1.01}), "needs lo <= hi"),
    (lambda: check_options("seq_geo_mask", {"C": -1.0}), r"C \(C_geo\) must be a finite number in \[0"),
    (lambda: check_options("seq_geo_mask", {"length": 0.0}), r"length \(L\) must be"),
    (lambda: check_options("sapo", {"tau_neg": 0.0}), r"tau_neg \(tau_neg\) must be"),
    (lambda: check_options("vespo", {"lambda_pos": 0.0}), r"lambda_pos .* must be"),
    (lambda: check_options("vespo", {"k_neg": -1.0}), r"k_neg .* in \[0"),
    (lambda: check_options("dppo_tv", {"C": 0.0}), r"C \(C_DPPO\) must be"),
    (lambda: check_options("dppo_tv", {"eps_high": 0.2}), r"'dppo_tv' takes no option\(s\) \['eps_high'\]"),
])
def test_bad_knobs_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------- the report's sentence on the newcomers


def test_report_sentence_places_each_newcomer_against_gmc():
    import pandas as pd

    from studies.report.build import newcomers_sentence

    rows = [("gmc", "trajectory", 0.2, 0.1, True, 1.2), ("vespo", "trajectory", 0.3, 0.05, False, 1.24),
            ("seq_geo_mask", "trajectory", 0.4, 0.0, True, 1.0), ("sapo", "token", 0.3, 0.2, None, float("nan")),
            ("icepop", "token", 0.1, 0.05, None, float("nan"))]
    df = pd.DataFrame([{"env": "bandit", "Delta": D, "batch_groups": 1, "scheme": n, "key": n, "level": lv,
                        "bias_norm": b, "second_moment": m, "in_class": c, "sup_mass": s}
                       for D in (1.0, 4.0) for n, lv, b, m, c, s in rows])
    text = newcomers_sentence(df)
    assert text.startswith("The 2025-2026 corrections against GMC") and "E1 at Delta = 4" in text
    assert "vespo (outside C_eps, largest group mass 1.24) trades a lower second moment for a higher bias" in text
    assert "seq_geo_mask (in C_eps, largest group mass 1) never moves" in text
    assert "sapo (token-level) is dominated by GMC" in text and "icepop (token-level) dominates GMC" in text
    assert newcomers_sentence(df[~df["scheme"].isin(["vespo", "seq_geo_mask", "sapo", "icepop"])]) == ""
