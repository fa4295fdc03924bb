"""Trust Region Masking's bounds (bounds.trust_region), the exact error and divergences on E2
(simulators.token_mdp.trust_region) and claim 25 (claims.trm_bounds)."""
import math

import numpy as np
import pytest
from scipy.special import softmax

from bounds import trust_region as tr
from claims import trm_bounds as c25
from simulators.delay import static_behaviour
from simulators.delay_sweeps import make_instance
from simulators.peers import CASES
from simulators.token_mdp import TokenTreeMDP, reward_vector
from simulators.token_mdp.trust_region import node_divergences, trust_region_terms

# --------------------------------------------------------------------- the formulas, by hand at T = 2


def test_bounds_by_hand_at_two_tokens():
    """T = 2, delta = 0.18 (sqrt(delta/2) = 0.3), eps = 0.1, D_KL^seq = 0.5, D_TV^seq = 0.2, Dbar = (0.05, 0.08):
    the sums over t = 1, 2 have the terms t - 1 = 0 and 1 only."""
    T, d, e = 2, 0.18, 0.1
    assert tr.classical(T, e) == pytest.approx(2 * 2 * 1 * e**2)  # 0.04
    assert tr.classical_kl(T, d) == pytest.approx(2 * d)  # 0.36
    assert tr.pinsker_marginal_kl(T, d) == pytest.approx(4 * 0.3 * (0 + 0.3))  # 0.36
    assert tr.pinsker_marginal_tv(T, d, e) == pytest.approx(4 * 0.1 * (0 + 0.3))  # 0.12
    assert tr.pinsker_marginal_small(T, d) == pytest.approx(4 / 3 * 2**1.5 * d)
    assert tr.mixed_kl(T, d, 0.5) == pytest.approx(4 * 2 * 0.3 * 0.5)  # sqrt(0.5/2) = 0.5: 1.2
    assert tr.mixed_kl_small(T, d, 0.5) == pytest.approx(2 * 2 * math.sqrt(0.09))  # uncapped: equals mixed_kl
    assert tr.mixed_tv(T, e, 0.2) == pytest.approx(4 * 2 * 0.1 * 0.2)  # 0.16
    assert tr.coupling(T, e) == pytest.approx(4 * 0.1 * (0 + 0.1))  # 0.04
    # Adaptive: T - t = 1, 0; weights min(1, eps, 0.3) = 0.1 and 0
    assert tr.adaptive([0.05, 0.08], d, e) == pytest.approx(4 * 0.05 * 0.1)
    assert tr.adaptive([0.05, 0.08], d, e, route="kl") == pytest.approx(4 * 0.05 * 0.3)
    assert tr.adaptive([0.05, 0.08], d, e, route="tv") == pytest.approx(4 * 0.05 * 0.1)
    b = tr.trm_bounds(T, d, e, 0.5, 0.2, [0.05, 0.08])
    assert tuple(b) == tr.BOUNDS
    assert b["unified"] == pytest.approx(0.02) == min(b[k] for k in tr.UNIFIED)


def test_caps_bind_at_large_divergence():
    """delta = 8: sqrt(delta/2) = 2 is capped at 1 in both factors; eps = 1 caps the coupling terms."""
    assert tr.pinsker_marginal_kl(2, 8.0) == pytest.approx(4 * 1 * (0 + 1))
    assert tr.pinsker_marginal_small(2, 8.0) > tr.pinsker_marginal_kl(2, 8.0)  # the O(T^{3/2}) form never below
    assert tr.mixed_kl(3, 8.0, 18.0) == pytest.approx(4 * 3 * 1 * 1)
    assert tr.coupling(4, 1.0) == pytest.approx(4 * (0 + 1 + 1 + 1))


def test_the_papers_table_values():
    """The paper's table at T = 4096 (delta = 1e-4, eps = 5e-3 or Pinsker's 7.07e-3, D_KL^seq = 0.01,
    D_TV^seq = 0.05): 1677, 839, 113.8, 79.9, 35.0, 24.7, 8.2, 4.1."""
    T, d, e, ek = 4096, 1e-4, 5e-3, math.sqrt(1e-4 / 2)
    got = [tr.classical_kl(T, d), tr.classical(T, e), tr.coupling(T, ek), tr.coupling(T, e),
           tr.pinsker_marginal_kl(T, d), tr.pinsker_marginal_tv(T, d, e), tr.mixed_kl(T, d, 0.01),
           tr.mixed_tv(T, e, 0.05)]
    assert [round(x, 1) for x in got] == [1677.3, 838.7, 113.8, 79.9, 34.9, 24.7, 8.2, 4.1]


@pytest.mark.parametrize("call, match", [
    (lambda: tr.classical(0, 0.1), "T \\(the response length\\)"),
    (lambda: tr.classical(2.0, 0.1), "T \\(the response length\\)"),
    (lambda: tr.classical_kl(3, -1e-3), "delta"),
    (lambda: tr.coupling(3, 1.5), "eps"),
    (lambda: tr.mixed_kl(3, 0.1, float("nan")), "kl_seq"),
    (lambda: tr.mixed_tv(3, 0.1, 2.0), "tv_seq"),
    (lambda: tr.adaptive([0.1, 1.2], 0.1, 0.1), "dbar"),
    (lambda: tr.adaptive([0.1], 0.1, 0.1, route="both"), "route"),
    (lambda: tr.trm_bounds(3, 0.1, 0.1, 0.1, 0.1, [0.1, 0.1]), "one value per position"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------- the exact terms on E2


def _two_token_env():
    """V = 2, H = 2, position logits, reward 1{o = (1, 1)}: four responses, written out below."""
    return TokenTreeMDP(2, 2, "position", reward_vector("target", 2, 2, target=[1, 1]))


def test_exact_terms_by_hand_on_a_two_token_tree():
    env = _two_token_env()
    q = np.array([[0.6, 0.4], [0.3, 0.7]])  # pi_theta per position
    b = np.array([[0.5, 0.5], [0.4, 0.6]])  # pi_roll
    t = trust_region_terms(env, np.log(q), np.log(b))
    J, J_roll = 0.4 * 0.7, 0.5 * 0.6
    # L = E_roll[R (rho_1 - 1 + rho_2 - 1)]: only (1, 1) is rewarded
    L = 0.5 * 0.6 * ((0.4 / 0.5 - 1) + (0.7 / 0.6 - 1))
    kl = [0.5 * math.log(0.5 / 0.6) + 0.5 * math.log(0.5 / 0.4), 0.4 * math.log(0.4 / 0.3) + 0.6 * math.log(0.6 / 0.7)]
    tv = [0.1, 0.1]
    pq = np.outer(q[0], q[1]).ravel()  # responses (0,0), (0,1), (1,0), (1,1)
    pb = np.outer(b[0], b[1]).ravel()
    assert t["T"] == 2
    assert (t["J"], t["J_roll"], t["L"]) == pytest.approx((J, J_roll, L), abs=1e-15)
    assert t["error"] == pytest.approx(J - J_roll - L, abs=1e-15)
    assert t["delta"] == pytest.approx(max(kl), abs=1e-15) and t["eps"] == pytest.approx(max(tv), abs=1e-15)
    assert t["kl_seq"] == pytest.approx(sum(kl), abs=1e-15)  # chain rule: positions are independent here
    assert t["kl_seq"] == pytest.approx(float(pb @ np.log(pb / pq)), abs=1e-15)
    assert t["tv_seq"] == pytest.approx(0.5 * np.abs(pq - pb).sum(), abs=1e-15)
    assert t["dbar"] == pytest.approx(tv, abs=1e-15)
    # the performance-difference identity the bounds start from: Error = sum_t E_{d_t^theta} g_t - E_{d_t^roll} g_t,
    # g_t(c) = sum_y (pi_theta - pi_roll)(y|c) Q_t(c, y), Q_t = E_roll[R | c, y]: Q_1(y) = 1{y = 1} 0.6,
    # Q_2(c, y) = 1{c = y = 1}; d_1 is the prompt under both policies, so position 1's term is 0
    g1 = (q[0, 1] - b[0, 1]) * 0.6
    g2 = np.array([0.0, q[1, 1] - b[1, 1]])  # by the first token
    assert t["error"] == pytest.approx((g1 - g1) + (q[0] @ g2 - b[0] @ g2), abs=1e-15)


def _draw(rng, theta, n):
    """``n`` responses drawn token by token from ``softmax(theta[h])`` (position logits), ``(n, H)``."""
    p = softmax(theta, axis=-1)
    return np.stack([rng.choice(theta.shape[1], size=n, p=p[h]) for h in range(theta.shape[0])], 1)


@pytest.mark.parametrize("Delta", [1.0, 4.0])
def test_exact_error_equals_brute_force_monte_carlo(Delta):
    """E2 threshold: J(theta) from draws of pi_theta, J(pi_roll) + L from draws of pi_roll (one per-response
    value, ``R (1 + sum_t (rho_t - 1))``), the ratios from the drawn tokens' probabilities; within 4
    standard errors of the exact error, and those errors small enough to tell it from 0."""
    env, theta, _, u = make_instance(CASES["E2"]["env"], CASES["E2"]["instance"])
    tb = static_behaviour(theta, Delta, u)
    exact = trust_region_terms(env, theta, tb)["error"]
    rng, n = np.random.default_rng(25), 400_000
    index = lambda o: o @ (2 ** np.arange(env.H - 1, -1, -1))  # lexicographic outcome index (V = 2)
    r_q = env.rewards[index(_draw(rng, theta, n))]
    ob = _draw(rng, tb, n)
    pos = np.arange(env.H)
    rho = softmax(theta, -1)[pos, ob] / softmax(tb, -1)[pos, ob]
    v_b = env.rewards[index(ob)] * (1 + (rho - 1).sum(-1))
    est = r_q.mean() - v_b.mean()
    se = math.sqrt(r_q.var(ddof=1) / n + v_b.var(ddof=1) / n)
    assert abs(est - exact) < 4 * se, (est, exact, se)
    assert 4 * se < abs(exact) / 2  # the test can tell the error from 0


def test_tabular_trees_obey_every_bound():
    """Tabular E2 (one logit row per prefix, so the maximum over contexts is not one per position),
    random policy pairs with fixed seeds: every bound is at least the exact |Error|, and the chain rule
    ``D_KL^seq = sum_t E_{d_t^roll} KL(c_t)`` holds."""
    rng = np.random.default_rng(2512)
    for V, H in ((2, 3), (3, 3), (2, 5)):
        env = TokenTreeMDP(V, H, "tabular", reward_vector("parity", V, H))
        for scale in (0.1, 0.5, 2.0):
            th = rng.normal(0, 1, env.theta_shape)
            tb = th + rng.normal(0, scale, env.theta_shape)
            t = trust_region_terms(env, th, tb)
            kl, _ = node_divergences(env, th, tb)
            pb = np.exp(env.token_log_probs(tb).sum(-1))
            assert t["kl_seq"] == pytest.approx(float((pb[:, None] * kl[env.nodes]).sum()), rel=1e-12)
            b = tr.trm_bounds(t["T"], t["delta"], t["eps"], t["kl_seq"], t["tv_seq"], t["dbar"])
            assert all(b[k] >= abs(t["error"]) for k in tr.BOUNDS), (V, H, scale, t["error"], b)


def test_on_policy_error_and_bounds_are_zero():
    env, theta, _, _ = make_instance(CASES["E2"]["env"], CASES["E2"]["instance"])
    t = trust_region_terms(env, theta, theta)
    assert t["error"] == 0 and t["delta"] == 0 and t["eps"] == 0
    assert max(tr.trm_bounds(t["T"], t["delta"], t["eps"], t["kl_seq"], t["tv_seq"], t["dbar"]).values()) == 0


def test_terms_refuse_what_is_not_e2():
    env, theta, _, _ = make_instance("bandit", "mild")
    with pytest.raises(ValueError, match="TokenTreeMDP"):
        trust_region_terms(env, theta, theta)
    with pytest.raises(ValueError, match="theta_b"):
        trust_region_terms(_two_token_env(), np.zeros((2, 2)), np.zeros((3, 2)))


# --------------------------------------------------------------------- claim 25


def test_claim_25_passes_exactly_when_no_point_violates():
    pts = c25.trm_points(quick=True)
    assert {p["case"] for p in pts} == {"E2", "long E2 H=8"} and len(pts) == 4
    assert not any(c25.violations(p) for p in pts)
    r = c25.check_25(quick=True)
    assert r.status == "PASS" and r.refuted_at == ()
    assert "violated at 0 of 4 points" in r.measured


def test_claim_25_fails_at_the_first_violating_point(monkeypatch):
    """A planted violation (one bound of two points lowered below |Error|) makes the check FAIL and name
    the first of them, with the values there."""
    pts = c25.trm_points(quick=True)
    for i in (1, 3):
        pts[i]["bounds"] = {**pts[i]["bounds"], "pm_kl": 0.5 * pts[i]["abs_error"]}
    monkeypatch.setattr(c25, "trm_points", lambda quick=False: pts)
    r = c25.check_25(quick=True)
    assert r.status == "FAIL"
    assert "violated at 2 of 4 points" in r.measured
    (ce,) = r.refuted_at
    assert ce["point"] == f"{pts[1]['case']} Delta={pts[1]['Delta']:g}"
    assert ce["values"] == {"|Error|": round(pts[1]["abs_error"], 6), "B_pm_kl": round(0.5 * pts[1]["abs_error"], 6)}
