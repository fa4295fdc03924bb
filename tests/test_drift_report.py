"""The drift study in the report (studies.report.sections.drift, studies.report.verdict_text, the mechanism
section, F24's caption): the section read from the saved verdicts, each hypothesis's sentence, the guide, and
what is shown beside the verdicts."""
from __future__ import annotations

import json

import pandas as pd
import pytest


def test_the_report_section_reads_the_saved_verdicts(tmp_path):
    from studies.report.sections.drift import drift_lines
    from studies.report.sections.replicate import replicate_lines

    assert "No drift verdicts yet" in drift_lines(tmp_path / "none.json")[0]
    v = {"seeds_drift": [0], "seeds_decisive": [], "provisional": True,
         "D1": {"verdict": "INCONCLUSIVE", "why": "not yet run: 1 of 5"},
         "boundaries": [{"estimator": "gmc", "optimizer": "sgd", "boundary": 0.02, "censored": None,
                         "levels": [{"level": "sgd0.0001", "drift": 0.01, "stable_share": 1.0, "n": 1}]}],
         "M6_disclosure": {"220": {"verdict": "CONFIRMED", "hits": [17, 50], "false_alarms": [31, 170],
                                   "p_fisher": 0.0169}}}
    (tmp_path / "v.json").write_text(json.dumps(v))
    text = "\n".join(drift_lines(tmp_path / "v.json"))
    assert "| D1 | INCONCLUSIVE (not yet run: 1 of 5) |" in text and "provisional" in text
    assert "| gmc | sgd | sgd0.0001: 0.01, 100% (1) | 0.02 |" in text and "17/50" in text
    assert "No replicate comparison yet" in replicate_lines(tmp_path / "none.json")[0]


def test_the_report_section_shows_saved_non_finite_values_as_not_available():
    from studies.report.fmt import num as _num

    assert _num("nan") == "n/a" and _num(None) == "n/a" and _num(float("inf")) == "n/a" and _num(0.01234) == "0.0123"


@pytest.mark.parametrize("provisional", [True, False, None])
def test_the_report_leads_with_the_map_once_it_is_decided(tmp_path, monkeypatch, provisional):
    """None: the key absent, as verdicts written before it was always saved have it when decided."""
    from schema.io import write_json
    from studies.report.sections.drift import progress_section

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    (tmp_path / "llm" / "drift").mkdir(parents=True)
    doc = {"seeds_drift": [0]} | ({} if provisional is None else {"provisional": provisional})
    write_json(tmp_path / "llm" / "drift" / "verdicts.json", doc)
    placed = []

    def figure_sections(names, *args):
        placed.extend(names)
        return ["FIGURE"], []

    md, missing, decided = progress_section(tmp_path, tmp_path, False, figure_sections)
    assert placed == ["studies.drift.figures.f24_drift_map"] and "FIGURE" in md and missing == []
    assert decided is not bool(provisional)
    assert md[0] == ("## Campaigns in progress" if provisional else
                     "## The drift map: where each correction fails as the drift grows")


def _decided(d1_verdict="CONFIRMED", d7_verdict="CONFIRMED", delay0_share=0.2):
    level = {"level": "sgd0.0006", "drift": 0.8, "stable_share": 0.0, "n": 5, "delay0_stable_share": delay0_share,
             "delay0_n": 5}
    clip = [{"level": "adamclip1e-05", "drift": 0.01, "stable_share": 1.0, "n": 10}]
    return {"D1": {"verdict": d1_verdict, "boundary_sgd": [0.016, 0.013, 0.043, None],
                   "boundary_adamclip": [0.022, 0.018, 0.041, None], "adam_study_drift": 0.106,
                   "sgd_levels_at_or_above_it": ["sgd0.0006"]},
            "D7": {"verdict": d7_verdict, "level": "adamclip1e-05", "delay0_gain": 0.183, "study_gain": 0.161},
            "boundaries": [{"estimator": "gmc", "optimizer": "sgd", "boundary": 0.016, "levels": [level]}]
            + [{"estimator": e, "optimizer": "adamclip", "boundary": 0.01, "censored": "right", "levels": clip}
               for e in ("gmc", "is", "tic_mask", "tic_trunc", "topr")]}


def test_d1_s_sentence_says_what_was_found_and_when_a_level_fails_without_delay():
    from studies.report.verdict_text import d1_sentence

    text = d1_sentence(_decided())
    assert "D1 CONFIRMED" in text and "0.016 [0.013, 0.043] under SGD" in text
    assert "stable in 0 of 5 seeds at lr 0.0006" in text and "delay 0: 1 of 5 stable" in text
    assert "does not isolate the staleness" in text and "does not move where GMC fails" in text
    assert "does not isolate" not in d1_sentence(_decided(delay0_share=1.0))
    assert "matters beyond the drift" in d1_sentence(_decided(d1_verdict="REFUTED"))
    assert d1_sentence(_decided(d1_verdict="INCONCLUSIVE")) == "" and d1_sentence(None) == ""


def test_the_plain_answer_leads_with_the_step_size_only_when_d7_holds():
    from studies.report.verdict_text import step_size_lead

    text = step_size_lead(_decided(), name=str.upper)
    assert text.startswith("Lower the step first (D7 CONFIRMED") and "lr 1e-05" in text
    assert "GMC, IS, TIC_MASK, TIC_TRUNC and TOPR are each stable in 10 of 10 seeds" in text
    assert "+0.183 against +0.161" in text
    for verdict in ("REFUTED", "INCONCLUSIVE"):
        assert step_size_lead(_decided(d7_verdict=verdict)) == ""


def test_d2_s_numbers_name_a_correction_short_of_gmc():
    from studies.report.verdict_text import d2_sentence

    bounds = {e: 0.05 for e in ("gmc", "topr", "vespo")}
    d2 = {"verdict": "INCONCLUSIVE", "spearman": 0.64, "low": -0.18, "high": 0.79, "below_gmc": [],
          "boundaries_sgd": {**bounds, "vespo": 0.014}, "boundaries_adamclip": bounds}
    text = d2_sentence({"D2": d2})
    assert "is 0.64, 95% bootstrap interval [-0.18, 0.79]" in text and "VESPO under SGD (0.014 against" in text
    assert "at or beyond GMC's under both" in d2_sentence({"D2": {**d2, "boundaries_sgd": bounds}})
    assert d2_sentence({"D2": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == ""
    assert "TOPR (" not in text


def test_the_section_shows_the_decided_hypotheses_numbers(tmp_path):
    from schema.io import write_json
    from studies.report.sections.drift import drift_lines

    write_json(tmp_path / "v.json", _decided())
    text = "\n".join(drift_lines(tmp_path / "v.json"))
    assert "D1 CONFIRMED, docs/PREREGISTRATION-DRIFT.md" in text and text.count("Lower the step first") == 1


def test_the_guide_says_below_which_drift_each_correction_held():
    from studies.report.verdict_text import drift_guide

    v = _decided()
    v["boundaries"] = [
        {"estimator": "gmc", "optimizer": "sgd", "boundary": 0.016, "low": 0.013, "high": 0.043, "censored": None},
        {"estimator": "is", "optimizer": "sgd", "boundary": 0.0133, "censored": "left"},
        {"estimator": "topr", "optimizer": "sgd", "boundary": 0.62, "censored": "right"},
        {"estimator": "topr", "optimizer": "adamclip", "boundary": 0.05, "censored": "right"}]
    text = drift_guide(v)
    assert "Under SGD: is failed already at the smallest drift measured (0.0133); gmc held below 0.016" in text
    assert "held at every level measured: topr (up to 0.62)" in text and "Under Adam + clip 1.0: held" in text
    assert text.endswith("at the Adam study's drift, early KL 0.106 (GMC's).")
    assert "measured under that correction's own updates" in text and "use one that held" not in text
    assert drift_guide({**v, "provisional": True}) == "" and drift_guide(None) == ""


def _step_arms():
    def arm(k, n=10):
        return {"n": n, "stable": k, "share": k / n, "pc_final": 0.5}

    return {"D3": {"verdict": "CONFIRMED", "ess-gmc": arm(10), "ess-is": arm(9),
                   "vcpo_minus_topr": {"mean": 0.073, "low": 0.052, "high": 0.091}},
            "D4": {"verdict": "REFUTED", "gmcstep": arm(5),
                   "gmcstep_minus_topr": {"mean": -0.14, "low": -0.186, "high": -0.094}},
            "D6": {"verdict": "REFUTED", **arm(0)},
            "step_arms": {"vcpo-seq_tis": arm(10), "ess-topr": {**arm(10), "lr_scale_median": 0.73},
                          "gmcstep-gmc": {**arm(5), "lr_scale_median": 0.961}}}


def test_the_step_size_arms_are_said_with_their_shares_and_paired_differences():
    from studies.report.verdict_text import step_control_sentence

    text = step_control_sentence(_step_arms())
    assert "(10 of 10 and 9 of 10 seeds)" in text and "+0.073 [+0.052, +0.091]" in text and "D3 CONFIRMED" in text
    assert "stable in 5 of 10, minus TOPR -0.140 [-0.186, -0.094] (D4 REFUTED)" in text
    assert "stable in 0 of 10 (D6 REFUTED)" in text and "itself stable in 10 of 10" in text
    assert "then over runs): ESS on TOPR 0.73, GMC's step form 0.96." in text
    assert step_control_sentence({"D3": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == ""


def test_d5_s_sentence_says_when_the_disclosed_deviation_would_change_the_verdict():
    from studies.report.verdict_text import d5_sentence

    def sig(h, f, p):
        return {"hits": h, "false_alarms": f, "p_fisher": p, "lead_median": 14}

    d5 = {"verdict": "REFUTED", "train_runs": 230,
          "signals": {"stale/ess": sig([0, 202], [1, 468], 1.0), "train/grad_norm": sig([1, 202], [4, 468], 0.83)},
          "deviation": {"train_runs": 220, "signals": {"stale/ess": sig([87, 202], [112, 468], 7.7e-7),
                                                       "train/grad_norm": sig([1, 202], [2, 468], 0.66)}}}
    text = d5_sentence({"D5": d5})
    assert "D5 REFUTED" in text and "before 0 of 202 held-out collapses and in 1 of 468" in text
    assert "which the same rule would call CONFIRMED" in text
    weak = {**d5, "deviation": {"train_runs": 220, "signals": {"stale/ess": sig([10, 202], [30, 468], 0.4)}}}
    assert "would call" not in d5_sentence({"D5": weak})
    assert d5_sentence({"D5": {**d5, "verdict": "INCONCLUSIVE"}}) == ""


@pytest.mark.parametrize("decided", [True, False])
def test_the_mechanism_section_takes_d1_s_answer_once_it_is_decided(monkeypatch, decided):
    import studies.report.verdict_text as drift_text
    from studies.report.sections import mechanism as mech

    row = {"arm": "sgd", "estimator": "gmc", "stable": 1, "runs": 1}
    monkeypatch.setattr("grids.mechanism_table.drift_table", lambda *a: pd.DataFrame([row]))
    monkeypatch.setattr(mech, "_drift_cells", lambda v: "cells")
    monkeypatch.setattr(drift_text, "read_verdicts", lambda root=None: _decided() if decided else None)
    text = "\n".join(mech.drift_lines(None, None, None))
    assert ("alone could not separate" in text and "D1 CONFIRMED" in text) is decided
    assert ("intervention does not separate the update rule" in text) is not decided


def _beside():
    return {"d2_whole_seeds": {"resampling": "whole seeds", "n_boot": 2000, "draws": 1996, "low": 0.07, "high": 0.75},
            "after_collapse": {"sgd": {"points": 195, "unstable": 43, "after_collapse": 32, "whole_window_after": 30,
                                       "collapse_unknown": 0},
                               "adamclip": {"points": 175, "unstable": 16, "after_collapse": 12,
                                            "whole_window_after": 11, "collapse_unknown": 0}},
            "precollapse_boundaries": [
                {"estimator": "gmc", "optimizer": "adamclip", "boundary": 0.0221, "early_boundary": 0.0229,
                 "censored": None, "low": 0.0187, "high": 0.0352, "moved": True, "outside_early_interval": False},
                {"estimator": "topr", "optimizer": "sgd", "boundary": 0.194, "early_boundary": 0.194,
                 "censored": None, "low": 0.05, "high": 0.85, "moved": False, "outside_early_interval": False}],
            "gains": [
                {"optimizer": "sgd", "level": "sgd0.0001", "estimator": "gspo", "n": 5, "stable": 5, "held": True,
                 "learned": False, "pc0": 0.514, "pc_final": 0.526, "gain": 0.012, "low": 0.012, "high": 0.013,
                 "drift": 9e-6},
                {"optimizer": "sgd", "level": "sgd0.0001", "estimator": "gmc", "n": 10, "stable": 10, "held": True,
                 "learned": True, "pc0": 0.514, "pc_final": 0.675, "gain": 0.161, "low": 0.156, "high": 0.164,
                 "drift": 0.0076},
                {"optimizer": "adamclip", "level": "adamclip0.0001", "estimator": "gmc", "n": 10, "stable": 2,
                 "held": False, "learned": False, "pc0": 0.514, "pc_final": 0.3, "gain": -0.215, "low": -0.311,
                 "high": -0.11, "drift": 0.0845}],
            "axis_dependence": [{"optimizer": "sgd", "level": "sgd0.0001", "min": ["gspo", 9e-6],
                                 "max": ["tic_mask", 0.0187], "ratio": 2088.4}]}


def test_the_section_shows_what_is_beside_the_verdicts(tmp_path):
    from schema.io import write_json
    from studies.report.sections.drift import drift_lines
    from studies.report.verdict_text import drift_guide

    v = _decided()
    v["boundaries"][0].update({"bracket": [0.0148, 0.0845], "censored": None})
    v["beside"] = _beside()
    write_json(tmp_path / "v.json", v)
    text = "\n".join(drift_lines(tmp_path / "v.json"))
    assert "interpolated between the tested KL 0.0148 and 0.0845, 5.7x apart, no level run between" in text
    assert "read after the outcome in 44 of the 59 unstable runs on the map (of 370 points)" in text
    assert "41 of them at or before its first update" in text
    assert "| gmc | adamclip | 0.0229 | 0.0221 [0.0187, 0.0352] | yes, within the early interval |" in text
    assert "1 of 2 boundaries move on the pre-collapse window, none beyond" in text
    assert ("| SGD lr 0.0001 | gspo | 9e-06 | 5 of 5 | 0.514 | +0.012 [+0.012, +0.013] | held, no gain beyond 0.03 |"
            in text)
    assert "SGD lr 0.0001: 9e-06 (gspo) to 0.0187 (tic_mask), 2,088x" in text
    guide = drift_guide(v)
    assert "under SGD: at lr 0.0001, gmc" in guide and "gspo" not in guide.split("Which correction")[1]
    assert "under Adam + clip 1.0: at lr 0.0001, none" in guide


def test_d2_says_which_resampling_and_shows_whole_seeds():
    from studies.report.verdict_text import d2_sentence

    bounds = {e: 0.05 for e in ("gmc", "topr", "vespo")}
    d2 = {"verdict": "INCONCLUSIVE", "spearman": 0.43, "low": -0.14, "high": 0.79, "below_gmc": [],
          "boundaries_sgd": {**bounds, "vespo": 0.014}, "boundaries_adamclip": bounds}
    text = d2_sentence({"D2": d2, "beside": _beside()})
    assert "resamples corrections, not seeds" in text and "gives [0.07, 0.75], above 0" in text
    assert "the verdict stays INCONCLUSIVE because the ordering part does not hold" in text
    assert "whole seeds" not in d2_sentence({"D2": d2})


def test_d5_s_cell_names_both_readings_when_they_disagree():
    from studies.report.verdict_text import verdict_cell

    def sig(h, f, p):
        return {"hits": h, "false_alarms": f, "p_fisher": p}

    d5 = {"verdict": "REFUTED", "train_runs": 230,
          "signals": {"stale/ess": sig([0, 202], [1, 468], 1.0), "train/grad_norm": sig([1, 202], [4, 468], 0.83)},
          "deviation": {"train_runs": 220, "signals": {"stale/ess": sig([87, 202], [112, 468], 7.7e-7),
                                                       "train/grad_norm": sig([1, 202], [2, 468], 0.66)}}}
    cell = verdict_cell({"D5": d5}, "D5")
    assert cell.startswith("REFUTED on the 230 training runs the rule selects (ESS fraction hits 0/202")
    assert "CONFIRMED on the 220 its text counts (ESS fraction hits 87/202, Fisher p = 7.7e-07)" in cell
    same = {**d5, "deviation": {**d5["deviation"], "signals": d5["signals"]}}
    assert verdict_cell({"D5": same}, "D5") == "REFUTED"
    assert verdict_cell({"D2": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}, "D2") == "INCONCLUSIVE (not yet run)"


def test_f24_s_caption_gives_the_runs_per_cell_and_the_widest_gap():
    from studies.drift.figures.f24_drift_map import caption

    m = {"seeds": list(range(10)), "share": 0.8, "boundaries": [
        {"estimator": "gmc", "optimizer": "adamclip", "bracket": [0.0148, 0.0845],
         "levels": [{"n": 10}, {"n": 10}, {"n": 10}]},
        {"estimator": "is", "optimizer": "sgd", "bracket": None, "levels": [{"n": 10}, {"n": 5}]}]}
    text = caption(m)
    assert "hold different numbers of runs: 10 in 4 cells, 5 in 1 cell" in text
    assert "gmc under adamclip between KL 0.0148 and 0.0845 (5.7x)" in text
