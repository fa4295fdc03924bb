"""The group-size study's grid and decision rules: the iso-samples refusal, the cross-product bias estimator
against a planted bias, G_half's interpolation and censoring, G3's slope test, G1-G5 on constructed inputs, the
G = 8 cells against their committed drift-map runs, and claims 24 and 26 read through them."""
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
