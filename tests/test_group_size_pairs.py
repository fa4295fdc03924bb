"""The group-size pairs' measurement (studies.common.pool, studies.group_size.pairs): sampled group coefficients
against their exact expectation, per-completion gradients, gate B, a pair whose target is zero, and the pairs
command refusing an empty request or a missing run before any work, each pair choosing among its grid's seeds."""
from __future__ import annotations

import math

import numpy as np
import pytest


def _replicate(P=3, n=16, T=5, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, None] < torch.randint(2, T + 1, (P, n, 1), generator=g)).double()
    blogp = -torch.rand(P, n, T, generator=g, dtype=torch.float64) * mask
    logp = (blogp + 0.3 * torch.randn(P, n, T, generator=g, dtype=torch.float64)) * mask
    rewards = (torch.rand(P, n, generator=g) < 0.5).double()
    return logp, blogp, mask, rewards


def test_sampled_group_coefficients_average_to_the_exact_expectation_for_per_sample_corrections():
    from studies.common.pool import coefficients

    logp, blogp, mask, rewards = _replicate()
    for est in ("is", "tic_trunc"):
        exact = coefficients(est, 16, logp, blogp, mask, rewards, 0.2, np.random.default_rng(0), exact=True)
        runs = np.stack([coefficients(est, 4, logp, blogp, mask, rewards, 0.2, np.random.default_rng(s)).numpy()
                         for s in range(40)])
        se = runs.std(0, ddof=1) / math.sqrt(len(runs))
        assert np.all(np.abs(runs.mean(0) - exact.numpy()) <= 4 * se + 1e-12), est


def test_gmc_coefficients_equal_is_where_no_cap_binds_and_shrink_where_it_does():
    from studies.common.pool import coefficients

    logp, blogp, mask, rewards = _replicate()
    c_is = coefficients("is", 4, logp * 0 + blogp, blogp, mask, rewards, 0.2, np.random.default_rng(0))
    c_gmc = coefficients("gmc", 4, logp * 0 + blogp, blogp, mask, rewards, 0.2, np.random.default_rng(0))
    assert np.array_equal(c_is.numpy(), c_gmc.numpy())  # every ratio 1: lambda = 1
    big = coefficients("gmc", 4, logp + 1.0 * mask, blogp, mask, rewards, 0.2, np.random.default_rng(0))
    ref = coefficients("is", 4, logp + 1.0 * mask, blogp, mask, rewards, 0.2, np.random.default_rng(0))
    assert float(big.abs().sum()) < float(ref.abs().sum())


def test_a_pool_too_small_for_g_is_refused():
    from studies.common.pool import coefficients

    logp, blogp, mask, rewards = _replicate(n=16)
    with pytest.raises(ValueError, match="too small for G = 32"):
        coefficients("gmc", 32, logp, blogp, mask, rewards, 0.2, np.random.default_rng(0))


def test_the_on_policy_target_coefficients_are_leave_one_out():
    import torch

    from studies.common.pool import loo_target

    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert np.allclose(loo_target(r).numpy(), [[(1 - 1 / 3) / 4, (0 - 2 / 3) / 4, (0 - 2 / 3) / 4, (1 - 1 / 3) / 4]])


def test_per_completion_gradients_give_the_same_update_vectors_as_backward_passes():
    import torch

    from llm_runs.presets import load_pretrained
    from llm_runs.reference import committed_config
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import default_max_new_tokens, get_warm_start
    from studies.common.pool import per_sample_vectors, pool_prompts, sample_pool, update_vectors

    cfg = committed_config("long")
    task = build_task(cfg)
    model, tok = load_pretrained(get_warm_start(cfg, task, lambda m: None).path, cfg.dtype, cfg.device)
    model.eval()
    pool = sample_pool(model, tok, task, pool_prompts(task)[:2], 8, 0, default_max_new_tokens(cfg, task), chunk=8)
    coefs = torch.randn(3, 2, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = update_vectors(model, pool, slice(1, 7), coefs)
    b = per_sample_vectors(model, pool, slice(1, 7), coefs, chunk=4)
    assert a.shape == b.shape
    assert float((a - b).norm() / a.norm()) < 1e-5


def test_gate_b_passes_a_correct_sampler_and_fails_a_biased_one():
    from studies.common.pool import coefficients, mc_agreement

    logp, blogp, mask, rewards = _replicate(P=4, n=32)
    sampled, exact, biased = [], [], []
    for s in range(4):
        rng = np.random.default_rng(s)
        e = coefficients("tic_trunc", 32, logp, blogp, mask, rewards, 0.2, rng, exact=True)
        c = coefficients("tic_trunc", 4, logp, blogp, mask, rewards, 0.2, rng, halves=True)
        sampled.append(c)
        exact.append(e)
        biased.append(tuple(x * 1.1 for x in c))  # a sampler whose average is 10% off
    assert abs(mc_agreement(sampled, exact)["z"]) < 4
    assert abs(mc_agreement(biased, exact)["z"]) > 4


def test_gate_b_at_the_whole_replicate_compares_up_to_rounding():
    from studies.common.pool import coefficients, mc_agreement

    logp, blogp, mask, rewards = _replicate(P=2, n=8)
    e = coefficients("is", 8, logp, blogp, mask, rewards, 0.2, np.random.default_rng(0), exact=True)
    c = coefficients("is", 8, logp, blogp, mask, rewards, 0.2, np.random.default_rng(0), halves=True)
    assert float((c[1] - c[2]).norm()) <= 1e-9 * float(c[1].norm())
    assert mc_agreement([c], [e])["z"] == 0.0
    assert mc_agreement([tuple(x * 1.001 for x in c)], [e])["z"] == math.inf


def test_a_pair_whose_target_is_zero_is_a_failed_measurement_not_a_crash():
    import torch

    from studies.common.pool import cross_norm, relative_bias
    from studies.group_size.pairs import gate_table

    T = torch.zeros(8, 5)  # every on-policy group had equal rewards: no gradient
    V = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    rb, se, cos, ratio = relative_bias(V - T, T, V)
    assert all(math.isnan(x) for x in (rb, se, cos, ratio))
    rows = [{"estimator": "is", "G": 2, "rel_bias_sq": rb, "se": se}]
    gates = gate_table(rows, {}, *cross_norm(T))
    assert not gates["passed"] and "no gradient to measure a bias against" in gates["failed"]
    ok = gate_table([{"estimator": "is", "G": 2, "rel_bias_sq": 0.01, "se": 0.02}], {}, 1.0, 0.1)
    assert ok["passed"] and "failed" not in ok


def _planted_runs(root, grid_rel, names):
    """Run folders the pairs' chooser lists (config.json and a metrics table), nothing more."""
    for n in names:
        run = root / grid_rel / n
        run.mkdir(parents=True)
        (run / "config.json").write_text('{"config": {}}')
        (run / "metrics.csv").write_text("step\n0\n")


P1_RUNS = [f"long-adamclip1e-05-gmc-d64-s{s}" for s in range(5)]


@pytest.mark.parametrize(("argv", "planted", "message"), [
    (["--only"], [], r"argument --only: expected at least one argument"),
    (["--only", "p1"], [], (r"pair p1: 5 of its 5 committed runs are missing: "
                            r"\S*/llm/drift/long-adamclip1e-05-gmc-d64-s0, \S*-s1, \S*-s2, \.\.\. .*"
                            r"make them with `python -m studies.run --grid drift`")),
    (["--only", "p1"], [n for n in P1_RUNS if not n.endswith("s2")],
     (r"pair p1: 1 of its 5 committed runs are missing: \S*/llm/drift/long-adamclip1e-05-gmc-d64-s2 .*"
      r"`python -m studies.run --grid drift`")),
    (["--only", "p2", "p6"], [], r"pair p2: .*`python -m studies.run --grid drift`"),
    (["--only", "p6"], [], r"pair p6: .*/llm/study/long-gmc-d64-s0.*make them with `python -m studies.run`$"),
    (["--only", "p1"], "torn", r"pairs.json: .*JSON|pairs.json is not a pairs file"),
])
def test_the_pairs_command_refuses_an_empty_request_or_a_missing_run_before_any_work(tmp_path, monkeypatch, capsys,
                                                                                    argv, planted, message):
    """`--only` with no names is argparse's refusal (not every pair: hours); a committed run the pair chooses
    among that is missing is one line naming its folder and the command that makes it; a torn pairs.json is
    named. Nothing is measured, and no cache is made."""
    import re

    from studies.group_size.pairs import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    if planted == "torn":
        _planted_runs(tmp_path, "llm/drift", P1_RUNS)
        (tmp_path / "llm" / "group_size").mkdir(parents=True)
        (tmp_path / "llm" / "group_size" / "pairs.json").write_text('{"format": "gmc-grpo-group-size-pairs/1", "pa')
    else:
        _planted_runs(tmp_path, "llm/drift", planted)
    if argv == ["--only"]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        rc = e.value.code
    else:
        rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and re.search(message, err[-1]), err
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "cache").exists()


def test_each_pair_chooses_among_the_seeds_its_grid_plans():
    from studies.common.pairs import PAIRS
    from studies.grids import GRIDS

    for pair in PAIRS:
        planned = sorted(c.seed for c in GRIDS[pair.grid].cells() if c.name.startswith(pair.run_prefix + "-s"))
        assert planned == list(pair.seeds), pair.name


def test_a_second_pairs_measurement_at_once_is_refused_naming_the_first_ones_pid(tmp_path, monkeypatch, capsys):
    """While another process holds the pairs' cache (a measurement under way), the command is one line naming
    that process, and measures and writes nothing."""
    from _run_folders import _lock_held

    from studies.group_size.pairs import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    _planted_runs(tmp_path, "llm/drift", P1_RUNS)
    cache = tmp_path / "cache" / "group_size_pairs"
    cache.mkdir(parents=True)
    with _lock_held(cache) as holder:
        assert main(["--only", "p1", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and f"pid {holder.pid}" in err[-1] and "Traceback" not in "\n".join(err), err
    assert not (cache / "quick" / "pairs.json").exists() and not (cache / "p1").exists()
