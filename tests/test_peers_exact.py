"""Published stale-rollout corrections as peers, measured exactly (simulators.peers): the surrogate
enumeration against the core one, unbiased on-policy, Monte Carlo against the enumeration, the batch
normalisation's bounds."""
from __future__ import annotations

import numpy as np
import pytest

from estimators import weights

# ----------------------------------------------------------------- exact measurement (simulators.peers)


def _view(case, Delta):
    from simulators import peers as P
    from simulators.delay import static_behaviour
    from simulators.delay_sweeps import make_instance

    c = P.CASES[case]
    env, th, _, u = make_instance(c["env"], c["instance"])
    tb = static_behaviour(th, Delta, u)
    return env, th, tb, P.token_view(env, th, tb), c["G"]


def test_surrogate_autograd_enumeration_equals_the_core_enumeration():
    from simulators import peers as P

    env, th, tb, view, G = _view("E1", 1.5)
    names = ["is", "gmc", "tic_mask", "tic_trunc", "snis", "topr", "seq_mis"]
    core = env.exact_all(th, tb, G, 0.2, names)
    for name in names:
        r = P.exact_moments(view, G, 0.2, name)
        assert r["bias_norm"] == pytest.approx(core[name]["bias_norm"], rel=1e-9, abs=1e-14), name
        assert r["second_moment"] == pytest.approx(core[name]["second_moment"], rel=1e-12), name
        assert r["max_norm"] == pytest.approx(core[name]["max_norm"], rel=1e-12), name
        assert r["prob_total"] == pytest.approx(1.0, abs=1e-12)


def test_every_loss_is_unbiased_on_policy_after_the_length_rescaling():
    from simulators import peers as P

    _, _, _, view, G = _view("E2", 0.0)
    for name in [n for n in P.TRAJECTORY if n != "seq_tis_bn"] + P.TOKEN:  # seq_tis_bn: all weights 1 on-policy
        r = P.exact_moments(view, G, 0.2, name)
        assert r["bias_norm"] < 1e-12 and r["bias_b_norm"] < 1e-12, name


def test_monte_carlo_over_batches_of_one_group_matches_the_enumeration():
    from simulators import peers as P

    _, _, _, view, G = _view("E1", 2.0)
    for i, name in enumerate(["seq_tis_bn", "gmc"]):
        ex = P.exact_moments(view, G, 0.2, name)
        mc = P.mc_moments(view, G, 0.2, name, 1, 2000, np.random.default_rng(100 + i))
        assert abs(mc["second_moment"] - ex["second_moment"]) <= 4 * mc["second_moment_se"], name
        assert abs(mc["bias_norm"] - ex["bias_norm"]) <= 4 * mc["bias_norm_se"] + 1e-3 * ex["bias_norm"], name
        assert mc["max_norm"] <= ex["max_norm"] * (1 + 1e-12)


def test_batch_normalisation_breaks_the_per_group_bound_but_not_the_batch_bound():
    # a batch of B = 4 groups: one group of ratio-1 trajectories among groups of tiny ratios gets
    # mass close to B, so its estimate can reach B M; the batch average stays within M
    B, G = 4, 3
    lr = np.full((B, G), -30.0)
    lr[0] = 0.0
    c = weights("seq_tis_bn", lr, 0.2)
    X = np.ones((B, G, 1))  # all X_i equal, ||X|| = M = 1 (Lemma 2's worst case)
    per_group = np.abs((c[..., None] * X).mean(1))[:, 0]
    assert per_group[0] == pytest.approx(B, rel=1e-9) and per_group[0] > 1.2
    assert np.abs((c[..., None] * X).mean((0, 1))) <= 1 + 1e-12


def test_core_enumeration_refuses_a_batch_coupled_scheme():
    from simulators import bandit

    with pytest.raises(ValueError, match="normalises over the whole batch"):
        bandit.exact_moments([0.5, 0.0], [0.0, 0.0], [1.0, 0.0], 4, 0.2, "seq_tis_bn")
