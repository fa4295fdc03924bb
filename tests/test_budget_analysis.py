"""The budget study's decision rules (studies.budget.rules) on constructed inputs, the verdicts read from a planted
design (studies.budget.analysis), and the recommender's answers and refusals (studies.budget.recommend)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from studies.budget import analysis, recommend, rules
from studies.budget.grids import splits

CELLS = splits()


def table(fn):
    return {c: np.array([fn(c, s) for s in range(5)], float) for c in CELLS}


def test_b1_confirms_a_rise_with_G_and_refutes_a_fall():
    up = rules.b1(table(lambda c, s: float(c[1] >= 8)), n_boot=2000)
    assert up["slope"] > 0 and up["ci"][0] > 0 and up["p"] == 0.0 and up["extra_ok"] and not up["refuted"]
    down = rules.b1(table(lambda c, s: float(c[1] <= 8)), n_boot=2000)
    assert down["slope"] < 0 and down["refuted"]
    assert rules.verdicts({"B1": up, "B2": None}) == {"B1": "CONFIRMED", "B2": "not yet run"}
    assert rules.verdicts({"B1": down})["B1"] == "REFUTED"


def test_b2_needs_gmc_rising_with_B_and_topr_flat():
    gmc = table(lambda c, s: float(c[0] >= 16 or (c[0] == 8 and s < 3)))
    flat = table(lambda c, s: 1.0)
    r = rules.b2(gmc, flat, n_boot=2000)
    assert r["slope_gmc"] > 0 and r["ci_topr"] == [0.0, 0.0] and r["extra_ok"]
    steep = table(lambda c, s: float(c[0] >= 16))  # TOPR rising with B as steeply as GMC: not flat
    r2 = rules.b2(gmc, steep, n_boot=2000)
    assert r2["ci_topr"][0] > rules.FLAT and r2["refuted"] and not r2["extra_ok"]


def test_b3_is_testable_only_where_gmc_does_not_learn():
    mech = {(4, 32): None, (4, 16): None}
    gmc = {c: np.zeros(5) for c in mech}
    cap = {2.0: {c: np.ones(5) for c in mech}, 4.0: {c: np.array([1, 0, 0, 0, 0.0]) for c in mech}}
    r = rules.b3(cap, gmc, n_boot=2000)
    assert r["testable"] and r["best_kappa"] == "2.0" and r["per_kappa"]["2.0"]["difference"] == 1.0 and r["extra_ok"]
    r2 = rules.b3(cap, {c: np.ones(5) for c in mech}, n_boot=2000)
    assert not r2["testable"] and not r2["extra_ok"] and not r2["refuted"]
    r3 = rules.b3({2.0: gmc, 4.0: gmc}, gmc, n_boot=2000)
    assert r3["refuted"]


def test_b4_confirms_N_only_and_refutes_a_split_effect():
    rng = np.random.default_rng(4)
    noise = {c: rng.normal(0, 0.002, 5) for c in CELLS}
    same = rules.b4({c: 0.6 + noise[c] for c in CELLS}, n_boot=2000)
    assert same["extra_ok"] and same["p"] < 0.01 and not same["refuted"]
    split = rules.b4({c: 0.6 - 0.05 * math.log2(c[1]) + noise[c] for c in CELLS}, n_boot=2000)
    assert split["refuted"] and split["slope"] == pytest.approx(-0.05, abs=0.01)


def test_b5_rank_correlation_within_strata():
    mse = {("gmc", 128): {(4, 32): 4.0, (8, 16): 3.0, (16, 8): 2.0, (32, 4): 1.0},
           ("topr", 64): {(4, 16): 1.0, (8, 8): 2.0, (16, 4): 3.0}}
    agree = {("gmc", 128): {(4, 32): 0.0, (8, 16): 0.2, (16, 8): 0.4, (32, 4): 0.8},
             ("topr", 64): {(4, 16): 1.0, (8, 8): 0.6, (16, 4): 0.2}}
    r = rules.b5(mse, agree, n_perm=2000)
    assert r["rho"] == pytest.approx(1.0) and r["strata"] == 2 and r["p"] < 0.05 and r["extra_ok"]
    reverse = {k: {c: 1 - v for c, v in d.items()} for k, d in agree.items()}
    assert rules.b5(mse, reverse, n_perm=200)["refuted"]
    const = {k: {c: 1.0 for c in d} for k, d in agree.items()}  # every split learned: left out, unless tie-broken
    assert math.isnan(rules.within_rho(mse, const)[0])
    assert rules.within_rho(mse, const, agree)[0] == pytest.approx(1.0)


def fake_reader(learned_gmc=lambda B, G: G >= 8):
    """A planted outcome per run of the design (looked up by its folder): gmc learns per ``learned_gmc``, topr and
    gmc_cap always, tic_trunc and is in seeds 0-1; the d = 0 controls' final pc does not depend on the split."""
    from studies.budget.plan import plan_rows

    cells = {r["run"]: r["cell"] for r in plan_rows()}

    def read(run):
        c = cells[run]
        B, G, s = c.overrides["prompts_per_step"], c.overrides["group_size"], c.seed
        if c.delay == 0:
            return {"finished": True, "collapsed": False, "stable": True, "pc0": 0.5, "pc_final": 0.6 + 0.001 * s}
        ok = {"gmc": learned_gmc(B, G), "topr": True, "gmc_cap": True}.get(c.estimator, s < 2)
        return {"finished": True, "collapsed": not ok, "stable": ok, "pc0": 0.5, "pc_final": 0.6 if ok else 0.1}
    return read


def test_the_verdicts_from_a_planted_design_and_not_yet_run():
    assert analysis.MARGIN == __import__("grids.run_table", fromlist=["MARGIN"]).MARGIN
    doc = analysis.verdicts(analysis.design_runs(fake_reader()), None)
    assert doc["runs"] == {"design": 415, "finished": 415}
    v = doc["verdicts"]
    assert v["B1"] == "CONFIRMED" and v["B2"] == "REFUTED" and v["B4"] == "CONFIRMED" and v["B5"] == "not yet run"
    assert v["B3"] == "INCONCLUSIVE" and doc["records"]["B3"]["testable"] is False  # gmc learned at (4, 32), (4, 16)
    empty = analysis.verdicts(analysis.design_runs(lambda run: None), None)
    assert set(empty["verdicts"].values()) == {"not yet run"} and empty["runs"]["finished"] == 0
    assert empty["missing"]["B1"] == 75 and empty["missing"]["B5"] == "the pair table"  # 15 cells x 5 seeds


def test_the_recommender_refuses_outside_the_measured_range():
    with pytest.raises(recommend.OutOfRange, match=r"N = 4096 .* outside the measured range.*N = 512: 16 prompts x "
                                                   r"G = 32, 32 prompts x G = 16"):
        recommend.check_question(4096, 64, None)
    with pytest.raises(recommend.OutOfRange, match="N = 100 .* not a measured budget.*N = 128"):
        recommend.check_question(100, 64, None)
    with pytest.raises(recommend.OutOfRange, match="delay 32 was not measured.*0 and 64"):
        recommend.check_question(128, 32, None)
    with pytest.raises(recommend.OutOfRange, match="gspo was not measured on the budget grid"):
        recommend.check_question(128, 64, "gspo")
    with pytest.raises(ValueError, match="unknown correction 'nope'"):
        recommend.check_question(128, 64, "nope")
    with pytest.raises(ValueError, match="--samples must be a positive"):
        recommend.check_question(0, 64, None)
    assert recommend.main(["--samples", "4096", "--delay", "64"]) == 2


def test_the_recommender_answers_from_the_cells_or_says_it_answers_from_theory():
    text = recommend.answer(128, 64, None, read=fake_reader())
    first = text.splitlines()[0]
    assert first.startswith("N = 128 samples per update, delay 64: ") and "(learned in 5 of 5 seeds" in first
    assert "measured cells" in text and "§9" in text and "the intervals do not separate it from" in text
    assert re.search(r"tic_trunc\s+32 x 4 : learned 2/5", text)  # planted: learned in seeds 0-1
    gmc = recommend.answer(128, 64, "gmc", read=fake_reader(lambda B, G: B >= 16))
    assert re.match(r"N = 128 .*, gmc: (16|32) prompts x G = (8|4) with gmc \(learned in 5 of 5", gmc)
    theory = recommend.answer(64, 64, None, read=lambda run: None)
    assert "comes from THEORY §9 and the exact model E5 only, not from a measurement" in theory
