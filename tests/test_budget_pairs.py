"""The frozen-pair second moment (studies.budget.pairs*): per-completion gradients against one backward pass per
row, the CountSketch's mean and variance by enumeration, a group's update against its own loss, the law's
estimates against a planted truth, the batch simulation's bookkeeping, the equal-reward share by enumeration, one
pair end to end on a small pool with its checks, and the command's resume rules."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is", "snis", "vespo", "gspo")


@pytest.fixture(scope="module")
def small():
    """The committed long-horizon warm start as pi_b, a perturbed copy as pi, and a small pool of 2 prompts."""
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
    for p in pib.parameters():
        p.requires_grad_(False)
    idx = pool_prompts(task)[:2]
    mx = default_max_new_tokens(cfg, task)
    with torch.no_grad():
        b = sample_pool(pib, tok, task, idx, 64, 0, mx, chunk=64)
        lp_b = token_logp(pi, b)
        on = sample_pool(pi, tok, task, idx, 64, 1, mx, chunk=64)
    return {"models": [pi, pib], "tokenizer": tok, "task": task, "idx": idx, "max_new": mx, "config": cfg, "b": b,
            "on": on, "lp_b": lp_b, "first": None, "quick": True}


# --------------------------------------------------------------------------- per-completion gradients


def test_per_completion_gradients_equal_one_backward_pass_per_row(small):
    import copy

    from studies.budget.pairs_grads import per_completion_gradients
    from studies.common.pool import per_sample_vectors

    model = copy.deepcopy(small["models"][0]).double()
    b = small["b"]
    prompt = b["prompt_ids"][0][b["prompt_mask"][0].bool()]
    rows, mask = b["ids"][0, :5], b["mask"][0, :5].double()
    got = per_completion_gradients(model, prompt, rows, mask)
    params = [p for p in model.parameters() if p.requires_grad]
    assert got.shape == (5, sum(p.numel() for p in params)) and got.dtype == torch.float64
    for j in range(5):
        ids = torch.cat([prompt, rows[j]])[None]
        logits = model(input_ids=ids, use_cache=False).logits[0, prompt.numel() - 1:-1]
        lp = (torch.log_softmax(logits, -1).gather(-1, rows[j, :, None])[:, 0] * mask[j]).sum()
        want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(lp, params)])
        # float64 through a 4-layer model: rounding of order 1e-16 times the depth's condition, far below 1e-10
        assert float((got[j] - want).norm() / want.norm()) < 1e-10
    # and the group-size study's per-sample form (torch.func, float32) gives the same vectors to float32 rounding
    coefs = torch.randn(2, 1, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pool1 = {k: v[:1] for k, v in b.items()}
    ref = per_sample_vectors(small["models"][0], pool1, slice(0, 5), coefs)
    mine = coefs[:, 0] @ per_completion_gradients(small["models"][0], prompt, rows, mask.float()).double()
    assert float((mine - ref).norm() / ref.norm()) < 1e-5


def test_a_layer_without_a_per_sample_rule_is_refused():
    from studies.budget.pairs_grads import per_completion_gradients

    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 2, 1)

    with pytest.raises(ValueError, match="no per-sample rule for the layer Conv1d"):
        per_completion_gradients(Odd(), torch.tensor([1]), torch.tensor([[1, 2]]), torch.ones(1, 2))


# --------------------------------------------------------------------------- the sketch


def test_count_sketch_mean_and_variance_by_enumeration():
    """Over every bucket map and sign pattern of 3 coordinates into 2 buckets: E<Sx,Sy> = <x,y> and Var<Sx,Sy> =
    (|x|^2|y|^2 + <x,y>^2 - 2 sum x_i^2 y_i^2) / k exactly, within the stated bound."""
    x, y, k = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, 2.0]), 2
    vals = []
    for h in itertools.product(range(k), repeat=3):
        for s in itertools.product((-1.0, 1.0), repeat=3):
            sx, sy = np.zeros(k), np.zeros(k)
            for i in range(3):
                sx[h[i]] += s[i] * x[i]
                sy[h[i]] += s[i] * y[i]
            vals.append(sx @ sy)
    vals = np.array(vals)
    var = ((x @ x) * (y @ y) + (x @ y) ** 2 - 2 * (x**2 * y**2).sum()) / k
    assert vals.mean() == pytest.approx(x @ y, abs=1e-12)
    assert vals.var() == pytest.approx(var, abs=1e-12)
    assert var <= ((x @ x) * (y @ y) + (x @ y) ** 2) / k


def test_the_count_sketch_is_its_definition_and_folds_into_a_smaller_one():
    from studies.budget.pairs_grads import CountSketch

    S = CountSketch(50, k=8, seed=3)
    x = torch.randn(2, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = torch.zeros(2, 8, dtype=torch.float64)
    for i in range(50):
        want[:, S.bucket[i]] += S.sign[i].double() * x[:, i]
    assert torch.allclose(S(x), want, rtol=0, atol=1e-12)
    folded = torch.zeros(2, 4, dtype=torch.float64)
    for i in range(50):
        folded[:, S.bucket[i] % 4] += S.sign[i].double() * x[:, i]
    assert torch.allclose(CountSketch.fold(S(x), 4), folded, rtol=0, atol=1e-12)
    assert torch.equal(CountSketch(50, k=8, seed=3).bucket, S.bucket)  # seeded
    with pytest.raises(ValueError, match="dimension 50 given vectors of dimension 49"):
        S(x[:, :49])
    with pytest.raises(ValueError, match="only into a divisor of 8, not 3"):
        CountSketch.fold(S(x), 3)


# --------------------------------------------------------------------------- coefficients and the law


@pytest.mark.parametrize("est", ESTIMATORS)
def test_a_group_s_own_update_is_p_k_times_its_coefficients(est):
    from studies.common.pool import group_coefficients

    g = torch.Generator().manual_seed(0)
    P, n, T, G = 2, 8, 5, 4
    logp, blogp = -torch.rand(P, n, T, generator=g) * 2, -torch.rand(P, n, T, generator=g) * 2
    mask = (torch.rand(P, n, T, generator=g) > 0.3).float()
    mask[..., 0] = 1
    rewards = (torch.rand(P, n, generator=g) > 0.5).float()
    pick, coef = group_coefficients(est, G, logp, blogp, mask, rewards, 0.2, np.random.default_rng(3))
    K = pick.shape[1]
    for p in range(P):
        for k in range(0, K, 37):
            s = pick[p, k]
            _, alone = group_coefficients(est, G, logp[p:p + 1, s], blogp[p:p + 1, s], mask[p:p + 1, s],
                                          rewards[p:p + 1, s], 0.2, None, exact=True)
            # float64: the two differ by the rounding of one division by P K
            assert torch.allclose(alone[0, 0], P * K * coef[p, k], rtol=1e-12, atol=1e-15)


def _planted(seed, P=6, R=5, K=40, dim=4):
    """Replicates of a planted law: prompt means m_p from a population (mean mu, covariance I/2), group updates
    u = m_p + noise (covariance diag(w)), exact target."""
    rng = np.random.default_rng(seed)
    mu, grad, w = np.array([1.0, 0.5, 0.0, 0.2]), np.array([1.2, 0.0, 0.3, 0.2]), np.array([0.5, 1.0, 2.0, 0.1])
    m = mu + rng.normal(0, math.sqrt(0.5), (P, dim))
    u = m[None, :, None] + rng.normal(0, 1, (R, P, K, dim)) * np.sqrt(w)  # (R, P, K, dim)
    mhat = u.mean(2)  # (R, P, dim)
    return {"V": torch.from_numpy(mhat.mean(1)), "T": torch.from_numpy(np.tile(grad, (R, 1))),
            "second": torch.from_numpy((u**2).sum(-1).mean(2).T.copy()),
            "gm": torch.from_numpy(np.einsum("rpd,spd->prs", mhat, mhat)),
            "truth": {"bias_abs": float(((m.mean(0) - grad) ** 2).sum()), "within": float(w.sum()),
                      "between": 0.5 * dim, "grad_sq": float(grad @ grad)}}


def test_the_law_s_estimates_are_unbiased_for_a_planted_law():
    """Over 300 seeds: the squared bias (against the planted prompts' own mean), the within-group variance and the
    task's between-prompt variance agree with the planted values within 4 standard errors of their mean."""
    from studies.budget.pairs_moments import cell_moments

    got = {"bias": [], "within": [], "between": [], "mse4": []}
    for seed in range(300):
        x = _planted(seed)
        mom = cell_moments(x["V"], x["T"], x["second"], x["gm"], [4])
        t, J2 = x["truth"], x["truth"]["grad_sq"]
        got["bias"].append(mom["bias_sq"][0] - t["bias_abs"] / J2)
        got["within"].append(mom["within"][0] - t["within"] / J2)
        got["between"].append(mom["between"][0] - t["between"] / J2)
        want = t["bias_abs"] / J2 + (t["within"] + t["between"]) / (4 * J2)
        got["mse4"].append(mom["by_B"][4]["rel_mse"][0] - want)
        assert mom["by_B"][4]["rel_mse"][0] == pytest.approx(mom["bias_sq"][0] + mom["by_B"][4]["var"][0], abs=1e-12)
        assert mom["group_var"][0] == pytest.approx(mom["within"][0] + mom["between"][0], abs=1e-12)
    for name, d in got.items():
        d = np.array(d)
        assert abs(d.mean()) <= 4 * d.std(ddof=1) / math.sqrt(len(d)), name


def test_the_law_is_the_mean_squared_error_of_simulated_batches():
    """E|g - grad J|^2 of batches of B groups (prompts from the population, groups independent) against
    bias^2 + (V_b + S_w / G) / B of the planted law, by direct simulation."""
    rng = np.random.default_rng(7)
    dim, B, n = 4, 5, 200000
    mu, grad, w = np.array([1.0, 0.5, 0.0, 0.2]), np.array([1.2, 0.0, 0.3, 0.2]), np.array([0.5, 1.0, 2.0, 0.1])
    m = mu + rng.normal(0, math.sqrt(0.5), (n, B, dim))
    g = (m + rng.normal(0, 1, (n, B, dim)) * np.sqrt(w)).mean(1)
    err = ((g - grad) ** 2).sum(1)
    want = ((mu - grad) ** 2).sum() + (0.5 * dim + w.sum()) / B
    assert abs(err.mean() - want) <= 4 * err.std(ddof=1) / math.sqrt(n)


# --------------------------------------------------------------------------- the batch simulation


def test_occurrence_ranks_and_group_indices():
    from studies.budget.pairs_moments import draw_batches, group_index, occurrence_ranks

    prompts = np.array([[3, 1, 3, 3, 0, 1], [2, 2, 2, 2, 2, 2]])
    assert occurrence_ranks(prompts).tolist() == [[0, 0, 1, 2, 0, 1], [0, 1, 2, 3, 4, 5]]
    P, R, Q, B = 4, 3, 2, 12
    d = draw_batches(P, R, B, 200, seed=1)
    idx = group_index(d, [0, 1, 2], R, Q, Q)
    for row in idx:  # every group of a batch distinct while a prompt repeats at most R Q times
        assert len(set(row.tolist())) == len(row) or max(np.bincount(row // (R * Q))) > R * Q
    left = group_index(d, [0, 2], R, Q, Q)
    assert not ((left // Q) % R == 1).any()  # the left-out replicate is never drawn
    assert ((group_index(d, [0, 1, 2], R, Q, 1) % Q) == 0).all()  # one kept slot: always slot 0


def test_a_batch_along_grad_j_has_cosine_one_and_equal_weights_share_one_over_bg():
    from studies.budget.pairs_moments import simulate

    P, R, Q, G = 4, 3, 2, 8
    direction = torch.tensor([3.0, 4.0])  # |grad J| = 5, every group's update grad J / 2 (exact in float32)
    U = direction.repeat(P, R, Q, 1) * 0.5
    stored = {"G": G, "amax": torch.full((P, R, Q), 0.5, dtype=torch.float64),
              "asum": torch.full((P, R, Q), 0.5 * G, dtype=torch.float64),
              "cmax": torch.full((P, R, Q), 1.0, dtype=torch.float64), "U": U,
              "norm2": torch.full((P, R, Q), 6.25, dtype=torch.float64),
              "dotT": torch.full((P, R, Q, R), 12.5, dtype=torch.float64)}
    out = simulate(stored, 6, R, seed=0, nb=50, grad_sq=lambda keep: 25.0)
    assert out["cos_mean"] == pytest.approx(1.0, abs=1e-12) and out["cos_neg_share"] == 0.0
    assert out["max_share"] == pytest.approx(1.0 / (6 * G), abs=1e-15)
    assert out["max_coef_share"] == pytest.approx(1.0 / (6 * G), abs=1e-15)
    assert out["zero_update_share"] == 0.0 and out["cos_mean_se"] == pytest.approx(0.0, abs=1e-12)


def test_the_equal_reward_share_is_the_chance_of_a_group_of_equal_rewards():
    from studies.budget.pairs_moments import equal_reward_share

    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 0.0], [0.0] * 7])
    G = 3
    want = np.mean([np.mean([len(set(row[list(s)].tolist())) == 1 for s in itertools.combinations(range(7), G)])
                    for row in rewards])
    assert equal_reward_share(rewards, G) == pytest.approx(want, abs=1e-12)


def test_warning_statistics_estimate_the_pool_s_chi2_at_every_g():
    from studies.budget.pairs_checks import warning_stats

    rng = np.random.default_rng(0)
    logw = torch.from_numpy(rng.normal(-0.25, math.sqrt(0.5), (3, 512)))
    rows = warning_stats(logw, 0.2, seed=1, Gs=(4, 16, 64), Ns=(128,), nb=1000)
    pool_chi2 = float(np.exp(2 * logw.numpy()).mean() - 1)
    for r in rows:
        if r["statistic"] == "chi2_pooled":  # groups drawn without replacement: unbiased for the pool's chi^2
            assert abs(r["mean"] - pool_chi2) <= 4 * r["se"], r
        elif r["statistic"] == "ess_frac":
            assert 1 / r["G"] <= r["q10"] <= r["q90"] <= 1
        elif r["statistic"] == "max_w_share":
            assert 1 / r["N"] <= r["q10"] <= r["q90"] <= 1
    assert {r["B"] * r["G"] for r in rows} == {128}


# --------------------------------------------------------------------------- one pair, end to end


def test_one_pair_on_a_small_pool_with_its_checks(small):
    from studies.budget.pairs import COLUMNS, compute, splits
    from studies.common.pairs import PAIRS

    ctx = {**small, "pair": PAIRS[0]}
    res = compute(ctx, R=4, mc_cells=(("gmc", 4), ("topr", 8)), log=lambda m: None)
    n = 16
    assert res["n_per_replicate"] == n
    cells = {(r["estimator"], r["B"], r["G"]) for r in res["rows"]}
    assert cells == {(e, B, G) for e in ESTIMATORS for B, G, _ in splits(n)}
    for r in res["rows"]:
        assert set(COLUMNS) - {"checks_passed"} <= set(r)  # checks_passed: the pair's, added as the csv is written
        assert r["rel_mse"] == pytest.approx(r["bias_sq"] + r["var"], abs=1e-12)
        assert r["var"] == pytest.approx(r["within"] + r["between"], abs=1e-12)
        # the cosine's numerator is taken against the targets' mean (unbiased, noisy), its denominator is the
        # unbiased |grad J|: it exceeds 1 only by the targets' noise, which its jackknife s.e. holds
        assert abs(r["cos_mean"]) <= 1 + 4 * r["cos_se"]
        assert 0 <= r["max_share"] and 0 <= r["max_coef_share"] <= 1 and 0 <= r["equal_reward_share"] <= 1
    is_bias = {r["bias_sq"] for r in res["rows"] if r["estimator"] == "is"}
    assert len(is_bias) == 1  # a per-sample correction's expected update does not depend on G
    c = res["checks"]
    assert c["is_unbiased"]["passed"], c["is_unbiased"]
    assert c["sketch"]["passed"], {k: v for k, v in c["sketch"].items() if k != "blocks"}
    assert [m["agrees"] for m in c["direct_mc"]] == [True, True], c["direct_mc"]
    assert {"gradient_pass", "cells", "checks", "coefficients", "target"} <= set(res["cost_s"])
    for est, e in res["summary"].items():  # the best split per budget is the row of the smallest rel_mse
        for N, best in e["best_split"].items():
            assert best["rel_mse"] == min(r["rel_mse"] for r in res["rows"] if r["estimator"] == est and r["N"] == N)
        assert all(math.isfinite(v) for v in e["S_w"].values())
    assert set(res["summary"]) == set(ESTIMATORS)


def test_a_pair_whose_on_policy_groups_all_have_equal_rewards_has_no_relative_terms(small):
    from studies.budget.pairs import compute
    from studies.common.pairs import PAIRS

    on = {**small["on"], "rewards": torch.zeros_like(small["on"]["rewards"])}
    res = compute({**small, "on": on, "pair": PAIRS[7]}, R=4, log=lambda m: None)
    assert res["target_zero"] and res["checks"] == {}
    for r in res["rows"]:
        assert math.isnan(r["rel_mse"]) and math.isnan(r["cos_mean"]) and not r["target_ok"]
        assert 0 <= r["max_share"] and 0 <= r["equal_reward_share"] <= 1


def test_splits_cover_every_power_of_two_split_of_the_three_budgets():
    from studies.budget.pairs import splits

    s = splits(128)
    assert len(s) == 17 and all(B * G == N and 2 <= B <= 128 and 2 <= G <= 128 for B, G, N in s)
    assert {N for _, _, N in s} == {64, 128, 512}
    assert max(G for _, G, _ in splits(16)) == 16


# --------------------------------------------------------------------------- the command


def test_the_command_keeps_a_measured_pair_and_refuses_a_foreign_file(tmp_path, monkeypatch, capsys):
    from studies.budget import pairs

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    calls = []

    def fake_compute(ctx, **kw):
        calls.append(ctx["pair"].name)
        row = {c: 0.0 for c in pairs.COLUMNS} | {"pair": ctx["pair"].name, "estimator": "gmc"}
        return {"pair": ctx["pair"].name, "rows": [row], "warning_rows": [], "checks": {"passed": True},
                "cost_s": {}}

    monkeypatch.setattr(pairs, "load_pools", lambda pair, cache, quick, log=print: {"pair": pair})
    monkeypatch.setattr(pairs, "compute", fake_compute)
    assert pairs.main(["--only", "p1", "--quick"]) == 0
    assert pairs.main(["--only", "p1", "--quick"]) == 0
    assert calls == ["p1"] and "measured already" in capsys.readouterr().out
    assert pairs.main(["--only", "p1", "--quick", "--redo"]) == 0
    assert calls == ["p1", "p1"]
    out = tmp_path / "cache" / "budget_pairs" / "quick"
    assert (out / "pairs.csv").read_text().startswith(",".join(pairs.COLUMNS))
    (out / "pairs.csv").unlink()
    assert pairs.main(["--quick", "--tables"]) == 0 and calls == ["p1", "p1"]  # the tables again, nothing measured
    assert (out / "pairs.csv").read_text().splitlines()[1].endswith(",True")  # checks_passed
    (out / "pairs.csv").write_text("somebody else's table\n")
    with pytest.raises(ValueError, match="not written by the toolkit"):
        pairs.main(["--only", "p2", "--quick"])
    assert pairs.main(["--only", "p9", "--quick"]) == 2
    assert pairs.main(["--only", "p1", "--quick", "--jobs", "0"]) == 2
    assert calls == ["p1", "p1"]


def _worker(name, quick):
    import os

    return {"pair": name, "quick": quick, "pid": os.getpid()}


def test_jobs_measure_pairs_in_worker_processes():
    import os

    from studies.budget.pairs import _measured

    got = list(_measured(["p1", "p2", "p3"], True, 2, worker=_worker))
    assert sorted(r["pair"] for r in got) == ["p1", "p2", "p3"] and all(r["quick"] for r in got)
    assert os.getpid() not in {r["pid"] for r in got}
    assert [r["pid"] for r in _measured(["p1"], True, 1, worker=_worker)] == [os.getpid()]


def test_a_missing_committed_run_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    from schema.results import MissingResults
    from studies.budget import pairs

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))

    def missing(pair, cache, quick, log=print):
        raise MissingResults(f"pair {pair.name}: 5 of its 5 committed runs are missing")

    monkeypatch.setattr(pairs, "load_pools", missing)
    assert pairs.main(["--only", "p3", "--quick"]) == 2
    assert "error: pair p3: 5 of its 5 committed runs are missing" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "budget_pairs" / "quick" / "pairs.json").exists()
