"""Environments E2-E4, controlled delay, sweeps, the claims interface and bad input."""
import json

import numpy as np
import pandas as pd
import pytest

from simulators import bandit, sweep, theory
from simulators.bandit import SoftmaxBandit
from simulators.core import MAX_ENTRIES
from simulators.delay import AsyncConfig, ParameterHistory, async_sgd, static_behaviour
from simulators.extremal import RatioLaw, rare_jump, scarf, two_point_mask
from simulators.lognormal import GaussianPolicy
from simulators.token_mdp import TokenTreeMDP, reward_vector

TH, TB, R = np.array([0.5, 0.0, -0.5]), np.zeros(3), np.array([1.0, 0.0, 0.5])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("G,match", [(0, "G"), (-3, "G"), (2.5, "G"), (True, "G")])
def test_bad_group_size(G, match):
    with pytest.raises(ValueError, match=match):
        bandit.exact_moments(TH, TB, R, G, 0.2, "gmc")
    with pytest.raises(ValueError, match=match):
        bandit.mc_moments(TH, TB, R, G, 0.2, "gmc", 100, 0)


def test_leave_one_out_needs_two_samples():
    with pytest.raises(ValueError, match="G >= 2"):
        bandit.exact_moments(TH, TB, R, 1, 0.2, "is")


@pytest.mark.parametrize("eps", [0.0, -0.1, float("nan")])
def test_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        bandit.exact_moments(TH, TB, R, 3, eps, "gmc")


def test_probabilities_must_sum_to_one():
    with pytest.raises(ValueError, match="sum to 1"):
        RatioLaw(np.array([0.5, 1.5]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="E_b w = 1"):
        RatioLaw(np.array([0.5, 2.0]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="negative"):
        RatioLaw(np.array([0.5, 1.5]), np.array([1.5, -0.5]))


def test_enumeration_too_large_says_how_large_and_suggests_monte_carlo():
    K = 8
    with pytest.raises(ValueError, match=r"C\(G\+K-1, K-1\) = [\d,]+ count vectors.*mc_moments \(Monte Carlo\)"):
        bandit.exact_moments(np.zeros(K), np.zeros(K), np.ones(K) / 2, 64, 0.2, "gmc")
    assert MAX_ENTRIES > 64 * 47_905  # K = 4, G = 64 fits


def test_other_bad_input():
    with pytest.raises(ValueError, match=r"rewards must lie in \[0, 1\]"):
        bandit.exact_moments(TH, TB, [1.5, 0, 0], 3, 0.2, "gmc")
    with pytest.raises(ValueError, match="theta_b must have shape"):
        bandit.exact_moments(TH, np.zeros(4), R, 3, 0.2, "gmc")
    with pytest.raises(ValueError, match="non-finite"):
        bandit.exact_moments([0.0, np.nan, 1.0], TB, R, 3, 0.2, "gmc")
    with pytest.raises(ValueError, match="unknown scheme"):
        bandit.exact_moments(TH, TB, R, 3, 0.2, "ppo")
    with pytest.raises(ValueError, match="n_groups"):
        bandit.mc_moments(TH, TB, R, 3, 0.2, "gmc", 1, 0)
    with pytest.raises(ValueError, match="seed"):
        bandit.mc_moments(TH, TB, R, 3, 0.2, "gmc", 100, -1)
    with pytest.raises(ValueError, match="V^H|V\\^H"):
        from simulators import token_mdp

        token_mdp.exact_moments(np.zeros((3, 2)), np.zeros((3, 2)), np.ones(7) / 2, 2, 0.2, "gmc")
    with pytest.raises(ValueError, match="param"):
        TokenTreeMDP(2, 3, "per-token", np.zeros(8))
    with pytest.raises(ValueError, match="direction"):
        static_behaviour(TH, 1.0, np.zeros(3))
    with pytest.raises(ValueError, match="delay_kind"):
        AsyncConfig("gmc", 4, 0.2, 0.1, 10, delay_kind="random")


# --------------------------------------------------------------------------- E2, E3, E4


def test_tabular_nodes_and_position_factorisation():
    V, H = 3, 3
    tab = TokenTreeMDP(V, H, "tabular", reward_vector("parity", V, H))
    assert tab.theta_shape == ((V**H - 1) // (V - 1), V)
    # every outcome visits H distinct nodes; the prefix tree has each prefix once
    assert all(len(set(row)) == H for row in tab.nodes)
    pos = TokenTreeMDP(V, H, "position", reward_vector("target", V, H, target=[2, 0, 1]))
    rng = np.random.default_rng(1)
    th, tb = rng.normal(size=(H, V)), rng.normal(size=(H, V))
    lr, lpb, _, _ = pos.arrays(th, tb)
    s2 = float((np.exp(lpb) * np.expm1(lr) ** 2).sum())
    assert 1 + s2 == pytest.approx(np.prod(pos.position_ratio_moments(th, tb)), rel=1e-12)
    assert pos.rewards.sum() == 1 and pos.rewards[2 * 9 + 0 * 3 + 1] == 1


def test_lognormal_mc_matches_closed_forms():
    pol = GaussianPolicy(0.3, 0.0, seed=2)
    cf, mc = pol.closed_forms(0.2), pol.mc_ratio_moments(200_000, 0.2)
    for k in cf:
        assert abs(mc[k][0] - cf[k]) <= 4 * mc[k][1], k
    m1, se1 = pol.mc_mass_bias("gmc", 1, 0.2, 100_000)
    assert abs(m1 - cf["m_trunc"]) <= 4 * se1  # G = 1: GMC is truncation


def test_extremal_laws_hit_their_worst_cases():
    s2, eps, G = 1e-3, 0.1, 8
    mask = two_point_mask(s2, eps)
    assert mask.sigma2 == pytest.approx(s2, rel=1e-9)
    assert mask.mass_bias(["tic_mask"], G, eps)["tic_mask"] == pytest.approx((1 + eps) * s2 / (s2 + eps**2), rel=1e-6)
    sc = scarf(s2, eps)
    assert sc.mass_bias(["tic_trunc"], G, eps)["tic_trunc"] == pytest.approx(0.5 * (np.sqrt(s2 + eps**2) - eps),
                                                                            rel=1e-9)
    rj = rare_jump(G, eps, p=None, sigma2=s2)
    assert rj.sigma2 == pytest.approx(s2, rel=1e-9)
    # the group-mean fourth moment identity (claim 6) on an extremal law
    assert sc.wbar_moment(5, 4) == pytest.approx(theory.fourth_moment_group_mean(sc.sigma2, sc.mu4, 5), rel=1e-10)
    counts_mc = sc.mc_mass_bias("tic_trunc", G, eps, 50_000, np.random.default_rng(0))
    exact = sc.mass_bias(["tic_trunc"], G, eps)["tic_trunc"]
    assert abs(counts_mc[0] - exact) <= 4 * counts_mc[1]


# --------------------------------------------------------------------------- delay


def test_static_delay_and_history():
    tb = static_behaviour(TH, 2.0, [3.0, 0.0, 4.0])
    assert np.allclose(TH - tb, [1.2, 0.0, 1.6])
    h = ParameterHistory(np.zeros((2, 1)), 5)
    for t in range(1, 4):
        h.append(np.full((2, 1), float(t)))
    assert h.lagged(np.array([0, 5]))[:, 0].tolist() == [3.0, 0.0]


def test_async_sgd_is_deterministic_per_seed_and_exact_at_zero_delay():
    env = SoftmaxBandit([1.0, 0.0, 0.0, 0.0])
    th0 = np.array([-1.5, 0.0, 0.0, 0.0])
    cfg = AsyncConfig("gmc", 4, 0.2, 0.5, 25)
    a = async_sgd(env, th0, cfg, seeds=[0, 1], delays=[0, 3])
    b = async_sgd(env, th0, cfg, seeds=[1], delays=[3])
    assert np.array_equal(a["J"][1, 1], b["J"][0, 0])  # run (d=3, seed=1) does not depend on the others
    # d = 0: on-policy, unbiased (GMC's weights equal w up to one ulp: estimators' fast path)
    assert np.all(a["drift"][0] == 0) and np.all(np.sqrt(a["bias_sq"][0]) <= 1e-15)
    assert np.all(a["lag"][1][:, 5:] == 3)
    assert np.any(a["bias_sq"][1] > 1e-24)  # a delayed run meets the cap
    # every step: ||b_t|| <= M_t m-bound(sigma_t); class members are bounded by (1+eps) M
    bound = a["M"] * theory.mass_bound("gmc", a["sigma2"], a["mu4"], 4, 0.2)
    assert np.all(np.sqrt(a["bias_sq"]) <= bound * (1 + theory.FP_SLACK) + 1e-15)
    assert np.all(a["ghat_norm"] <= 1.2 * a["M"] * (1 + 1e-12))
    uni = async_sgd(env, th0, AsyncConfig("tic_mask", 4, 0.2, 0.5, 25, delay_kind="uniform"), [0], [4])
    assert set(np.unique(uni["lag"])) <= {0.0, 1.0, 2.0, 3.0, 4.0}


# --------------------------------------------------------------------------- sweeps


def _tiny_sweep(values):
    def run(setting, seeds):
        return pd.DataFrame([{"seed": s, "scheme": "gmc", "value": setting["x"] * 10 + s} for s in seeds])

    return sweep.Sweep("tiny", "test sweep", {"full": {"grid": {"x": values}, "fixed": {"schemes": ["gmc"]},
                                                       "seeds": [0, 1]},
                                              "quick": {"grid": {"x": values[:1]}, "seeds": [0]}}, run, {})


def test_sweep_is_tidy_resumable_and_never_overwrites(tmp_path, monkeypatch):
    calls = []
    sw = _tiny_sweep([1, 2])
    orig = sw.run
    sw = sweep.Sweep(sw.name, sw.description, sw.settings, lambda s, seeds: calls.append(s["x"]) or orig(s, seeds))
    monkeypatch.setattr(sweep, "registry", lambda: {"tiny": sw})
    out = sweep.run_sweep("tiny", out=tmp_path / "tiny", progress=False)
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 4 and {"x", "seed", "scheme", "value", "setting_key"} <= set(df.columns)
    assert "schemes" not in df.columns  # list-valued settings are not columns
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["settings"] == [{"schemes": ["gmc"], "x": 1}, {"schemes": ["gmc"], "x": 2}]
    (out / "parts" / f"{sweep.setting_key(cfg['settings'][1])}.parquet").unlink()
    calls.clear()
    sweep.run_sweep("tiny", out=out, progress=False)  # resumes: only the missing setting runs
    assert calls == [2]
    sw2 = _tiny_sweep([1, 3])
    monkeypatch.setattr(sweep, "registry", lambda: {"tiny": sw2})
    with pytest.raises(ValueError, match="other settings"):
        sweep.run_sweep("tiny", out=out, progress=False)
    sweep.run_sweep("tiny", out=out, force=True, progress=False)
    assert sorted(pd.read_parquet(out / "results.parquet")["x"].unique()) == [1, 3]
    assert any(p.name.startswith("tiny.old-") for p in tmp_path.iterdir())  # moved aside, not overwritten


def test_every_registered_sweep_has_quick_and_full_tables():
    for name, sw in sweep.registry().items():
        for quick in (True, False):
            assert sw.table(quick) and sw.seeds(quick), name
        assert len(sw.table(True)) <= len(sw.table(False))


def test_quick_sweep_runs_and_is_deterministic(tmp_path):
    a = sweep.run_sweep("sqbias_vs_eps", quick=True, out=tmp_path / "a", progress=False)
    df = pd.read_parquet(a / "results.parquet")
    worst = df[df["worst_case_law"]]
    assert np.all(worst["mass_bias_exact"] <= worst["bound"] * (1 + 1e-9))
    b = sweep.run_sweep("bias_vs_G", quick=True, out=tmp_path / "b", progress=False)
    c = sweep.run_sweep("bias_vs_G", quick=True, out=tmp_path / "c", progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(b / "results.parquet"), pd.read_parquet(c / "results.parquet"))
