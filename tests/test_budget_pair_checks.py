"""The budget study's verdicts apply the pre-registered pair checks (a)-(c) to the stored pair measurements, record
which pairs B5 used and why others were left out, state where the pair code departs from the registration with B5
both ways, test B1-B5 as one Holm family, and decide B5 on the cells it reads (studies.budget.analysis, rules)."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from studies.budget import analysis, rules


def _pair(mc_z=(-1.0, 0.5), mc_bare=None, committed_z=0.1, sketch=True, is_z=0.5):
    """A measured pair's checks as pairs.json stores them: the direct Monte Carlo's z over the combined s.e. (with
    the sketch's term) ``mc_z``; without that term ``mc_bare`` (default the same)."""
    mc = []
    for z, zb in zip(mc_z, mc_bare or mc_z):
        # pool 100, direct 100 + 10 zb (direct_se 10, pool_se 0); the sketch's term makes the stored z
        sk = 10.0 * math.sqrt(max((zb / z) ** 2 - 1.0, 0.0)) if z else 0.0
        mc.append({"estimator": "gmc", "G": 8, "direct": 100.0 + 10.0 * zb, "direct_se": 10.0, "pool": 100.0,
                   "pool_se": 0.0, "sketch_sd": sk, "z": z})
    checks = {"is_unbiased": {"passed": True}, "sketch": {"passed": sketch}, "direct_mc": mc,
              "committed_bias": {"available": True, "max_abs_z": committed_z, "passed": committed_z <= 4.0}}
    checks["passed"] = bool(sketch and committed_z <= 4.0 and max(map(abs, mc_z)) <= 4.0)
    return {"target_zero": False, "checks": checks,
            "moments": {f"is/G{G}": {"bias_sq": {"value": is_z * 0.02, "se": 0.02}} for G in (2, 4, 8)}}


PAIRS = {"ok": _pair(), "edge": _pair(mc_z=(-3.99, 0.2), mc_bare=(-4.02, 0.2)), "c4": _pair(committed_z=3.0),
         "sketch": _pair(sketch=False), "isbias": _pair(is_z=2.5),
         "notarget": {"target_zero": True, "checks": {}}}


def test_the_registered_checks_are_applied_to_the_stored_measurements():
    st = analysis.pair_status({"pairs": PAIRS})
    assert {n for n, s in st.items() if s["passed"]} == {"ok", "edge", "sketch"}
    assert {n for n, s in st.items() if s["passed_without_sketch"]} == {"ok", "sketch"}
    assert st["edge"]["mc_z_without_sketch"][0] == pytest.approx(-4.02)
    # (c) at the registered 2 s.e., not the pair code's 4: the pair code passed it, the registration does not
    assert st["c4"]["measured_passed"] and not st["c4"]["c"] and "(c) bias_sq beyond 2 s.e." in st["c4"]["why"]
    assert not st["isbias"]["a"] and "(a)" in st["isbias"]["why"]
    assert not st["sketch"]["measured_passed"] and st["sketch"]["passed"]  # the sketch states, it does not gate
    assert not st["notarget"]["passed"] and "no target" in st["notarget"]["why"]


def _pair_table(names, mse):
    rows = []
    for n in names:
        for e in ("gmc", "tic_trunc", "topr", "is"):
            for (B, G) in analysis.B5_CELLS:
                rows.append({"pair": n, "estimator": e, "B": B, "G": G, "N": B * G, "rel_mse": mse(e, B, G)})
    return pd.DataFrame(rows)


def _reader(only_b5: bool):
    """gmc learns where B >= 16, the others always; with ``only_b5`` the d = 64 runs outside B5's cells have not
    finished."""
    from studies.budget.plan import plan_rows

    cells = {r["run"]: r["cell"] for r in plan_rows()}

    def read(run):
        c = cells[run]
        B, G = c.overrides["prompts_per_step"], c.overrides["group_size"]
        if only_b5 and c.delay == 64 and (B, G) not in analysis.B5_CELLS:
            return None
        ok = B >= 16 if c.estimator == "gmc" else True
        return {"finished": True, "collapsed": not ok, "stable": ok, "pc0": 0.5, "pc_final": 0.6 if ok else 0.1}
    return read


def test_b5_is_decided_on_its_own_cells_and_reported_both_ways_with_its_pairs(tmp_path, monkeypatch):
    import functools

    monkeypatch.setattr(rules, "b5", functools.partial(rules.b5, n_perm=500))  # the rule itself, fewer permutations
    df = analysis.design_runs(_reader(only_b5=True))
    mse = (lambda e, B, G: G / B)  # more prompts, less error: the grid's gmc ordering
    (tmp_path / "pairs.json").write_text(json.dumps({"pairs": PAIRS}))
    _pair_table(PAIRS, mse).to_csv(tmp_path / "pairs.csv", index=False)
    used, status, other = analysis.read_pair_inputs(tmp_path)
    assert set(used["pair"]) == {"ok", "edge", "sketch"} and set(other["pair"]) == {"ok", "sketch"}
    assert set(analysis.read_pairs(tmp_path)["pair"]) == set(used["pair"])
    doc = analysis.verdicts(df, used, status, other)
    assert doc["verdicts"]["B1"] == "not yet run" and doc["missing"]["B1"] > 0
    assert doc["verdicts"]["B5"] != "not yet run" and doc["records"]["B5"]["rho"] > 0
    assert doc["pairs"]["used"] == ["edge", "ok", "sketch"]
    assert set(doc["pairs"]["excluded"]) == {"c4", "isbias", "notarget"}
    b = next(d for d in doc["departures"] if d["what"].startswith("check (b)"))
    assert b["pairs_used_without_sketch_term"] == ["ok", "sketch"] and b["B5_without_sketch_term"]["rho"] > 0
    c = next(d for d in doc["departures"] if d["what"].startswith("check (c)"))
    assert c["pairs_whose_status_changes"] == ["c4"] and c["largest_abs_z"] == 3.0
    s = next(d for d in doc["departures"] if d["what"].startswith("the sketch"))
    assert s["pairs_it_would_exclude"] == ["sketch"]
    # nothing missing in B5's cells, some elsewhere: the same B5 as on the whole grid
    whole = analysis.verdicts(analysis.design_runs(_reader(only_b5=False)), used)
    assert whole["records"]["B5"]["rho"] == doc["records"]["B5"]["rho"]


def test_the_holm_family_is_b1_to_b5_whether_or_not_each_is_tested_yet():
    rec = {"p": 0.02, "extra_ok": True, "refuted": False}
    # alone, 0.02 would pass Holm's first step (0.05); among five it meets 0.05 / 5 = 0.01 and fails
    assert rules.verdicts({"B1": rec})["B1"] == "CONFIRMED"
    five = rules.verdicts({"B1": rec, "B2": None, "B3": None, "B4": None, "B5": None})
    assert five["B1"] == "INCONCLUSIVE" and five["B2"] == "not yet run"
    strong = {**rec, "p": 0.005}
    assert rules.verdicts({"B1": strong, "B2": None, "B3": None, "B4": None, "B5": None})["B1"] == "CONFIRMED"
