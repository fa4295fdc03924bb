"""The drift map's failure boundary (studies.common.drift_map, drift_runs, studies.drift.analysis.map_table): the
boundary of a level's stable shares, a run's level, the map file, the exact model's boundaries, the resampling
over seeds, and what is shown beside the verdicts (studies.drift.beside, the pre-collapse window, the stability
rule's collapse update)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _drift import _runs, _table

from grids.run_table import MARGIN
from llm_runs import drift
from studies.common import d5, drift_map, drift_runs
from studies.drift import analysis, beside


@pytest.mark.parametrize("levels, want, censored", [
    ([(0.01, 1.0), (0.1, 0.6)], math.exp(math.log(0.01) + 0.5 * math.log(10)), None),  # 1.0 -> 0.6: halfway
    ([(0.01, 1.0), (0.1, 0.9)], 0.1, "right"),
    ([(0.01, 0.4), (0.1, 0.0)], 0.01, "left"),
    ([(0.1, 0.0), (0.01, 0.8), (0.05, 0.8)], 0.05, None),  # unordered input; exactly 0.8 holds
])
def test_the_failure_boundary(levels, want, censored):
    b, c = drift_map.boundary(levels)
    assert b == pytest.approx(want) and c == censored


def test_the_level_of_a_run():
    assert drift_runs._level({"optimizer": "sgd", "lr": 2e-4, "max_grad_norm": None}) == "sgd0.0002"
    assert drift_runs._level({"optimizer": "adam", "lr": 1e-5, "max_grad_norm": 1.0}) == "adamclip1e-05"
    assert drift_runs._level({"optimizer": "adam", "lr": 1e-4, "max_grad_norm": None}) is None  # the study's Adam
    assert drift_runs._level({"optimizer": "adam", "lr": 1e-4, "max_grad_norm": 1.0, "ess_scaling": "sqrt"}) is None
    assert drift_runs._level({"optimizer": "adamw", "lr": 1e-4, "max_grad_norm": 1.0, "weight_decay": 0.01}) is None


def test_the_map_file_holds_every_level_run_as_a_point_and_the_chi2_view():
    runs = _runs([1.0, 0.0], [1.0, 0.2], [0.01, 0.03], [0.02, 0.05])
    runs["chi2_early"] = 10 * runs["kl_early"]
    runs["grid"], runs["run"] = "drift", [f"r{i}" for i in range(len(runs))]
    res = {"seeds_drift": list(range(5)), "provisional": False,
           "boundaries": drift_map.boundaries(runs, list(range(5)), n_boot=50)}
    m = analysis.map_table(res, runs)
    assert len(m["points"]) == len(runs) and {p["optimizer"] for p in m["points"]} == {"sgd", "adamclip"}
    assert sum(p["stable"] for p in m["points"]) == int(runs["stable"].sum())
    kl = {(b["estimator"], b["optimizer"]): b["boundary"] for b in m["boundaries"]}
    chi2 = {(b["estimator"], b["optimizer"]): b["boundary"] for b in m["boundaries_chi2"]}
    assert chi2 == pytest.approx({k: 10 * v for k, v in kl.items()})  # log interpolation scales with the axis
    assert "points" not in analysis.map_table(res)


def test_the_exact_model_s_boundaries_come_from_its_chi2_levels(monkeypatch):
    import schema.results

    rows = [{"optimizer": "adam", "scheme": sc, "lr": lr, "collapsed": c, "avg_chi2": x}
            for sc, fails in (("gmc", True), ("topr", False)) for lr, x in ((0.1, 0.1), (1.0, 1.0))
            for c in (False, fails and lr == 1.0)]
    monkeypatch.setattr(schema.results, "read_sim", lambda source, steps=False: pd.DataFrame(rows))
    ex = drift_map.exact_model()
    b = {r["estimator"]: r for r in ex["boundaries"]}
    assert b["topr"]["censored"] == "right" and b["topr"]["boundary"] == pytest.approx(1.0)
    assert b["gmc"]["censored"] is None and 0.1 < b["gmc"]["boundary"] < 1.0  # 100% at 0.1, 50% at 1.0
    assert [lv["stable_share"] for lv in b["gmc"]["levels"]] == [1.0, 0.5]


def test_a_correction_with_fewer_seeds_is_resampled_over_its_own_seeds():
    """The decisive seeds exist for some corrections only: each is bootstrapped over the seeds it has, with the
    same draws as an analysis of those seeds alone."""
    five = _runs([1.0, 0.0, 0.0], [1.0, 0.4, 0.0], [0.01, 0.03, 0.06], [0.01, 0.03, 0.08])
    extra = five[five["estimator"] == "gmc"].assign(seed=lambda d: d["seed"] + 5)
    other = five.assign(estimator="is")
    both = pd.concat([five, extra, other], ignore_index=True)
    alone = {(b["estimator"], b["optimizer"]): b for b in drift_map.boundaries(other, list(range(5)), n_boot=100)}
    mixed = {(b["estimator"], b["optimizer"]): b for b in drift_map.boundaries(both, list(range(10)), n_boot=100)}
    for key in (("is", "sgd"), ("is", "adamclip")):
        assert (mixed[key]["low"], mixed[key]["high"]) == (alone[key]["low"], alone[key]["high"])
        assert {x["n"] for x in mixed[key]["levels"]} == {5}
    assert {x["n"] for x in mixed[("gmc", "sgd")]["levels"]} == {10}


def test_a_level_s_own_delay_zero_runs_are_kept_beside_it():
    runs = _runs([1.0, 0.0], [1.0, 0.2], [0.01, 0.03], [0.02, 0.05])
    zero = runs[runs["estimator"] == "gmc"].assign(delay=0, stable=lambda d: d["seed"] < 1)
    cells = drift_map.cell_table(pd.concat([runs, zero], ignore_index=True), list(range(5)))
    assert (cells["delay0_n"] == 5).all() and (cells["delay0_stable_share"] == 0.2).all()
    assert drift_map.cell_table(runs, list(range(5)))["delay0_stable_share"].isna().all()


# --- shown beside the verdicts -----------------------------------------------------------------


def test_the_pre_collapse_window_ends_at_the_collapse():
    m = _table(n=120, d=10)
    assert d5.precollapse_kl(m, 10, None) == pytest.approx(drift.summary(m, 10)["kl_early"])
    assert d5.precollapse_kl(m, 10, 200) == pytest.approx(drift.summary(m, 10)["kl_early"])  # after the window
    # collapsed at update 15: the 20 updates before it (0..14), not the window d..d+19 that follows it
    assert d5.precollapse_kl(m, 10, 15) == pytest.approx(np.median(m["drift/kl"].iloc[:15]))
    assert math.isnan(d5.precollapse_kl(m, 10, 0))


def test_the_stability_rule_s_collapse_update(monkeypatch):
    import schema.stability

    monkeypatch.setattr(schema.stability, "drop_threshold", lambda acc0, n: 0.1)
    steps = np.arange(0, 101)
    m = pd.DataFrame({"step": steps, "train/loss": 1.0, "train/grad_norm": 1.0,
                      "eval/heldout_acc": np.where(steps % 20 == 0, np.where(steps >= 60, 0.2, 0.5), np.nan)})
    assert d5.rule_collapse(m, {"steps": 100}) == 60
    m.loc[m["step"] == 33, "train/loss"] = np.nan  # a non-finite loss before
    assert d5.rule_collapse(m, {"steps": 100}) == 33
    assert d5.rule_collapse(m.assign(**{"eval/heldout_acc": 0.5, "train/loss": 1.0}), {"steps": 100}) is None


def _level_runs():
    """Two levels of two corrections under SGD, 4 seeds: 'a' stable and learning, 'b' stable but learning
    nothing at the first level, collapsing before its window at the second."""
    rows = []
    for level, drift_a, drift_b in (("sgd0.0001", 0.01, 0.001), ("sgd0.0002", 0.02, 0.5)):
        for s in range(4):
            rows.append({"level": level, "family": "sgd", "estimator": "a", "delay": 64, "seed": s, "complete": True,
                         "stable": True, "kl_early": drift_a, "pc0": 0.5, "pc_final": 0.6 + 0.01 * s,
                         "t_collapse_rule": None})
            bad = level == "sgd0.0002"
            rows.append({"level": level, "family": "sgd", "estimator": "b", "delay": 64, "seed": s, "complete": True,
                         "stable": not bad, "kl_early": drift_b, "pc0": 0.5, "pc_final": 0.0 if bad else 0.51,
                         "t_collapse_rule": 40 if bad and s < 3 else 80 if bad else None})
    return pd.DataFrame(rows)


def test_gains_say_held_and_learned_apart():
    g = {(x["level"], x["estimator"]): x for x in beside.gains(_level_runs(), list(range(4)))}
    a, b = g[("sgd0.0001", "a")], g[("sgd0.0001", "b")]
    assert a["gain"] == pytest.approx(0.115) and a["held"] and a["learned"] and a["low"] > MARGIN
    assert b["held"] and not b["learned"] and b["gain"] == pytest.approx(0.01)  # held, learned nothing
    assert not g[("sgd0.0002", "b")]["held"] and g[("sgd0.0002", "b")]["gain"] == pytest.approx(-0.5)


def test_points_read_after_their_run_s_collapse_are_counted():
    ac = beside.after_collapse(_level_runs(), list(range(4)))["sgd"]
    # b at sgd0.0002: 4 unstable, 3 collapsed at update 40 (before the window 64..83), 1 at 80 (inside it)
    assert ac == {"points": 16, "unstable": 4, "after_collapse": 4, "whole_window_after": 3, "collapse_unknown": 0}


def test_levels_are_ordered_by_their_step():
    runs = _level_runs()
    runs = pd.concat([runs, runs[runs["level"] == "sgd0.0001"].assign(level="sgd1e-05")], ignore_index=True)
    assert [g["level"] for g in beside.gains(runs, list(range(4)))][::2] == ["sgd1e-05", "sgd0.0001", "sgd0.0002"]
    dep = beside.axis_dependence(drift_map.cell_table(runs, list(range(4))))
    assert [x["level"] for x in dep] == ["sgd1e-05", "sgd0.0001", "sgd0.0002"]


def test_the_axis_s_dependence_on_the_correction():
    dep = beside.axis_dependence(drift_map.cell_table(_level_runs(), list(range(4))))
    first = next(x for x in dep if x["level"] == "sgd0.0001")
    assert first["min"] == ["b", 0.001] and first["max"] == ["a", 0.01] and first["ratio"] == pytest.approx(10)


def test_an_interpolated_boundary_names_the_tested_levels_around_it():
    assert drift_map.bracket([(0.0148, 1.0), (0.0107, 1.0), (0.0845, 0.2)]) == [0.0148, 0.0845]
    assert drift_map.bracket([(0.01, 0.5), (0.02, 0.0)]) is None  # left-censored
    assert drift_map.bracket([(0.01, 1.0), (0.02, 0.9)]) is None  # right-censored
    b = drift_map.boundaries(_runs([1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.01, 0.03, 0.06], [0.01, 0.03, 0.08]),
                            list(range(5)), n_boot=50)
    assert {x["optimizer"]: x["bracket"] for x in b} == {"sgd": [0.03, 0.06], "adamclip": [0.01, 0.03]}


def test_d2_s_whole_seed_interval_resamples_seeds_for_every_correction_together():
    rng = np.random.default_rng(0)
    rows = []
    for est in ("gmc", "is", "tic_mask", "tic_trunc", "topr", "gspo", "vespo"):
        for fam in ("sgd", "adamclip"):
            for i, d in enumerate((0.01, 0.03, 0.09)):
                for s in range(10):
                    rows.append({"level": f"{fam}{i}", "family": fam, "estimator": est, "delay": 64, "seed": s,
                                 "complete": True, "stable": bool(rng.random() < 1 - 0.4 * i),
                                 "kl_early": d * (1 + 0.1 * rng.random())})
    runs = pd.DataFrame(rows)
    w = beside.d2_whole_seeds(runs, list(range(10)), n_boot=200)
    assert w["resampling"] == "whole seeds" and w["draws"] > 150 and -1 <= w["low"] <= w["high"] <= 1
    assert beside.d2_whole_seeds(runs, list(range(10)), n_boot=200) == w  # fixed seed: the same interval


def test_the_resampled_boundary_is_the_boundary_of_the_drawn_seeds_runs():
    runs = _runs([1.0, 0.4, 0.0], [1.0, 1.0, 0.0], [0.01, 0.03, 0.06], [0.01, 0.03, 0.08])
    sub = runs[runs["family"] == "sgd"]
    by_level = {lv: {s: (x["kl_early"].to_numpy(float), x["stable"].to_numpy(float)) for s, x in g.groupby("seed")}
                for lv, g in sub.groupby("level")}
    pick = [0, 0, 3, 4, 4]
    rows = pd.concat([sub[sub["seed"] == s] for s in pick])
    expect = drift_map.boundary([(float(x["kl_early"].median()), float(x["stable"].mean()))
                                for _, x in rows.groupby("level")])[0]
    assert drift_map.resampled_boundary(by_level, pick) == expect
