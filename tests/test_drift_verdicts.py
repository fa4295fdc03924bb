"""The drift study's decision rules (studies.drift.verdicts, studies.common.d5): D1 on constructed runs, D5's
threshold chosen on training runs and counted on held-out ones, and the analysis finding its runs in a packed
grid and writing its map beside the verdicts."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from _drift import _runs

from studies.common import d5, drift_map
from studies.drift import analysis, verdicts


def test_d1_confirms_matching_boundaries_and_refutes_sgd_holding_beyond_adam():
    same = _runs([1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.01, 0.03, 0.06], [0.01, 0.03, 0.08])
    bounds = drift_map.boundaries(same, list(range(5)), n_boot=200)
    v = verdicts.d1(bounds, drift_map.cell_table(same, list(range(5))), adam_level=0.05)
    assert v["verdict"] == "CONFIRMED"
    apart = _runs([1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.01, 0.04, 0.08], [0.01, 0.03, 0.08])
    bounds = drift_map.boundaries(apart, list(range(5)), n_boot=200)
    v = verdicts.d1(bounds, drift_map.cell_table(apart, list(range(5))), adam_level=0.05)
    assert v["verdict"] == "REFUTED" and v["refuting_pairs"]


def test_d5_chooses_a_threshold_on_training_runs_and_counts_held_out_hits():
    """A low-ESS signal that fires before every collapse and never in a stable run: the threshold chosen
    on training runs separates held-out runs too (CONFIRMED when decided; INCONCLUSIVE before)."""
    def rec(collapsed, low):
        steps = np.arange(64, 200)
        vals = np.where(steps >= 70, 0.1 if low else 0.6, 0.6)
        return {"collapsed": collapsed, "t_collapse": 100 if collapsed else None,
                **{k: (steps, vals if k.startswith("stale/ess") else np.full(len(steps), 10.0))
                   for k in ("stale/ess", "stale/ess@0", "train/grad_norm", "train/grad_norm@0")}}

    train = [rec(True, True) for _ in range(10)] + [rec(False, False) for _ in range(10)]
    held = [rec(True, True) for _ in range(8)] + [rec(False, False) for _ in range(12)]
    r = d5.d5(train, held, decided=True)
    ess = r["signals"]["stale/ess"]
    assert r["verdict"] == "CONFIRMED" and ess["hits"] == [8, 8] and ess["false_alarms"] == [0, 12]
    assert ess["lead_median"] == 30 and 0.1 <= ess["threshold"] < 0.6
    assert d5.d5(train, held, decided=False)["verdict"] == "INCONCLUSIVE"
    useless = [rec(True, False) for _ in range(8)] + [rec(False, True) for _ in range(12)]
    assert d5.d5(train, useless, decided=True)["verdict"] == "REFUTED"


def test_d5_reports_the_training_set_as_counted_in_the_text_beside_the_rule():
    """The stale floor's runs are in the rule's training set; the deviation beside the verdict chooses the
    thresholds without them and applies them to the same held-out runs."""
    def rec(name, collapsed, low):
        steps = np.arange(64, 200)
        vals = np.where(steps >= 70, 0.1 if low else 0.6, 0.6)
        return {"run": name, "collapsed": collapsed, "t_collapse": 100 if collapsed else None,
                **{k: (steps, vals if k.startswith("stale/ess") else np.full(len(steps), 10.0))
                   for k in ("stale/ess", "stale/ess@0", "train/grad_norm", "train/grad_norm@0")}}

    train = [rec(f"long-gmc-d64-s{i}", True, True) for i in range(5)] + [rec(f"long-topr-d64-s{i}", False, False)
                                                                         for i in range(5)]
    floor = [rec(f"long-stale-d64-s{i}", True, True) for i in range(3)]
    held = [rec("h", True, True), rec("h", False, False)]
    r = d5.d5(train + floor, held, decided=False)
    assert r["train_runs"] == 13 and r["deviation"]["train_runs"] == 10
    assert "selects 13, the 3 more" in r["deviation"]["text"]
    assert set(r["deviation"]["signals"]) == set(d5.D5_SIGNALS)
    assert "deviation" not in d5.d5(train, held, decided=False)


def test_d5_s_rule_reads_the_counts_as_the_verdicts_file_saves_them():
    def sig(h, f, p):
        return {"hits": h, "false_alarms": f, "p_fisher": p}

    assert d5.d5_rule({"a": sig([87, 202], [112, 468], 7.7e-7), "b": sig([0, 0], [1, 468], "NaN")}) == "CONFIRMED"
    assert d5.d5_rule({"a": sig([0, 202], [1, 468], 1.0), "b": sig([1, 202], [4, 468], 0.83)}) == "REFUTED"
    assert d5.d5_rule({"a": sig([10, 202], [20, 468], 0.1)}) == "INCONCLUSIVE"


def test_runs_are_found_by_name_in_a_packed_grid_too():
    from pathlib import Path

    study = Path(__file__).resolve().parents[1] / "results" / "llm" / "study"
    found = verdicts._runs_named(study, "long-gmc-d0-s*")
    assert [r.name for r in found] == [f"long-gmc-d0-s{s}" for s in range(10)]
    assert math.isfinite(verdicts.study_gain())


def test_verdicts_written_elsewhere_take_their_map_with_them(tmp_path, monkeypatch):
    """``--json`` elsewhere never writes into the committed folder: the map goes beside the verdicts."""
    monkeypatch.setattr(analysis, "read", lambda folders=None: pd.DataFrame())
    monkeypatch.setattr(analysis, "analyse", lambda runs: {"seeds_drift": [], "boundaries": [], "M6_disclosure": {},
                                                          **{h: {"verdict": "INCONCLUSIVE"} for h in
                                                             ("D1", "D2", "D3", "D4", "D5", "D6", "D7")}})
    monkeypatch.setattr(analysis, "map_table", lambda result, runs=None: {"map": True})
    monkeypatch.setattr(analysis, "map_folders", lambda: {"drift": tmp_path / "committed"})
    assert analysis.main(["--json", str(tmp_path / "elsewhere" / "v.json")]) == 0
    assert json.loads((tmp_path / "elsewhere" / "map.json").read_text()) == {"map": True}
    assert not (tmp_path / "committed").exists()
