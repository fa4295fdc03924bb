"""The budget study's secondary outputs (no verdict): the mediators per run, cell and correction with their AUC for
learned (studies.budget.mediators), and each rule's statistic with held in place of learned beside the verdicts
(studies.budget.analysis)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from studies.budget import analysis, mediators


def _metrics(share=lambda t: 0.5, zero=lambda t: 0.25, drop=()):
    t = np.arange(201)
    m = pd.DataFrame({"step": t, "train/weight_max": [share(s) for s in t], "train/adv_zero_frac": [zero(s) for s in t],
                      "train/update_cos": 0.9, "train/grad_cos": 0.1})
    return m.drop(columns=list(drop))


def test_a_run_s_mediators_are_medians_over_updates_64_to_199():
    # 1000 outside the window; inside, the step itself: median of 64..199 = 131.5
    m = _metrics(share=lambda t: float(t) if 64 <= t <= 199 else 1000.0)
    got = mediators.run_mediators(m, B=4, G=8)
    assert got["share_max"] == pytest.approx(131.5 / 32) and got["adv_zero_frac"] == 0.25
    assert got["update_cos"] == pytest.approx(0.9) and got["grad_cos"] == pytest.approx(0.1)
    assert math.isnan(mediators.run_mediators(_metrics(drop=["train/grad_cos"]), 4, 8)["grad_cos"])


def test_the_summary_holds_cells_and_an_auc_per_correction():
    runs = pd.DataFrame([{"name": f"r{i}", "level": "adamclip0.0001", "kappa": None, "estimator": "gmc", "delay": 64,
                          "B": 4, "G": 8 if i < 4 else 16, "finished": True, "learned": float(i % 2),
                          "share_max": 0.1 + 0.1 * (i % 2), "adv_zero_frac": 0.3, "update_cos": float(i),
                          "grad_cos": math.nan} for i in range(8)])
    s = mediators.summary(runs)
    assert s["window"] == [64, 199] and len(s["cells"]) == 2 and s["cells"][0]["runs"] == 4
    a = s["auc_for_learned"]["adamclip0.0001 gmc"]
    assert a["share_max"] == 1.0 and a["adv_zero_frac"] == 0.5 and a["grad_cos"] is None
    assert a["update_cos"] == pytest.approx(10 / 16)  # learned 1, 3, 5, 7 against 0, 2, 4, 6


def test_the_runs_are_read_from_the_design_s_folders():
    df = pd.DataFrame([{"name": "a", "finished": True, "B": 2, "G": 4}, {"name": "b", "finished": False, "B": 2,
                                                                        "G": 4}])
    seen = []
    out = mediators.mediator_runs(df, {"a": "folder-a", "b": "folder-b"},
                                  read=lambda run: seen.append(run) or _metrics())
    assert seen == ["folder-a"] and out.loc[0, "share_max"] == pytest.approx(0.5 / 8)
    assert math.isnan(out.loc[1, "share_max"])


def test_held_stands_beside_learned_in_the_verdicts():
    from test_budget_analysis import fake_reader

    doc = analysis.verdicts(analysis.design_runs(fake_reader()), None)
    held = doc["held_beside"]
    assert "no verdict" in held["note"] and held["B5"] is None  # no pair table
    # planted: held equals learned in every run, so each rule's statistic on held is its statistic on learned
    for h in ("B1", "B2"):
        assert {k: v for k, v in held[h].items() if k != "p"} == {k: v for k, v in doc["records"][h].items()
                                                                  if k != "p"}
