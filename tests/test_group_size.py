"""The group-size study's grid and decision rules: the iso-samples refusal, the cross-product bias
estimator against a planted bias, G_half's interpolation and censoring, G3's slope test."""
from __future__ import annotations

import math

import numpy as np
import pytest

from studies.group_size.analysis import cross_bias, g_half, one_sided_drop, slope_test
from studies.group_size.grids import GRIDS, GROUP_SIZES, ISO_SAMPLES, group


def test_every_cell_samples_the_same_number_of_completions():
    for grid in GRIDS.values():
        for c in grid.cells():
            G, B = c.overrides["group_size"], c.overrides["prompts_per_step"]
            assert G * B == ISO_SAMPLES or (G, B) == (32, 16), c.name
    sizes = {c.overrides["group_size"] for c in GRIDS["group_size"].cells()}
    assert sizes == set(GROUP_SIZES)


@pytest.mark.parametrize("bad", [3, 5, 48, 256, 1, 0, -4, 2.0, True, "8"])
def test_a_group_size_that_does_not_divide_the_budget_is_refused(bad):
    with pytest.raises(ValueError, match="iso-samples budget") as e:
        group(bad)
    assert repr(bad) in str(e.value)


def test_cross_product_bias_is_unbiased_for_a_planted_bias():
    rng = np.random.default_rng(0)
    P, R, reps = 400, 8, 400
    target = rng.normal(size=P)
    bias = 0.3 * rng.normal(size=P)
    true = float(bias @ bias / (target @ target))
    est = [cross_bias(target + bias + rng.normal(scale=2.0, size=(R, P)), target) for _ in range(reps)]
    vals = np.array([e[0] for e in est])
    se_mean = vals.std(ddof=1) / math.sqrt(reps)
    assert abs(vals.mean() - true) < 4 * se_mean
    # the plug-in norm of one noisy mean is far above the truth: the reason for cross-products
    plug = float(((target + bias + rng.normal(scale=2.0, size=(R, P)).mean(0) - target) ** 2).sum() / (target @ target))
    assert plug > true + 10 * se_mean
    # the jackknife error is about the spread of the estimates
    assert 0.5 < np.mean([e[1] for e in est]) / vals.std(ddof=1) < 2.0


def test_g_half_interpolates_and_censors():
    Gs = [2, 4, 8, 16]
    assert g_half(Gs, [0.4, 0.3, 0.2, 0.1]) == (2.0, "left")
    assert g_half(Gs, [0.9, 0.8, 0.7, 0.6]) == (16.0, "right")
    G, cens = g_half(Gs, [1.0, 0.25, 0.1, 0.05])
    assert cens is None and 2 < G < 4
    assert math.isclose(math.log(G), math.log(2) + math.log(2) * (math.log(1.0) - math.log(0.5))
                        / (math.log(1.0) - math.log(0.25)))
    assert g_half(Gs, [1.0, -0.01, 0.1, 0.05]) == (4.0, None)


def test_slope_test_decides_by_its_rule():
    Gs = GROUP_SIZES
    rise = np.array([[0, 0, 1, 1]] * 10, float)
    flat = np.ones((10, 4))
    assert slope_test(rise, flat, Gs, n_boot=500)["verdict"] == "CONFIRMED"
    assert slope_test(flat * 0, flat, Gs, n_boot=500)["verdict"] == "REFUTED"
    assert slope_test(rise, rise, Gs, n_boot=500)["verdict"] == "REFUTED"
    rng = np.random.default_rng(1)
    noisy = (rng.random((10, 4)) < [0.4, 0.45, 0.5, 0.55]).astype(float)
    assert slope_test(noisy, flat * 0.0 + (rng.random((10, 4)) < 0.5), Gs, n_boot=500)["verdict"] in (
        "INCONCLUSIVE", "REFUTED")
    with pytest.raises(ValueError, match="must both be"):
        slope_test(rise[:, :3], flat, Gs)


def test_one_sided_drop():
    r = one_sided_drop(0.5, 0.1, 0.1, 0.1)
    assert r["p"] < 0.01 and r["drop"] == pytest.approx(0.4)
    assert one_sided_drop(0.1, 0.1, 0.5, 0.1)["p"] > 0.99


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


def _pairs_doc(gmc_by_pair, ess=0.9, passed=True, cap=0.3):
    """Pair documents whose GMC rel_bias_sq follows ``gmc_by_pair[p](G)`` (s.e. 0.01), TIC-trunc's 1.0."""
    Gs = (2, 4, 8, 16, 32, 64, 128)
    doc = {"pairs": {}}
    for i, f in enumerate(gmc_by_pair, 1):
        rows = [{"estimator": "gmc", "G": G, "rel_bias_sq": f(G), "se": 0.01, "cap_share": cap} for G in Gs]
        rows += [{"estimator": "tic_trunc", "G": G, "rel_bias_sq": 1.0, "se": 0.01, "cap_share": cap} for G in Gs]
        doc["pairs"][f"p{i}"] = {"rows": rows, "gates": {"passed": passed}, "drift_ess": ess, "drift_chi2": 0.5 * i}
    return doc


def test_g1_and_g2_decide_by_their_rules():
    from studies.group_size.analysis import g1, g2

    falling = [lambda G: 1.0 / G**2] * 8
    assert g1(_pairs_doc(falling))["verdict"] == "CONFIRMED"
    rising = [lambda G: 0.001 * G] * 8
    assert g1(_pairs_doc(rising))["verdict"] == "REFUTED"
    assert g1(_pairs_doc(falling, passed=False))["verdict"] == "INCONCLUSIVE"
    assert "not yet run" in g1({"pairs": {}})["why"]
    # G_half = c * chi2^0.5 planted: ratio(G) = (G_half / G)^2 crosses 1/2 at G = sqrt(2) G_half
    def law(c):
        return lambda G: min(1.0, (c / G) ** 2)

    laws = [law(2 * math.sqrt(0.5 * i)) for i in range(1, 9)]
    r = g2(_pairs_doc(laws), predicted_b=0.5)
    assert r["verdict"] == "CONFIRMED" and abs(r["law"]["b"] - 0.5) < 0.05
    assert g2(_pairs_doc(laws), predicted_b=2.0)["verdict"] == "REFUTED"


def _rec(est, G, seed, delay=64, stable=True, pc=0.6, level="adamclip0.0001"):
    return {"run": f"{level}-{est}-G{G}-s{seed}", "estimator": est, "seed": seed, "delay": delay, "G": G, "B": 128 // G,
            "fixed_prompts": False, "level": level, "stable": stable, "pc_final": pc, "pc0": 0.5, "t_collapse": None,
            "collapsed": not stable, "kl_all": 0.05, "kl_pre": 0.05, "pre_updates": 20, "d5": None}


def test_g5_reads_the_zero_delay_control_with_its_margin():
    from studies.group_size.grid_verdicts import g5

    recs = [_rec("gmc", G, s, delay=0, pc=0.7 + 0.001 * s) for G in (4, 8, 16, 32) for s in range(5)]
    assert g5(recs)["verdict"] == "CONFIRMED"
    shifted = [dict(r, pc_final=r["pc_final"] + (0.2 if r["G"] == 32 else 0)) for r in recs]
    assert g5(shifted)["verdict"] == "REFUTED"
    assert "not yet run" in g5(recs[:-1])["why"]


def test_g3_needs_every_seed_and_reads_the_outcomes():
    from studies.group_size.grid_verdicts import g3

    recs = [_rec(e, G, s, stable=(e == "tic_trunc" or G >= 16)) for e in ("gmc", "tic_trunc")
            for G in (4, 8, 16, 32) for s in range(10)]
    assert g3(recs)["verdict"] == "CONFIRMED"
    assert "not yet run" in g3(recs[1:])["why"]


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


def test_a_g8_cell_finds_the_committed_drift_map_run_with_its_settings():
    from studies.group_size.grid_verdicts import committed_counterpart

    assert committed_counterpart("long-adamclip0.0001_G8-gmc-d64-s3").parts[-2:] == ("mechanism",
                                                                                      "long-adamclip-gmc-d64-s3")
    assert committed_counterpart("long-adamclip3e-05_G8-topr-d64-s1").name == "long-adamclip3e-05-topr-d64-s1"
    assert committed_counterpart("long-adamclip3e-05_G4-topr-d64-s1") is None
    assert committed_counterpart("long-adamclip5.5e-05_G8-gmc-d64-s0") is None  # a level the map did not run


def test_the_g8_check_reads_the_packed_grid_s_runs(monkeypatch):
    """Once the grid is packed its runs have no folders: the G = 8 cells are still found, finished, and
    compared with their committed drift-map runs (a packed grid must not empty the check)."""
    import schema.results
    from grids import grid_folder
    from schema.results import is_packed_run
    from studies.group_size.grid_verdicts import g8_against_committed

    folder = grid_folder("group_size")
    picked = [folder / "long-adamclip3e-05_G8-gmc-d64-s0", folder / "long-adamclip3e-05_G4-gmc-d64-s0"]
    assert all(is_packed_run(p) for p in picked)
    monkeypatch.setattr(schema.results, "run_folders", lambda root: picked)
    out = g8_against_committed(folder)
    assert [(r["run"], r["committed"], r["identical"]) for r in out] == [
        (picked[0].name, "drift/long-adamclip3e-05-gmc-d64-s0", True)]


def test_claim_24_reads_the_pairs_file_through_g1_and_names_the_failing_pair(tmp_path):
    import json

    from claims.llm_pairs import check_24
    from claims.registry import Claim

    falling = [lambda G: 1.0 / G**2] * 8
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(_pairs_doc(falling)))
    assert check_24(path=path).status == "PASS"
    # p6's GMC bias rises with G: the claim fails there, and the ledger's point names p6
    rising = list(falling)
    rising[5] = lambda G: 0.001 * G
    path.write_text(json.dumps(_pairs_doc(rising)))
    res = check_24(path=path)
    assert res.status == "FAIL" and res.refuted_at[0]["point"].startswith("p6 (gmc no drop")
    assert res.refuted_at[0]["values"]["gmc rel_bias_sq G=128"] == 0.128
    # clipping's bias vanishing at some G fails the second part, with GMC's law intact
    doc = _pairs_doc(falling)
    for r in doc["pairs"]["p3"]["rows"]:
        if r["estimator"] == "tic_trunc":
            r["rel_bias_sq"] = 0.015
    path.write_text(json.dumps(doc))
    res = check_24(path=path)
    assert res.status == "FAIL" and res.refuted_at[0]["point"] == "p3 (tic_trunc 0)"
    # fewer than the eight pre-registered pairs: an ERROR through the registry, never a PASS
    doc["pairs"].pop("p8")
    path.write_text(json.dumps(doc))
    claim = Claim(24, "t", "t", "numeric", type("M", (), {"check_24": staticmethod(lambda q: check_24(q, path))}))
    out = claim.result()
    assert out.status == "ERROR" and "p8 not measured" in out.evidence


def test_f26_draws_the_boundaries_and_the_g3_cell_as_the_verdicts_file_holds_them():
    import matplotlib.pyplot as plt

    from figures import style
    from studies.group_size.figures import f26_boundary_vs_g as f26

    v = {"runs": 40, "G3": {"why": "not yet run: G3"}, "G4": {"verdict": "INCONCLUSIVE"},
         "boundaries": [{"estimator": e, "G": G, "seeds": [0, 1], "boundary": b * G, "censored": None if e == "gmc"
                         else "right"} for e, b in (("gmc", 0.001), ("tic_trunc", 0.002)) for G in (4, 8, 16, 32)],
         "cells": [{"level": f26.G3_LEVEL, "G": G, "B": 128 // G, "estimator": "gmc", "n": 5,
                    "stable_share": s} for G, s in ((4, 0.0), (8, 0.2), (16, 0.6), (32, 1.0))]
         + [{"level": "adamclip3e-05", "G": 4, "B": 32, "estimator": "gmc", "n": 5, "stable_share": 0.4}]}
    fig = f26.plot(f26.with_share_intervals(v))
    lines = {ln.get_gid(): ln for ln in style.series_lines(fig)}
    assert set(lines) == {"series:boundary:gmc", "series:boundary:tic_trunc", "series:stable-share:gmc"}
    np.testing.assert_allclose(lines["series:boundary:gmc"].get_ydata(), [0.004, 0.008, 0.016, 0.032])
    np.testing.assert_allclose(lines["series:stable-share:gmc"].get_ydata(), [0.0, 0.2, 0.6, 1.0])  # G3's level only
    assert "2 at 8 boundaries" in fig._suptitle.get_text()
    assert "provisional: G3 not yet decided" in f26.caption(v)
    plt.close(fig)


def test_f26_share_intervals_are_clopper_pearson_from_scipy():
    """with_share_intervals: each cell's exact binomial 95% interval, here 3 of 5 runs, against the
    Clopper-Pearson bounds as beta quantiles (scipy.stats.beta; float64 root-finding agrees to 1e-9)."""
    from scipy import stats as st

    from studies.group_size.figures import f26_boundary_vs_g as f26

    v = {"runs": 5, "cells": [{"level": f26.G3_LEVEL, "G": 4, "B": 32, "estimator": "gmc", "n": 5,
                               "stable_share": 0.6}]}
    c = f26.with_share_intervals(v)["cells"][0]
    assert c["share_low"] == pytest.approx(st.beta.ppf(0.025, 3, 3), rel=1e-9)
    assert c["share_high"] == pytest.approx(st.beta.ppf(0.975, 4, 2), rel=1e-9)
    assert "share_low" not in v["cells"][0]  # the verdicts read are left as they are


def test_claim_26_confirms_a_planted_law_with_the_predicted_exponent_and_records_another_as_refuted(tmp_path):
    import json

    from claims.llm_pairs import check_26

    def law(c):
        return lambda G: min(1.0, (c / G) ** 2)

    path, pred = tmp_path / "pairs.json", tmp_path / "predictions.json"
    path.write_text(json.dumps(_pairs_doc([law(2 * math.sqrt(0.5 * i)) for i in range(1, 9)])))  # b = 0.5 planted
    pred.write_text(json.dumps({"lognormal": {"law": {"b": 0.5, "low": 0.3, "high": 0.7}}}))
    assert check_26(path=path, predictions=pred).status == "PASS"
    pred.write_text(json.dumps({"lognormal": {"law": {"b": 2.0, "low": 1.8, "high": 2.2}}}))
    res = check_26(path=path, predictions=pred)
    assert res.status == "FAIL" and res.refuted_at[0]["point"] == "the LLM pairs (8 uncensored)"
    assert res.refuted_at[0]["values"]["E3 b"] == 2.0 and abs(res.refuted_at[0]["values"]["LLM b"] - 0.5) < 0.05


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


def test_the_report_rows_give_every_decided_hypothesis_its_numbers():
    """An INCONCLUSIVE or REFUTED verdict is shown with the numbers that decided it, not an empty cell; a
    hypothesis not yet run shows why."""
    from studies.report.sections.group_size import verdict_rows

    end = {"boundary": 0.05, "censored": "right"}
    v = {"G3": {"verdict": "INCONCLUSIVE", "why": "not yet run: seeds 0-9"},
         "G4": {"verdict": "INCONCLUSIVE", "gmc": {"G4": end, "G32": {"boundary": 0.04, "censored": None},
                                                    "difference": -0.01, "ci": [-0.03, 0.02]}},
         "G5": {"verdict": "INCONCLUSIVE", "margin": 0.03, "per_G": {"32": {"mean": -0.08, "ci": [-0.15, -0.02]}}},
         "G7": {"verdict": "EXPLORATORY", "corrections": {"gmc": {"slope": None}, "tic_mask": {"slope": -0.77}}}}
    rows = {r.split(" | ")[0].strip("| "): r for r in verdict_rows(v)[2:]}
    assert "not yet run: seeds 0-9" in rows["G3"]
    assert "G = 4 0.05 (right-censored), G = 32 0.04; G = 32 - G = 4: -0.01 [-0.03, 0.02]" in rows["G4"]
    assert "G = 32 -0.08 [-0.15, -0.02] (margin 0.03)" in rows["G5"]
    assert "tic_mask -0.77" in rows["G7"] and "gmc" not in rows["G7"]
    assert rows["G1"].endswith("| n/a |  |")  # no verdict at all: nothing invented


def test_the_narrative_words_g3_s_cells_once_it_is_decided():
    from studies.report.findings import _g3_line

    assert _g3_line({"G3": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == ""
    v = {"G3": {"verdict": "REFUTED", "seeds": 10, "shares_gmc": [0.5, 0.2, 0.2, 0.0],
                "shares_tic_trunc": [1.0, 0.7, 0.6, 0.5], "slope_gmc": -0.15, "slope_gmc_ci": [-0.26, -0.04]},
         "cells": [{"estimator": "gmc", "level": "adamclip0.0001", "G": 32, "B": 16, "n": 5, "stable_share": 1.0},
                   {"estimator": "gmc", "level": "adamclip0.0001", "G": 32, "B": 4, "n": 10, "stable_share": 0.0}]}
    line = _g3_line(v)
    assert "GMC held in 5, 2, 2, 0 of 10 runs at G = 4, 8, 16, 32 and TIC-trunc in 10, 7, 6, 5" in line
    assert "[-0.26, -0.04]" in line and line.endswith("GMC held in 5 of 5")


def test_the_report_reads_g3_and_g4_as_the_g5_rule_allows():
    """Only a CONFIRMED G5 lets G3's and G4's differences be read as staleness effects (the pre-registration's
    rule); otherwise the report says the group size changes learning at d = 0 too."""
    from studies.report.sections.group_size import g5_reading

    assert g5_reading({"G5": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == []
    held = {"4": [5, 5], "32": [5, 5]}
    text = g5_reading({"G5": {"verdict": "INCONCLUSIVE", "per_G": {}, "d0_held": held}})[0]
    assert "not read as staleness effects alone" in text and "5 of 5 at G = 4, 5 of 5 at G = 32" in text
    assert "read as staleness effects." in g5_reading({"G5": {"verdict": "CONFIRMED", "per_G": {}}})[0]


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
