"""THEORY §8 (normalising optimisers): the bounds of bounds.normalised, the exact sign laws of
simulators.normalised, and claims 20-22 (including a planted failure of claim 20)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from bounds import normalised as nb
from bounds.numeric import twin
from simulators import normalised as sn
from simulators.optim import Optimizer, OptimizerConfig

# ------------------------------------------------------------------------ bounds


def test_adam_step_factor_is_a_bound_attained_by_growing_gradients():
    """|Adam step| <= lr kappa_t for any gradients; equality for |g_s| ~ (beta1/beta2)^(t-s)."""
    b1, b2, lr = 0.9, 0.999, 0.1
    kap = twin("adam_step_factor")
    rng = np.random.default_rng(0)
    cfg = OptimizerConfig("adam", lr=lr, adam_eps=1e-300)
    theta = np.zeros((200, 3))
    opt = Optimizer(cfg, theta)
    for t in range(1, 41):  # random heavy-tailed gradients: never above the bound
        g = rng.standard_cauchy((200, 3))
        new = opt.step(theta, g)
        assert np.abs(new - theta).max() <= lr * float(kap(t=t, beta1=b1, beta2=b2)) * (1 + 1e-12)
        theta = new
    T = 30  # the extremal sequence
    opt = Optimizer(cfg, np.zeros((1, 1)))
    theta = np.zeros((1, 1))
    for s in range(1, T + 1):
        new = opt.step(theta, np.full((1, 1), (b1 / b2) ** (T - s)))
        step = float(np.abs(new - theta).max())
        theta = new
    assert step == pytest.approx(lr * float(kap(t=T, beta1=b1, beta2=b2)), rel=1e-12)
    # kappa_1 = 1 (Adam's first step is signSGD's), increasing to the limit
    ks = kap(t=np.arange(1, 20001), beta1=b1, beta2=b2)
    assert ks[0] == 1.0 and np.all(np.diff(ks) > 0)
    assert ks[-1] < float(nb.adam_step_factor_limit(b1, b2)) < ks[-1] * (1 + 1e-6)
    with pytest.raises(ValueError, match="beta1\\^2 < beta2"):
        kap(t=3, beta1=0.9, beta2=0.5)


def test_momentum_variance_factor_by_enumeration():
    """Var(m_hat_t) = r_t Var(g) for iid g: the exact weights of Adam's bias-corrected momentum."""
    for b1 in (0.0, 0.5, 0.9):
        for t in (1, 2, 7):
            w = (1 - b1) * b1 ** np.arange(t)[::-1] / (1 - b1**t) if b1 > 0 else np.eye(1, t, t - 1)[0]
            assert w.sum() == pytest.approx(1.0)
            assert (w**2).sum() == pytest.approx(float(nb.adam_momentum_var_factor(t, b1)), rel=1e-12)


def test_cantelli_is_attained_by_its_two_point_law_and_refuses_infeasible_moments():
    mu, var = 0.3, 0.5  # the extremal law: 0 w.p. p = var/(var+mu^2), else mu + var/mu
    p = var / (var + mu**2)
    lo, hi = 0.0, mu + var / mu
    assert p * lo + (1 - p) * hi == pytest.approx(mu)
    assert p * lo**2 + (1 - p) * hi**2 - mu**2 == pytest.approx(var)
    f = twin("cantelli_sign_error")
    assert float(f(m2=var + mu**2, mu=mu)) == pytest.approx(p)
    assert float(f(m2=1.0, mu=-0.2)) == 1.0
    with pytest.raises(ValueError, match="infeasible moments"):
        f(m2=0.01, mu=0.2)
    with pytest.raises(ValueError, match="infeasible moments"):
        nb.cantelli_sign_error(sp.Rational(1, 100), sp.Rational(1, 5))
    with pytest.raises(ValueError, match="infeasible moments"):
        twin("adam_sign_error")(m2=0.01, mu=0.2, t=3, beta1=0.9, beta2=0.999)
    with pytest.raises(ValueError, match="infeasible moments"):
        twin("sign_error_mass")(mu=2.0, M=1.0, m2=1.0)
    with pytest.raises(ValueError, match="infeasible moments"):
        twin("sign_error_iid")(c2=1.0, mu=2.0, M=1.0, G=4)


def test_adam_sign_error_monte_carlo():
    """Cantelli on Adam's momentum for iid gradients, against a Monte Carlo estimate with its s.e."""
    rng = np.random.default_rng(1)
    t, b1 = 5, 0.9
    n = 400_000
    g = rng.choice([-1.0, 2.0], p=[0.55, 0.45], size=(n, t))  # mean 0.35, E g^2 = 2.35
    w = (1 - b1) * b1 ** np.arange(t)[::-1]
    wrong = float(((g @ w) <= 0).mean())
    se = math.sqrt(wrong * (1 - wrong) / n)
    bound = float(twin("adam_sign_error")(m2=2.35, mu=0.35, t=t, beta1=b1, beta2=0.999))
    assert wrong <= bound + 4 * se
    assert float(twin("cantelli_sign_error")(m2=2.35, mu=0.35)) > bound  # momentum averages the noise


@pytest.mark.parametrize("scheme", ["is", "stale", "tic_mask", "tic_trunc", "gmc", "snis", "topr", "vespo",
                                    "seq_mis", "gmc_cap", "gmc_topr", "topr_gmc"])
def test_weight_max_is_the_supremum_of_the_scheme_s_weights(scheme):
    """c_max of §8.3 against the estimators: never exceeded on random ratios, approached at extremes."""
    import estimators

    G, eps = 6, 0.2
    cmax = nb.weight_max(scheme, G, eps)
    rng = np.random.default_rng(2)
    lr = rng.normal(0, 3, (20_000, G))
    adv = rng.choice([-1.0, 0.5, 1.0], size=lr.shape)
    adv -= adv.mean(-1, keepdims=True)  # leave-one-out advantages sum to 0
    kw = {"advantages": adv} if estimators.get_scheme(scheme).needs_advantages else {}
    c = estimators.weights(scheme, lr, eps, **kw)
    assert np.all(c <= cmax * (1 + 1e-12))
    if math.isfinite(cmax):  # attained or approached: the largest weight seen is close to it
        assert c.max() >= 0.9 * cmax, (c.max(), cmax)
    else:
        assert c.max() > 1e3


def test_batch_form_by_hand_and_at_one_group():
    """B independent groups divide the group's variance by B: checked on a two-point group law."""
    f1, fB = twin("sign_error_mass"), twin("sign_error_mass_batch")
    assert float(fB(mu=0.3, M=1.0, m2=0.5, prompts_per_step=1)) == pytest.approx(float(f1(mu=0.3, M=1.0, m2=0.5)))
    # a group estimate in {-1, 1} with mean 0.3: Var 0.91; mean of B = 4 groups: Var 0.91/4
    var, mu_ = 1 - 0.09, 0.3
    assert float(fB(mu=mu_, M=1.0, m2=1.0, prompts_per_step=4)) == pytest.approx((var / 4) / (var / 4 + mu_**2))
    assert float(nb.sign_error_bound("tic_trunc", 0.9, 1.0, 2.0, 4, 0.2, "iid", prompts_per_step=2)) == pytest.approx(
        float(nb.sign_error_bound("tic_trunc", 0.9, 1.0, 2.0, 8, 0.2, "iid")))
    with pytest.raises(ValueError, match="infeasible moments"):
        fB(mu=2.0, M=1.0, m2=1.0, prompts_per_step=2)


def test_table_rows_take_their_records_knobs_and_defaults():
    """Each c_max row takes exactly its scheme's knobs, with no default of its own: weight_max fills them from
    the scheme's record and refuses an unknown knob or a bad value."""
    import inspect

    from estimators.params import defaults, params_of

    for scheme, row in nb.SIGN_TABLE.items():
        sig = list(inspect.signature(row["c_max"]).parameters.values())[3:]
        assert [p.name for p in sig] == [p.name for p in params_of(scheme)], scheme
        assert all(p.default is inspect.Parameter.empty for p in sig), scheme
        assert nb.weight_max(scheme, 6, 0.2, 3) == row["c_max"](6.0, 0.2, 3, **defaults(scheme)), scheme
    assert nb.weight_max("seq_mis", 6, 0.2) == 2.0 and nb.weight_max("seq_mis", 6, 0.2, hi=3.0) == 3.0
    assert nb.weight_max("gmc_cap", 6, 0.2) == pytest.approx(1.2) and nb.weight_max("seq_tis_bn", 6, 0.2, 3) == 18
    assert nb.weight_max("vespo", 6, 0.2) == pytest.approx(max(nb.phi_peak(2, 3), nb.phi_peak(3, 2)), rel=1e-15)
    with pytest.raises(ValueError, match=r"'gmc' takes no option\(s\) \['kappa'\]"):
        nb.weight_max("gmc", 6, 0.2, kappa=2.0)
    with pytest.raises(ValueError, match=r"kappa .* got -1.0"):
        nb.weight_max("gmc_cap", 6, 0.2, kappa=-1.0)


def test_share_and_step_form_and_vcpo():
    assert nb.trajectory_share_bound("gmc", 8, 0.2, 4) == pytest.approx(1.2 / 4)
    assert nb.trajectory_share_bound("topr", 8, 0.2, 4) == pytest.approx(1 / 32)
    assert math.isinf(nb.trajectory_share_bound("is", 8, 0.2, 2))
    lr = np.log([[3.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])  # lambda = (0.8, 1)
    assert nb.step_form_scale(lr, 0.2) == pytest.approx(0.9)
    w = np.exp(lr).ravel()
    assert nb.vcpo_scale(lr) == pytest.approx(math.sqrt(w.sum() ** 2 / (8 * (w**2).sum())))
    # 1 - s_t <= m_GMC / (1 + eps) pointwise: (1 - lambda) <= (Wbar - 1 - eps)_+ / (1 + eps)
    rng = np.random.default_rng(3)
    lr = rng.normal(-0.5, 1.0, (5000, 8))
    lam = np.exp(lr).mean(-1)
    s = np.array([nb.step_form_scale(r[None], 0.2) for r in lr[:500]])
    assert np.all(1 - s <= np.maximum(lam[:500] - 1.2, 0) / 1.2 + 1e-12)


def test_sign_error_bound_table():
    # IS, mass form: 1 - g^2 / (M^2 (1 + s2/G))
    assert float(nb.sign_error_bound("is", 0.5, 1.0, 2.0, 4, 0.2)) == pytest.approx(1 - 0.25 / 1.5)
    # GMC: mean lower bound |g| - M m_GMC(Scarf), second moment min(1+eps, 1+s2/G)
    m = (math.sqrt(2.0 / 4 + 0.04) - 0.2) / 2
    assert float(nb.sign_error_bound("gmc", 0.5, 1.0, 2.0, 4, 0.2)) == pytest.approx(1 - (0.5 - m) ** 2 / 1.2)
    # trunc, iid form
    mt = (math.sqrt(2.0 + 0.04) - 0.2) / 2
    a = 1.2
    assert float(nb.sign_error_bound("tic_trunc", 0.9, 1.0, 2.0, 4, 0.2, "iid")) == pytest.approx(
        (a - (0.9 - mt) ** 2) / (a + 3 * (0.9 - mt) ** 2))
    assert math.isnan(float(nb.sign_error_bound("vespo", 0.5, 1.0, 2.0, 4, 0.2)))
    with pytest.raises(ValueError, match="no §8"):
        nb.sign_error_bound("tic_ppo", 0.5, 1.0, 2.0, 4, 0.2)


# ------------------------------------------------------------------------ exact sign laws


def test_type_reduction_equals_full_enumeration():
    """The long-horizon E2's 2H types give position 0's exact law, as the V^H outcomes do."""
    from simulators.token_mdp.factorised import FactorisedTokenMDP, start_logits

    H, delta, G = 5, 0.7, 3
    ty = sn.long_e2_types(H, 0.8, delta)
    env = FactorisedTokenMDP(2, H)
    tb = start_logits(2, H, 0.8)
    th = tb.copy()
    th[:, 1] += delta
    lr, lpb, rew, S = (a[0] for a in env.arrays(th, tb))
    grad = np.asarray(env.grad_J(th)).ravel()
    schemes = ["is", "gmc", "topr", "tic_mask"]
    full = sn.coordinate_sign_law(lr, lpb, rew, S, grad, G, 0.2, schemes)
    red = sn.coordinate_sign_law(ty["log_ratio"], ty["log_p_b"], ty["rewards"], ty["scores"], ty["grad"], G, 0.2,
                                 schemes)
    np.testing.assert_allclose(ty["grad"], grad[:2], rtol=1e-12)
    assert ty["J"] == pytest.approx(float(env.J(th)), rel=1e-12)
    s2, _ = env.ratio_moments_batch(th[None], tb[None])
    assert ty["sigma2"] == pytest.approx(float(s2[0]), rel=1e-10)
    for s in schemes:
        for k in ("mean", "m2", "p_le0", "p_zero", "p_wrong"):
            np.testing.assert_allclose(red[s][k], full[s][k][:2], rtol=1e-9, atol=1e-13)


def test_sign_law_matches_monte_carlo():
    """Exact P(sign wrong or 0) and E g against 4 standard errors of a Monte Carlo over groups."""
    from simulators.bandit.sweeps import instance

    env, th, tb, _ = instance("rare_arm")
    lr, lpb, rew, S = (a[0] for a in env.arrays(th, tb))
    grad = np.asarray(env.grad_J(th)).ravel()
    G = 6
    law = sn.coordinate_sign_law(lr, lpb, rew, S, grad, G, 0.2, ["gmc"])["gmc"]
    rng = np.random.default_rng(4)
    n = 100_000
    idx = rng.choice(len(lr), p=np.exp(lpb), size=(n, G))
    from simulators.core import group_terms

    terms = group_terms(idx[None], lr[None], rew[None], 0.2, ["gmc"], with_gap=False)
    g = (terms.coef("gmc")[0] @ S) / G
    le0 = (np.sign(grad) * g <= 1e-15).mean(0)
    se = np.sqrt(le0 * (1 - le0) / n) + 1e-9
    assert np.all(np.abs(le0 - law["p_le0"]) <= 4 * se)
    se_m = g.std(0) / math.sqrt(n) + 1e-12
    assert np.all(np.abs(g.mean(0) - law["mean"]) <= 4 * se_m)


# ------------------------------------------------------------------------ claims


def test_claim_20_passes_and_fails_on_a_planted_case(monkeypatch):
    from claims import normalised as cn

    row = cn.check_20(False)
    assert row.status == "PASS", row.evidence
    assert "Adam, GMC's lambda_t (B=1): max|dtheta| = 0 " not in row.evidence
    # planted: declare a non-scale-invariant case (SGD under a common scale) invariant
    planted = [c if c[0] != "SGD, common scale 2" else (*c[:4], True) for c in cn.INVARIANCE_CASES]
    monkeypatch.setattr(cn, "INVARIANCE_CASES", planted)
    bad = cn.check_20(False)
    assert bad.status == "FAIL" and "SGD, common scale 2" in bad.measured
    # planted: an invariant case whose transform is not a common scale (per-group scales, Adam)
    planted = [("Adam, per-group scales (1, 3)", cn.ADAM0, 2,
                lambda t, g, lam: (g * np.array([1.0, 3.0])[:, None, None]).mean(0), True)]
    monkeypatch.setattr(cn, "INVARIANCE_CASES", planted)
    assert cn.check_20(False).status == "FAIL"


def test_claims_21_22_quick():
    from claims import normalised as cn

    r21 = cn.check_21(True)
    assert r21.status == "PASS", r21.evidence
    r22 = cn.check_22(True)
    assert "max |P_GMC - P_IS| = 0 " in r22.measured  # the theorem part, exactly


def test_claim_21_fails_on_a_planted_violation(monkeypatch):
    """Cantelli's check is not vacuous: a probability pushed above the bound is caught."""
    from claims import normalised as cn

    real = cn.laws(True)
    p, law = real[0]
    forged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in law.items()}
    forged["topr"]["p_le0"] = np.ones_like(law["topr"]["p_le0"])
    monkeypatch.setattr(cn, "laws", lambda quick=False: [(p, forged)])
    r = cn.check_21(True)
    assert r.status == "FAIL" and "Cantelli topr" in r.evidence
