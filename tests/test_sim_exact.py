"""Exact enumeration of the simulators against brute force and Monte Carlo (THEORY §6 protocol)."""
import itertools

import numpy as np
import pytest

import estimators
from simulators import bandit, token_mdp
from simulators.bandit import SoftmaxBandit
from simulators.core import n_count_vectors
from simulators.token_mdp import TokenTreeMDP, reward_vector

SCHEMES = [s for s, spec in estimators.SCHEMES.items() if not spec.batch_coupled]  # groups independent


def random_bandit(seed, K=4, scale=1.0):
    rng = np.random.default_rng(seed)
    return rng.normal(0, scale, K), rng.normal(0, scale, K), rng.uniform(0, 1, K)


def brute_force(theta, theta_b, rewards, G, eps, scheme, advantage):
    """Sum over all K^G ordered tuples, each group's estimate computed directly."""
    env = SoftmaxBandit(rewards)
    lr = env.log_probs(theta) - env.log_probs(theta_b)
    p_b = np.exp(env.log_probs(theta_b))
    S = env.scores(theta)
    K = len(theta)
    mean, second, max_norm = np.zeros(K), 0.0, 0.0
    for tup in itertools.product(range(K), repeat=G):
        o = np.array(tup)
        A = estimators.advantages(np.asarray(rewards, float)[o][None], advantage)
        c = estimators.weights(scheme, lr[o][None], eps, advantages=A)
        g = ((c * A)[0][:, None] * S[o]).mean(0)
        p = np.prod(p_b[o])
        mean += p * g
        second += p * g @ g
        max_norm = max(max_norm, float(np.linalg.norm(g)))
    return mean, second, max_norm


# leave-one-out and grpo advantages need G >= 2 (a ValueError for G = 1, see test_sim_envs)
CASES = [(1, "drgrpo")] + [(G, a) for G in (2, 3, 4) for a in ("loo", "grpo", "drgrpo")]


@pytest.mark.parametrize("G,advantage", CASES)
def test_enumeration_equals_brute_force_over_ordered_tuples(G, advantage):
    theta, theta_b, rewards = random_bandit(10 + G, K=2, scale=1.5)
    for scheme in SCHEMES:
        ex = bandit.exact_moments(theta, theta_b, rewards, G, 0.15, scheme, advantage)
        mean, second, max_norm = brute_force(theta, theta_b, rewards, G, 0.15, scheme, advantage)
        assert np.allclose(ex["mean_grad"], mean, atol=1e-13, rtol=1e-12), scheme
        assert ex["second_moment"] == pytest.approx(second, rel=1e-12, abs=1e-15), scheme
        assert ex["max_norm"] == pytest.approx(max_norm, rel=1e-12, abs=1e-15), scheme
        assert ex["n_configs"] == n_count_vectors(G, 2)


def test_enumeration_equals_brute_force_three_arms():
    theta, theta_b, rewards = random_bandit(3, K=3, scale=1.0)
    for scheme in ("gmc", "tic_ppo", "snis"):
        ex = bandit.exact_moments(theta, theta_b, rewards, 4, 0.1, scheme)
        mean, second, max_norm = brute_force(theta, theta_b, rewards, 4, 0.1, scheme, "loo")
        assert np.allclose(ex["mean_grad"], mean, atol=1e-13)
        assert ex["second_moment"] == pytest.approx(second, rel=1e-12)
        assert ex["max_norm"] == pytest.approx(max_norm, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_and_monte_carlo_agree_within_4_se_for_every_scheme(seed):
    theta, theta_b, rewards = random_bandit(seed, K=4, scale=1.0)
    G = [3, 6, 8][seed]
    for scheme in SCHEMES:
        ex = bandit.exact_moments(theta, theta_b, rewards, G, 0.2, scheme)
        mc = bandit.mc_moments(theta, theta_b, rewards, G, 0.2, scheme, n_groups=40_000, seed=100 + seed)
        se = mc["mean_grad_se"]
        assert np.all(np.abs(mc["mean_grad"] - ex["mean_grad"]) <= 4 * se + 1e-12), scheme
        assert abs(mc["second_moment"] - ex["second_moment"]) <= 4 * mc["second_moment_se"], scheme
        assert abs(mc["mass_bias"] - ex["mass_bias"]) <= 4 * mc["mass_bias_se"] + 1e-15, scheme
        assert mc["max_norm"] <= ex["max_norm"] * (1 + 1e-12)
        assert np.array_equal(mc["grad_J"], ex["grad_J"])


def test_mc_is_deterministic_per_seed_and_multi_prompt_agrees():
    rng = np.random.default_rng(5)
    theta, theta_b, rewards = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.uniform(size=(3, 4))
    ex = bandit.exact_moments(theta, theta_b, rewards, 5, 0.2, "gmc")
    a = bandit.mc_moments(theta, theta_b, rewards, 5, 0.2, "gmc", 30_000, seed=7)
    b = bandit.mc_moments(theta, theta_b, rewards, 5, 0.2, "gmc", 30_000, seed=7)
    assert np.array_equal(a["mean_grad"], b["mean_grad"])
    assert ex["mean_grad"].shape == (3, 4)
    assert np.all(np.abs(a["mean_grad"] - ex["mean_grad"]) <= 4 * a["mean_grad_se"])
    assert abs(a["second_moment"] - ex["second_moment"]) <= 4 * a["second_moment_se"]
    # prompts averaged: the multi-prompt gradient is the per-prompt gradient / Q
    one = bandit.exact_moments(theta[1], theta_b[1], rewards[1], 5, 0.2, "gmc")
    assert np.allclose(ex["mean_grad"][1], one["mean_grad"] / 3, atol=1e-15)


@pytest.mark.parametrize("G", [2, 3, 5, 16])
def test_leave_one_out_is_is_exactly_unbiased(G):
    for seed in range(3):
        theta, theta_b, rewards = random_bandit(seed, K=4, scale=1.5)
        r = bandit.exact_moments(theta, theta_b, rewards, G, 0.2, "is")
        assert np.max(np.abs(r["mean_grad"] - r["grad_J"])) <= 1e-12
        assert r["bias_norm"] <= 1e-12


@pytest.mark.parametrize("param", ["position", "tabular"])
def test_token_mdp_exact_against_mc_brute_force_and_unbiased_is(param):
    V, H = 2, 3
    rng = np.random.default_rng(4)
    mdp = TokenTreeMDP(V, H, param, reward_vector("threshold", V, H))
    th = rng.normal(0, 0.5, mdp.theta_shape)
    tb = th + rng.normal(0, 0.5, mdp.theta_shape)
    r = mdp.rewards
    is_ = token_mdp.exact_moments(th, tb, r, 4, 0.2, "is", param=param)
    assert np.max(np.abs(is_["mean_grad"] - is_["grad_J"])) <= 1e-12
    for scheme in ("gmc", "tic_mask"):
        ex = token_mdp.exact_moments(th, tb, r, 4, 0.2, scheme, param=param)
        mc = token_mdp.mc_moments(th, tb, r, 4, 0.2, scheme, 40_000, seed=3, param=param)
        assert np.all(np.abs(mc["mean_grad"] - ex["mean_grad"]) <= 4 * mc["mean_grad_se"] + 1e-12)
        assert abs(mc["second_moment"] - ex["second_moment"]) <= 4 * mc["second_moment_se"]
    # trajectory probabilities and ratios: product of token factors, summing to 1
    p = np.exp(mdp.log_probs(th))
    assert p.sum() == pytest.approx(1.0, abs=1e-14)
    # exact gradient against central finite differences of J
    g, fd = mdp.grad_J(th), np.zeros_like(th)
    for idx in np.ndindex(th.shape):
        d = np.zeros_like(th)
        d[idx] = 1e-6
        fd[idx] = (mdp.J(th + d) - mdp.J(th - d)) / 2e-6
    assert np.max(np.abs(g - fd)) < 1e-8


@pytest.mark.parametrize("scheme", ["is", "stale", "tic_mask", "tic_trunc"])
def test_per_sample_closed_form_equals_enumeration(scheme):
    theta, theta_b, rewards = random_bandit(8, K=3, scale=1.2)
    for G in (2, 3, 7):
        ex = bandit.exact_moments(theta, theta_b, rewards, G, 0.1, scheme)
        ps = bandit.per_sample_moments(theta, theta_b, rewards, G, 0.1, scheme)
        assert np.allclose(ps["mean_grad"], ex["mean_grad"], atol=1e-14)
        assert ps["second_moment"] == pytest.approx(ex["second_moment"], rel=1e-11)
    with pytest.raises(ValueError, match="per-sample"):
        bandit.per_sample_moments(theta, theta_b, rewards, 3, 0.1, "gmc")


def test_zero_delay_reduces_to_on_policy():
    theta, _, rewards = random_bandit(2)
    for scheme in SCHEMES:
        r = bandit.exact_moments(theta, theta, rewards, 5, 0.2, scheme)
        assert np.max(np.abs(r["mean_grad"] - r["grad_J"])) <= 1e-12
        assert r["sigma2"] == 0 and r["mass_bias"] == pytest.approx(0, abs=1e-15)


def test_chunked_enumeration_equals_one_pass(monkeypatch):
    from simulators import core

    theta, theta_b, rewards = random_bandit(6, K=4)
    whole = bandit.exact_all(theta, theta_b, rewards, 9, 0.2, ["gmc", "tic_ppo"])
    monkeypatch.setattr(core, "CHUNK_ENTRIES", 50)  # 5 count vectors per chunk
    chunked = bandit.exact_all(theta, theta_b, rewards, 9, 0.2, ["gmc", "tic_ppo"])
    for s in whole:
        for k in ("mean_grad", "bias", "second_moment", "max_norm", "mass_bias"):
            assert np.allclose(whole[s][k], chunked[s][k], rtol=1e-12, atol=1e-15), (s, k)


def test_distinct_counts_without_a_radix_key():
    from simulators.core import distinct_counts

    rng = np.random.default_rng(0)
    counts = rng.multinomial(20, np.full(16, 1 / 16), size=500)  # 21^16 > 2^62: the row-sort path
    counts = np.concatenate([counts, counts[:50]])
    uniq, freq = distinct_counts(counts)
    assert freq.sum() == 550 and len(uniq) == len({tuple(r) for r in counts})
    small, f2 = distinct_counts(counts[:, :4] * 0 + np.array([1, 2, 0, 17]))
    assert len(small) == 1 and f2[0] == 550


def test_projection_standard_error_is_calibrated():
    """z-scores of <u, mean_grad_mc - mean_grad_exact> with the covariance-based s.e. have unit
    spread (200 seeds: the sample std of z has s.e. ~0.05, so 4 s.e. gives [0.8, 1.2]). Summing
    per-component variances instead (ignoring that softmax scores sum to zero) fails this."""
    from simulators import bandit

    theta, theta_b = np.array([0.8, -0.3, 0.1, -0.9]), np.array([0.2, 0.1, -0.4, 0.0])
    r = np.array([1.0, 0.0, 0.3, 0.8])
    ex = bandit.exact_moments(theta, theta_b, r, 8, 0.2, "gmc")
    u = np.array([1.0, 1.0, -1.0, -1.0]) / 2.0
    z = []
    for seed in range(200):
        m = bandit.mc_moments(theta, theta_b, r, 8, 0.2, "gmc", 2000, seed)
        z.append(u @ (m["mean_grad"] - ex["mean_grad"]) / np.sqrt(u @ m["mean_grad_cov"] @ u))
    assert 0.8 <= np.std(z, ddof=1) <= 1.2
