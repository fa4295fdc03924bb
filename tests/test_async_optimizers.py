"""Optimisers of the asynchronous simulators and the long-horizon factorised token MDP:
exact sums against enumeration, Monte Carlo against exact values (tolerances from standard
errors), Adam/AdamW/clipping against PyTorch, and the async_optimizers sweep."""
from __future__ import annotations

import numpy as np
import pytest

from simulators.async_factorised import async_factorised, step_bias
from simulators.delay import AsyncConfig, async_sgd
from simulators.delay_sweeps import ASYNC_START, make_instance
from simulators.optim import Optimizer, OptimizerConfig, clip_at_quantile, clip_rows
from simulators.token_mdp import TokenTreeMDP
from simulators.token_mdp.factorised import FactorisedTokenMDP, start_logits

# --------------------------------------------------------------------------- optimisers


def numpy_dispatches_avx512() -> bool:
    """Whether numpy runs its AVX-512 kernels here, as on the machines that made the committed
    simulator sweeps (their LLM runs record AVX-512): other SIMD kernels round float64 reductions
    differently in the last bit."""
    from numpy._core._multiarray_umath import __cpu_features__

    return bool(__cpu_features__.get("AVX512F"))


def test_sgd_reproduces_the_committed_async_sgd_results_exactly():
    """Today's SGD learner is unchanged: one committed setting of the async_sgd sweep, rerun. To
    every bit where numpy dispatches the committing machine's kernels; elsewhere to a few units in
    the last place (a changed learner moves these values by orders of magnitude more)."""
    import pandas as pd

    from schema.results import results_root
    from simulators.delay_sweeps import SETTINGS, run_async_sgd

    path = results_root() / "sim" / "async_sgd" / "results.parquet"
    if not path.exists():
        pytest.fail(f"the committed {path} is missing")
    full = SETTINGS["async_sgd"]["full"]
    setting = {**full["fixed"], "env": "token_mdp", "scheme": "tic_trunc", "eps": 0.2}
    setting["delays"] = [0, 8]
    seeds = full["seeds"][:4]
    new, _ = run_async_sgd(setting, seeds)
    old = pd.read_parquet(path)
    old = old[(old["env"] == "token_mdp") & (old["scheme"] == "tic_trunc") & (old["eps"] == 0.2)
              & old["d"].isin([0, 8]) & old["seed"].isin(seeds)].sort_values(["d", "seed"])
    assert len(old) == len(new) == 8
    for col in ("avg_grad_sq", "final_J", "avg_bias_sq", "max_ghat_norm", "max_drift"):
        got, want = new.sort_values(["d", "seed"])[col].to_numpy(), old[col].to_numpy()
        if numpy_dispatches_avx512():
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_array_max_ulp(got, want, maxulp=16)


def test_sgd_steps_are_eta_times_the_estimate():
    env, _, theta0, _ = make_instance("token_mdp", "target")
    cfg = AsyncConfig("gmc", 4, 0.2, 0.5, 12)
    r = async_sgd(env, theta0, cfg, [0, 1], [0, 4])
    assert cfg.optimizer == "sgd"
    np.testing.assert_allclose(r["step_norm"], 0.5 * r["ghat_norm"], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["adam", "adam_clip", "adamw_clip"])
def test_adam_adamw_and_clipping_match_torch(kind):
    import torch  # the toolkit's environment always has it (torch==2.13.0): a missing torch is a failure, not a skip
    rng = np.random.default_rng(3)
    theta = rng.normal(size=(3, 4, 2))
    cfg = OptimizerConfig(kind, lr=0.05, clip_norm=0.7, weight_decay=0.01)
    opt = Optimizer(cfg, theta)
    params = [torch.tensor(theta[b], dtype=torch.float64, requires_grad=True) for b in range(3)]
    topt = [(torch.optim.AdamW if kind == "adamw_clip" else torch.optim.Adam)([p], lr=0.05,
            **({"weight_decay": 0.01} if kind == "adamw_clip" else {})) for p in params]
    for _ in range(6):
        g = rng.normal(size=theta.shape) * rng.exponential(1.0, size=(3, 1, 1))
        theta = opt.step(theta, g)
        for b, (p, o) in enumerate(zip(params, topt)):
            o.zero_grad()
            p.grad = torch.tensor(-g[b], dtype=torch.float64)  # ascent on J = descent on -J
            if cfg.clips:
                torch.nn.utils.clip_grad_norm_([p], 0.7)
            o.step()
    np.testing.assert_allclose(theta, np.stack([p.detach().numpy() for p in params]), rtol=1e-12, atol=1e-13)


def test_clip_rows_and_quantile():
    g = np.array([[3.0, 4.0], [0.3, 0.4]])
    out = clip_rows(g, 1.0)
    assert np.linalg.norm(out[0]) == pytest.approx(1.0, rel=1e-5) and np.array_equal(out[1], g[1])
    assert clip_at_quantile([0.0, 1.0, 2.0, 3.0, np.nan], 0.5) == 2.0  # zeros and NaN left out
    with pytest.raises(ValueError, match="quantile"):
        clip_at_quantile([1.0], 0.0)
    with pytest.raises(ValueError, match="optimizer"):
        OptimizerConfig("rmsprop")
    with pytest.raises(ValueError, match="clip_norm"):
        AsyncConfig("gmc", 4, 0.2, 0.5, 3, optimizer="adam_clip", clip_norm=0.0)


def test_async_sgd_runs_every_optimiser_and_records_step_norms():
    env, _, theta0, _ = make_instance("token_mdp", ASYNC_START["token_mdp"]["instance"])
    for opt in ("adam", "adam_clip", "adamw_clip"):
        r = async_sgd(env, theta0, AsyncConfig("tic_trunc", 4, 0.2, 0.05, 10, optimizer=opt), [0], [0, 2])
        assert np.all(np.isfinite(r["step_norm"])) and np.any(r["step_norm"] > 0)


# --------------------------------------------------------------------------- the factorised MDP


def _pair(H, B=3, seed=0, scale=0.4):
    rng = np.random.default_rng(seed)
    th = start_logits(2, H, 0.7)[None] + rng.normal(size=(B, H, 2))
    return th, th + scale * rng.normal(size=th.shape)


@pytest.mark.parametrize("H", [1, 5])
def test_exact_sums_equal_the_enumeration(H):
    env = FactorisedTokenMDP(2, H)
    ref = TokenTreeMDP(2, H, "position", env.rewards)
    th, tb = _pair(H)
    for b in range(th.shape[0]):
        assert env.J_batch(th)[b] == pytest.approx(ref.J(th[b]), rel=1e-12)
        np.testing.assert_allclose(env.grad_J_batch(th)[b], ref.grad_J(th[b]), atol=1e-14)
        np.testing.assert_allclose(env.outcome_log_probs(th)[b], ref.log_probs(th[b]), atol=1e-12)
        for s in ("stale", "tic_mask", "tic_trunc", "is"):
            e = ref.per_sample_moments(th[b], tb[b], 8, 0.2, s)
            bias, m = env.per_sample_bias(th[b:b + 1], tb[b:b + 1], 8, 0.2, s)
            np.testing.assert_allclose(bias[0], e["bias"], atol=1e-13)
            assert m[0] == pytest.approx(e["mass_bias"], abs=1e-13)
        s2, m4 = env.ratio_moments_batch(th[b:b + 1], tb[b:b + 1])
        assert s2[0] == pytest.approx(e["sigma2"], rel=1e-10) and m4[0] == pytest.approx(e["mu4"], rel=1e-9)
        assert env.score_bound(th[b:b + 1])[0] == pytest.approx(e["M"], rel=1e-12)


def test_J_and_grad_at_H16_equal_the_65536_outcome_enumeration():
    env = FactorisedTokenMDP(2, 16)
    th, tb = _pair(16, B=1, scale=0.1)
    p = np.exp(env.outcome_log_probs(th)[0])
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert env.J_batch(th)[0] == pytest.approx(p @ env.rewards, rel=1e-12)
    np.testing.assert_allclose(env.grad_J_batch(th)[0].ravel(), env.vec_sum((p * env.rewards)[None], th)[0].ravel(),
                               atol=1e-15)
    pb = np.exp(env.outcome_log_probs(tb)[0])
    w = p / pb
    s2, m4 = env.ratio_moments_batch(th, tb)
    assert s2[0] == pytest.approx(pb @ (w - 1) ** 2, rel=1e-9) and m4[0] == pytest.approx(pb @ (w - 1) ** 4, rel=1e-8)


def test_trajectory_chi2_grows_with_H_as_the_product_formula():
    """Claim 18 on the long MDP: the same per-token drift at every position gives
    1 + chi^2 = (1 + chi^2_token)^H, so log(1 + chi^2) is linear in H (exactly)."""
    out = []
    for H in (2, 4, 8, 16):
        th = start_logits(2, H, 0.8)[None]  # the same token law at every position, whatever H
        tb = th + np.array([0.3, -0.3])
        s2, _ = FactorisedTokenMDP(2, H).ratio_moments_batch(th, tb)
        out.append(np.log1p(s2[0]))
    np.testing.assert_allclose(np.array(out) / np.array([2, 4, 8, 16]), out[0] / 2, rtol=1e-12)
    assert out[-1] > out[0] > 0


def test_groups_are_unbiased_for_IS_and_match_the_exact_bias_within_4_se():
    """Lemma 1 and the Monte Carlo bias of each kind of scheme against an exact value."""
    H, G, eps, n = 3, 4, 0.2, 40_000
    env = FactorisedTokenMDP(2, H)
    th, tb = _pair(H, B=1, seed=1, scale=0.8)
    rng = np.random.default_rng(7)
    tok = env.sample_tokens(rng, tb[0], (n, G))[None]
    schemes = ["is", "tic_trunc", "gmc", "snis", "topr"]
    g, gap, _ = env.group_estimates(tok, th, tb, eps, schemes)
    ref = TokenTreeMDP(2, H, "position", env.rewards)
    ex = ref.exact_all(th[0], tb[0], G, eps, schemes)
    for s in schemes:
        x = g[s][0].reshape(n, -1)
        se = x.std(0, ddof=1) / np.sqrt(n)
        assert np.all(np.abs(x.mean(0) - ex[s]["mean_grad"].ravel()) <= 4 * se + 1e-12), s
        m_se = gap[s][0].std(ddof=1) / np.sqrt(n)
        assert abs(gap[s][0].mean() - ex[s]["mass_bias"]) <= 4 * m_se + 1e-12, s
    assert np.max(np.abs(ex["tic_trunc"]["bias"])) > 1e-3 and ex["gmc"]["mass_bias"] > 1e-3  # a real bias is tested


def test_step_bias_monte_carlo_against_exact_enumeration():
    H, G, eps = 3, 4, 0.2
    env = FactorisedTokenMDP(2, H)
    th, tb = _pair(H, B=1, seed=2, scale=0.8)
    exact = TokenTreeMDP(2, H, "position", env.rewards).exact_all(th[0], tb[0], G, eps, ["gmc"])["gmc"]
    cfg = AsyncConfig("gmc", G, eps, 0.1, 1)
    b2, m, var = step_bias(env, th, tb, cfg, [np.random.default_rng(0)], 20_000)
    se_b2 = 2 * exact["bias_norm"] * np.sqrt(var[0]) + var[0]  # delta method on ||b_hat||^2
    assert abs(b2[0] - exact["bias_norm"] ** 2) <= 4 * se_b2
    assert exact["bias_norm"] > 1e-3
    b2, m, var = step_bias(env, th, th, cfg, [np.random.default_rng(0)], 50)  # no delay: w = 1, no bias
    assert b2[0] == 0 and m[0] == 0 and var[0] == 0
    cfg = AsyncConfig("tic_trunc", G, eps, 0.1, 1)
    b2, m, var = step_bias(env, th, tb, cfg, [], 1)
    ps = TokenTreeMDP(2, H, "position", env.rewards).per_sample_moments(th[0], tb[0], G, eps, "tic_trunc")
    assert b2[0] == pytest.approx(ps["bias_norm"] ** 2, rel=1e-10) and var[0] == 0


def test_async_factorised_paired_and_exact_records():
    env = FactorisedTokenMDP(2, 6)
    th0 = start_logits(2, 6, 0.7)
    cfg = AsyncConfig("tic_trunc", 8, 0.2, 0.1, 15, optimizer="adam")
    r = async_factorised(env, th0, cfg, [0, 1], [0, 3], n_mc=8)
    r2 = async_factorised(env, th0, cfg, [1], [3], n_mc=8)
    np.testing.assert_array_equal(r["J"][1, 1], r2["J"][0, 0])  # a run's path depends on its (seed, d) only
    assert r["J"][0, 0, 0] == pytest.approx(0.7**6)
    assert np.all(r["bias_sq"][0] == 0) and np.all(r["sigma2"][0] == 0)  # d = 0: on-policy
    assert np.all(r["sigma2"][1, :, 4:] > 0) and np.all(np.isfinite(r["step_norm"]))
    with pytest.raises(ValueError, match="n_mc"):
        async_factorised(env, th0, cfg, [0], [0], n_mc=1)


# --------------------------------------------------------------------------- the sweep


def test_async_optimizers_quick_sweep_is_tidy_and_resumable(tmp_path):
    import pandas as pd

    from simulators.sweep import run_sweep

    out = run_sweep("async_optimizers", quick=True, out=tmp_path / "ao", progress=False)
    df = pd.read_parquet(out / "results.parquet")
    assert set(df["optimizer"]) == {"sgd", "adam", "adam_clip", "adamw_clip"}
    assert len(df) == 2 * 4 * 4 * 2 * 2  # H x scheme x optimiser x delay x seed
    clipped = df[df["optimizer"] == "adam_clip"]
    assert (clipped["clip_norm"] < 1.0).all()  # the quantile of Adam's norms, not the default 1.0
    from schema.io import read_parquet_parts

    steps = read_parquet_parts(out / "steps.parquet")
    assert {"ghat_sq", "ghat_sq_se", "step_norm", "bias_sq"} <= set(steps.columns)
    before = (out / "results.parquet").stat().st_mtime_ns
    parts = sorted(p.stat().st_mtime_ns for p in (out / "parts").glob("*.parquet"))
    run_sweep("async_optimizers", quick=True, out=tmp_path / "ao", progress=False)
    assert sorted(p.stat().st_mtime_ns for p in (out / "parts").glob("*.parquet")) == parts
    assert (out / "results.parquet").stat().st_mtime_ns >= before
