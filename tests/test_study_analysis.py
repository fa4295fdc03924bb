"""The staleness study's pre-registered analysis on planted runs: the verdicts H1-H4, the statistics helpers, the
wait for whole seeds, the stopping points, the names the pre-registration quotes and the abstract's LLM claim."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _study_runs import _fake_run, _fake_study

# --------------------------------------------------------------------------- the pre-registered analysis


def test_analysis_confirms_a_planted_effect_and_refutes_a_reversed_one(tmp_path):
    from studies.staleness.analysis import analyse, differences_table, read_runs

    _fake_study(tmp_path / "up", effect_long=0.1)
    runs = read_runs(tmp_path / "up")
    assert len(runs) == 10 * 2 * 4 and runs["complete"].all() and runs["stable"].all()
    res = analyse(runs)
    assert res["H1"]["verdict"] == "CONFIRMED" and res["H1"]["gmc_minus_tic_mask"]["n"] == 10
    assert res["H1"]["gmc_minus_tic_mask"]["mean"] == pytest.approx(0.1, abs=0.01)
    assert res["H2"]["verdict"] == "CONFIRMED" and set(res["H2"]["baselines"]) == {"is", "tic_mask"}
    assert res["H3"]["verdict"] == "CONFIRMED"
    assert res["H4"]["verdict"] == "INCONCLUSIVE" and res["H4"]["collapsed_runs"] == 0
    table = differences_table(runs)
    assert set(table["horizon"]) == {"long", "short"} and (table["n"] == 10).all()

    _fake_study(tmp_path / "down", effect_long=-0.1, effect_short=-0.1)
    res = analyse(read_runs(tmp_path / "down"))
    assert res["H1"]["verdict"] == "REFUTED" and res["H2"]["verdict"] == "REFUTED"
    assert res["H2"]["baselines"]["tic_mask"]["worse"] and not res["H2"]["baselines"]["is"]["worse"]
    assert res["H3"]["verdict"] == "INCONCLUSIVE"  # the same gap at both horizons


def test_h4_counts_warnings_that_precede_collapse(tmp_path):
    from studies.staleness.analysis import analyse, read_runs

    base = {"task": "scratchpad", "steps": 40, "eps": 0.2, "heldout_size": 200, "mode": "controlled", "delay": 64}
    for s in range(6):  # chi^2 crosses 1 at update 10; pc collapses at step 20
        chi2 = np.where(np.arange(40) >= 10, 5.0, 0.1)
        _fake_run(tmp_path, f"long-tic_mask-d64-s{s}", {**base, "estimator": "tic_mask", "seed": s},
                  [0.3, 0.05, 0.01], chi2=chi2, acc=[0.5, 0.5, 0.5])
        _fake_run(tmp_path, f"long-gmc-d64-s{s}", {**base, "estimator": "gmc", "seed": s}, [0.3, 0.4, 0.5])
    res = analyse(read_runs(tmp_path))["H4"]
    assert res["collapsed_runs"] == 6 and res["warned_before_collapse"] == 6 and res["false_alarms"] == 0
    assert res["verdict"] == "CONFIRMED" and res["ci"][0] > 0.5


def test_statistics_helpers():
    from studies.staleness.analysis import bootstrap, holm, p_below, seeds_for_power

    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == {"a": True, "c": False, "b": False}
    assert holm({"a": 0.01, "b": 0.02}) == {"a": True, "b": True}
    assert seeds_for_power(0.03, 0.03) == 10  # effect size 1, two-sided 5%, 80% power: the textbook n
    assert seeds_for_power(0.06, 0.03) > 30
    with pytest.raises(ValueError, match="sd_diff must be a finite number > 0, got 0"):
        seeds_for_power(0)
    b = bootstrap(np.array([0.1, 0.12, 0.08, 0.11, 0.09]))
    assert b["low"] < 0.1 < b["high"] and p_below(b, 0.0) == 0.0 and p_below(b, 0.2) == 1.0


def test_verdicts_wait_for_the_pre_registered_number_of_whole_seeds(tmp_path):
    """Fewer than MIN_SEEDS whole seeds: every verdict is NOT DECIDED (the rule's outcome so far
    kept as interim); a seed missing one run is not a whole seed and is left out of every comparison."""
    from studies.staleness.analysis import MIN_SEEDS, analyse, read_runs

    _fake_study(tmp_path / "few", effect_long=0.1, n_seeds=MIN_SEEDS - 1)
    res = analyse(read_runs(tmp_path / "few"))
    assert {r["verdict"] for r in res.values()} == {"NOT DECIDED"}
    assert res["H1"]["interim_verdict"] == "CONFIRMED" and res["H1"]["seeds"] == list(range(MIN_SEEDS - 1))

    _fake_study(tmp_path / "cut", effect_long=0.1, n_seeds=MIN_SEEDS + 1)
    (tmp_path / "cut" / f"short-is-d64-s{MIN_SEEDS}" / "metrics.csv").unlink()  # seed MIN_SEEDS is not whole
    res = analyse(read_runs(tmp_path / "cut"))
    assert res["H1"]["verdict"] == "CONFIRMED" and res["H1"]["gmc_minus_tic_mask"]["n"] == MIN_SEEDS
    assert res["H1"]["seeds"] == list(range(MIN_SEEDS))



def test_stopping_points_are_the_rule_on_the_first_k_whole_seeds(tmp_path):
    """The verdicts on the first MIN_SEEDS, MIN_SEEDS + 2, ... whole seeds and on all of them, each
    equal to the analysis of exactly those seeds; an effect that flips after seed 6 shows in them."""
    from studies.staleness.analysis import MIN_SEEDS, analyse, read_runs, stopping_points

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=9)
    runs = read_runs(tmp_path / "s")
    points = stopping_points(runs)
    assert [p["seeds"] for p in points] == [MIN_SEEDS, MIN_SEEDS + 2, 9]
    for p in points:
        res = analyse(runs[runs["seed"] < p["seeds"]])
        assert p["H1"] == res["H1"]["verdict"] and p["H1_interval"] == res["H1"]["gmc_minus_tic_mask"]
        assert p["H1_interval"]["n"] == p["seeds"] and p["H2_stable"] == ["is", "tic_mask"]
    # seeds 6-8 reverse the effect: the 6-seed point confirms H1, the 9-seed point does not
    late = runs["seed"] >= 6
    swap = late & (runs["horizon"] == "long") & (runs["estimator"] == "tic_mask")
    runs.loc[swap, "pc_final"] += 0.6
    points = stopping_points(runs)
    assert points[0]["H1"] == "CONFIRMED" and points[-1]["H1"] != "CONFIRMED"
    _fake_study(tmp_path / "few", effect_long=0.1, n_seeds=MIN_SEEDS - 1)
    assert stopping_points(read_runs(tmp_path / "few")) == []


def test_report_tabulates_the_stopping_points(tmp_path):
    from studies.report.build import stopping_markdown
    from studies.staleness.analysis import read_runs, stopping_points

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=8)
    runs = read_runs(tmp_path / "s")
    md = stopping_markdown(runs)
    rows = [ln for ln in md if ln.startswith(("| 6 |", "| 8 |"))]
    assert md[0] == "### Verdicts had the grid stopped earlier" and len(rows) == 2
    last = stopping_points(runs)[-1]
    assert rows[1].startswith(f"| 8 | {last['H1']} | {last['H1_interval']['mean']:+.3f} [")
    assert "| IS, TIC-mask |" in rows[1]
    _fake_study(tmp_path / "six", effect_long=0.1, n_seeds=6)
    assert stopping_markdown(read_runs(tmp_path / "six")) == []  # one stopping point: nothing to compare


def test_the_names_the_preregistration_quotes_are_the_analysis_that_runs():
    """docs/PREREGISTRATION.md quotes ``figures.study.<name>`` and ``python -m figures.study``, which are
    now :mod:`studies.staleness` (``python -m studies.staleness``): every quoted name resolves there,
    and to the very object of the analysis (one rule, not two copies)."""
    import re

    import studies.staleness as quoted
    from studies.staleness import analysis

    text = (Path(__file__).resolve().parents[1] / "docs" / "PREREGISTRATION.md").read_text()
    names = set(re.findall(r"figures\.study\.([A-Za-z_]+)", text))
    assert names >= {"seeds_for_power", "differences_table"}
    for name in names | {"ALPHA", "MARGIN", "N_RESAMPLES", "BOOT_SEED", "STABLE_FRACTION", "MIN_SEEDS", "analyse"}:
        assert getattr(quoted, name) is getattr(analysis, name), name
    assert quoted.main is analysis.main


@pytest.mark.parametrize("effect, n_seeds, word", [(0.1, 10, "confirmed in this setting"),
                                                   (-0.1, 10, "refuted in this setting"),
                                                   (0.1, 3, "not decided")])
def test_the_abstracts_llm_claim_is_the_studys_h2(tmp_path, monkeypatch, effect, n_seeds, word):
    """claims.abstract's verdict on the LLM claim is H2 of the pre-registered study, read from the
    verdicts file ``python -m studies.staleness --json`` writes, with its numbers; the earlier sweep
    only adds a sentence."""
    from claims.abstract import ABSTRACT, verdicts
    from schema.results import read_json
    from studies.staleness.analysis import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    _fake_study(tmp_path / "llm" / "study", effect_long=effect, n_seeds=n_seeds)
    assert main(["--json", str(tmp_path / "llm" / "study" / "verdicts.json")]) == 0
    h2 = read_json(tmp_path / "llm" / "study" / "verdicts.json")["H2"]
    llm = [v for v in verdicts() if not v["claim_ids"]]
    assert len(llm) == 1 and llm[0]["text"] == ABSTRACT[-1].text
    assert llm[0]["verdict"] == word
    ev = llm[0]["evidence"]
    assert f"{n_seeds} whole paired seeds" in ev and "H2 (GMC at least as good" in ev
    tm = h2["baselines"]["tic_mask"]
    assert f"TIC-mask {tm['mean']:+.3f} [{tm['low']:+.3f}, {tm['high']:+.3f}], n = {n_seeds}" in ev


def test_the_abstracts_llm_claim_without_the_study_is_not_checked(tmp_path, monkeypatch):
    from claims.abstract import verdicts

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    llm = next(v for v in verdicts() if not v["claim_ids"])
    assert llm["verdict"] == "not checked" and "python -m studies.run" in llm["evidence"]
