"""A run's drift (llm_runs.drift) and its place on a map (grids.drift_place) from this toolkit's runs and from verl
and TRL metrics exports, and the drift map's failure boundary (studies.drift)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from grids import drift_place
from grids.run_table import MARGIN
from llm_runs import drift
from studies.common import d5, drift_map, drift_runs
from studies.drift import analysis, beside, verdicts


def _table(n=100, d=10):
    steps = np.arange(n)
    kl = np.where(steps < d, 0.0, 0.01 * (1 + (steps - d)))  # grows after the delay
    return pd.DataFrame({"step": steps, "drift/kl": kl, "stale/chi2": 2 * kl, "drift/ess_ratio": 1 - kl,
                         "drift/abs_log_w_median": kl / 2})


def test_summary_reads_the_early_window_and_everything_after_the_delay():
    s = drift.summary(_table(), 10)
    assert s["kl_early"] == pytest.approx(np.median(0.01 * np.arange(1, 21)))
    assert s["kl_all"] == pytest.approx(np.median(0.01 * np.arange(1, 91)))
    assert s["chi2_early"] == pytest.approx(2 * s["kl_early"]) and s["kl_column"] == "drift/kl"
    with pytest.raises(ValueError, match="delay must be an integer >= 0"):
        drift.summary(_table(), -1)
    with pytest.raises(ValueError, match="unknown stack 'jax'"):
        drift.summary(_table(), 0, "jax")
    with pytest.raises(ValueError, match="no step column"):
        drift.summary(_table().drop(columns="step"), 0)


def test_a_mechanism_run_s_kl_column_is_read_where_drift_columns_are_absent():
    t = _table().rename(columns={"drift/kl": "mech/kl"}).drop(columns=["drift/ess_ratio"])
    s = drift.summary(t, 10)
    assert s["kl_column"] == "mech/kl" and math.isnan(s["ess_ratio_early"])


def test_a_verl_file_logger_export(tmp_path):
    """verl's file logger writes one JSON object per step, {"step": n, "data": {metric: value}}; the KL
    is rollout_corr/k3_kl, the sequence chi^2 rollout_corr/chi2_seq."""
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as fh:
        for t in range(30):
            fh.write(json.dumps({"step": t, "data": {"rollout_corr/k3_kl": 0.001 * t, "rollout_corr/chi2_seq": 0.1 * t,
                                                     "actor/pg_loss": 0.5}}) + "\n")
    m, delay = drift.read_export(path, "verl")
    assert delay is None
    s = drift.summary(m, 4, "verl")
    assert s["kl_column"] == "rollout_corr/k3_kl" and s["kl_early"] == pytest.approx(0.001 * np.median(range(4, 24)))
    assert s["chi2_column"] == "rollout_corr/chi2_seq" and math.isnan(s["abs_log_w_median_early"])


def test_a_trl_trainer_state_with_the_toolkit_adapter(tmp_path, capsys):
    hist = [{"step": t, "loss": 0.1, "mech/kl": 0.002 * t, "stale/chi2": 0.05 * t} for t in range(1, 40)]
    hist.append({"train_runtime": 12.0})  # TRL's last entry has no step
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": hist, "global_step": 39}))
    assert drift_place.main([str(path), "--stack", "trl"]) == 2  # the delay is not in the export
    assert "give --delay" in capsys.readouterr().err
    rc = drift_place.main([str(path), "--stack", "trl", "--delay", "4"])
    out = capsys.readouterr().out
    assert rc == 0 and "kl" in out and "[mech/kl]" in out


def test_a_trl_trainer_state_is_read_at_its_fixed_delay_steps_with_its_ess(tmp_path, capsys):
    """TRL counts steps from 1 and, with steps_per_generation = d + 1, cycles the delay through 0..d: update
    u = step - 1 is u mod (d + 1) stale, and only the updates d stale are read; the ESS axis is
    step/ess_ratio (a step-size control's) before stale/ess (logged always)."""
    d = 3
    hist = [{"step": s, "mech/kl": 0.01 * ((s - 1) % (d + 1)) + 1e-4 * s, "stale/ess": 0.9 - 0.001 * s}
            for s in range(1, 101)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": hist, "global_step": 100}))
    m, _ = drift.read_export(path, "trl")
    s = drift.summary(m, d, "trl")
    at_d = [h for h in hist if (h["step"] - 1) % (d + 1) == d]  # steps 4, 8, ..., 100
    assert s["fixed_delay_updates"] == len(at_d) == 25
    early = at_d[:drift.EARLY_UPDATES]
    assert s["kl_early"] == pytest.approx(np.median([h["mech/kl"] for h in early]))
    assert s["kl_all"] == pytest.approx(np.median([h["mech/kl"] for h in at_d]))
    assert s["ess_ratio_column"] == "stale/ess"
    assert s["ess_ratio_early"] == pytest.approx(np.median([h["stale/ess"] for h in early]))
    for h in hist:
        h["step/ess_ratio"] = 0.5
    path.write_text(json.dumps({"log_history": hist, "global_step": 100}))
    assert drift.summary(drift.read_export(path, "trl")[0], d, "trl")["ess_ratio_column"] == "step/ess_ratio"
    assert drift_place.main([str(path), "--stack", "trl", "--delay", str(d)]) == 0
    out = capsys.readouterr().out
    assert "read at the 25 updates 3 steps stale" in out and "[step/ess_ratio]" in out


def test_bad_exports_are_named(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"step": 0, "data": {}}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        drift.read_export(bad, "verl")
    with pytest.raises(ValueError, match="no such file"):
        drift.read_export(tmp_path / "missing", "verl")
    other = tmp_path / "o.json"
    other.write_text("[]")
    with pytest.raises(ValueError, match="not a run folder"):
        drift.read_export(other, "trl")


def test_a_toolkit_run_folder(tmp_path):
    from conftest import tiny

    from llm_runs.trainer import Trainer

    cfg = tiny(tmp_path / "cache", delay=2, steps=4, drift_diagnostics=True)
    Trainer(cfg, tmp_path / "run", progress=False, log=lambda m: None).run()
    m, delay = drift.read_export(tmp_path / "run")
    s = drift.summary(m, delay)
    assert delay == 2 and s["kl_column"] == "drift/kl" and s["kl_early"] > 0


def test_place_reads_the_map():
    table = {"axis": "kl", "boundaries": [
        {"estimator": "gmc", "optimizer": "sgd", "boundary": 0.02, "censored": None,
         "levels": [{"drift": 0.01, "stable_share": 1.0, "n": 5}, {"drift": 0.03, "stable_share": 0.2, "n": 5}]}]}
    (row,) = drift.place(0.025, "kl", table)
    assert row["nearest_drift"] == 0.03 and row["stable_share"] == 0.2 and row["below_boundary"] is False
    (row,) = drift.place(0.011, "kl", table)
    assert row["stable_share"] == 1.0 and row["below_boundary"] is True
    with pytest.raises(ValueError, match="axis is 'kl'"):
        drift.place(0.01, "chi2", table)


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


def _runs(shares_sgd, shares_clip, drifts_sgd, drifts_clip, n=5):
    rows = []
    for fam, shares, drifts in (("sgd", shares_sgd, drifts_sgd), ("adamclip", shares_clip, drifts_clip)):
        for i, (share, d) in enumerate(zip(shares, drifts)):
            level = f"{fam}{(i + 1) * 1e-4:g}"
            for s in range(n):
                rows.append({"level": level, "family": fam, "estimator": "gmc", "delay": 64, "seed": s,
                             "complete": True, "stable": s < round(share * n), "kl_early": d, "pc_final": 0.5})
    return pd.DataFrame(rows)


def test_d1_confirms_matching_boundaries_and_refutes_sgd_holding_beyond_adam():
    same = _runs([1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.01, 0.03, 0.06], [0.01, 0.03, 0.08])
    bounds = drift_map.boundaries(same, list(range(5)), n_boot=200)
    v = verdicts.d1(bounds, drift_map.cell_table(same, list(range(5))), adam_level=0.05)
    assert v["verdict"] == "CONFIRMED"
    apart = _runs([1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.01, 0.04, 0.08], [0.01, 0.03, 0.08])
    bounds = drift_map.boundaries(apart, list(range(5)), n_boot=200)
    v = verdicts.d1(bounds, drift_map.cell_table(apart, list(range(5))), adam_level=0.05)
    assert v["verdict"] == "REFUTED" and v["refuting_pairs"]


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


def test_the_report_section_shows_saved_non_finite_values_as_not_available():
    from studies.report.fmt import num as _num

    assert _num("nan") == "n/a" and _num(None) == "n/a" and _num(float("inf")) == "n/a" and _num(0.01234) == "0.0123"


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


def test_a_run_of_a_packed_grid_reads_like_its_folder(tmp_path):
    from pathlib import Path

    from schema.packing import unpack_run
    from schema.results import is_packed_run

    run = Path(__file__).resolve().parents[1] / "results" / "llm" / "study" / "long-gmc-d64-s0"
    assert is_packed_run(run)  # the committed study grid is packed (docs/RESULTS.md)
    m, delay = drift.read_export(run)
    folder, d2 = drift.read_export(unpack_run(run, tmp_path / run.name))
    assert delay == d2 == 64 and drift.summary(m, delay) == drift.summary(folder, d2)


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


def test_d5_s_rule_reads_the_counts_as_the_verdicts_file_saves_them():
    def sig(h, f, p):
        return {"hits": h, "false_alarms": f, "p_fisher": p}

    assert d5.d5_rule({"a": sig([87, 202], [112, 468], 7.7e-7), "b": sig([0, 0], [1, 468], "NaN")}) == "CONFIRMED"
    assert d5.d5_rule({"a": sig([0, 202], [1, 468], 1.0), "b": sig([1, 202], [4, 468], 0.83)}) == "REFUTED"
    assert d5.d5_rule({"a": sig([10, 202], [20, 468], 0.1)}) == "INCONCLUSIVE"


# --- the reader's edge cases: outside the measured range, missing values, things that are not runs ----------

_TABLE = {"axis": "kl", "boundaries": [
    {"estimator": "gmc", "optimizer": "sgd", "boundary": 0.02, "censored": None,
     "levels": [{"drift": 0.01, "stable_share": 1.0, "n": 5}, {"drift": 0.6, "stable_share": 0.2, "n": 5}]},
    {"estimator": "is", "optimizer": "sgd", "boundary": 0.02, "censored": None,
     "levels": [{"drift": 0.01, "stable_share": 1.0, "n": 5}, {"drift": 0.05, "stable_share": 0.9, "n": 5}]}]}


def _verl_export(path, kl_of_step, steps=range(40)):
    path.write_text("".join(json.dumps({"step": t, "data": {"rollout_corr/k3_kl": kl_of_step(t)}}) + "\n"
                            for t in steps))
    return path


def test_outside_the_measured_range_no_correction_is_said_to_hold(tmp_path, monkeypatch, capsys):
    for far in (2.0, 0.61, 1e-4):
        with pytest.raises(ValueError, match="(beyond the largest|below the smallest) drift measured .*: no "
                                             "correction was measured there"):
            drift.place(far, "kl", _TABLE)
    rows = {r["estimator"]: r for r in drift.place(0.3, "kl", _TABLE)}
    assert rows["is"]["outside"] == "beyond" and rows["gmc"]["outside"] is None
    path = tmp_path / "map.json"
    path.write_text(json.dumps(_TABLE))
    monkeypatch.setattr(drift_place, "map_path", lambda: path)
    assert drift_place.main([str(_verl_export(tmp_path / "m.jsonl", lambda t: 2.0)), "--stack", "verl",
                             "--delay", "4"]) == 0
    out = capsys.readouterr().out
    assert "beyond the largest drift measured (0.6): no correction was measured there" in out
    assert "held" not in out
    assert drift_place.main([str(_verl_export(tmp_path / "m.jsonl", lambda t: 0.3)), "--stack", "verl",
                             "--delay", "4"]) == 0
    out = capsys.readouterr().out
    assert "held (stable share >= 0.8) for: none" in out and "is         sgd       beyond" in out


@pytest.mark.parametrize("blank", ["n/a", "", None, "NaN"])
def test_missing_values_are_counted_and_too_many_refuse_the_place(tmp_path, monkeypatch, capsys, blank):
    path = tmp_path / "map.json"
    path.write_text(json.dumps(_TABLE))
    monkeypatch.setattr(drift_place, "map_path", lambda: path)
    half = _verl_export(tmp_path / "h.jsonl", lambda t: 0.02 if t % 2 else blank)
    s = drift.summary(*drift.read_export(half, "verl")[:1], 4, "verl")
    assert (s["kl_early_rows"], s["kl_early_missing"]) == (20, 10) and s["kl_early"] == 0.02
    assert drift_place.main([str(half), "--stack", "verl", "--delay", "4"]) == 0
    out = capsys.readouterr().out
    assert "10 of 20 early values missing" in out
    most = _verl_export(tmp_path / "m.jsonl", lambda t: 0.02 if t % 4 == 0 else blank)
    assert drift_place.main([str(most), "--stack", "verl", "--delay", "4"]) == 0
    out = capsys.readouterr().out
    assert "15 of the early window's 20 kl values are missing" in out and "held" not in out


def test_kl_logged_only_before_the_window_is_said_so(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": t, "data": {"rollout_corr/k3_kl": 0.02}}) + "\n" for t in range(1, 11))
                    + "".join(json.dumps({"step": t, "data": {"other": 1.0}}) + "\n" for t in range(11, 60)))
    assert drift_place.main([str(path), "--stack", "verl", "--delay", "25"]) == 0
    out = capsys.readouterr().out
    assert "KL logged at steps 1\u201310; the window starts at 25" in out and "logs no KL" not in out


@pytest.mark.parametrize("make", [
    lambda d: (d / "run").mkdir() or (d / "run" / "summary.json").write_text("{}") or d / "run",
    lambda d: (d / "s.jsonl").write_text('"a"\n"b"\n') or d / "s.jsonl",
    lambda d: (d / "n.jsonl").write_text("1\n2\n") or d / "n.jsonl",
    lambda d: (d / "d.jsonl").write_text('{"data": {"x": 1}}\n') or d / "d.jsonl",
    lambda d: (d / "e.jsonl").write_text("\n") or d / "e.jsonl",
    lambda d: (d / "b.csv").write_bytes(b"\xff\xfe\x00garbage") or d / "b.csv",
    lambda d: (d / "b.json").write_bytes(b"\xff\xfe\x00") or d / "b.json",
    lambda d: (d / "t.json").write_text('{"log_history": [1, 2, {"step": 1}]}') or d / "t.json",
    lambda d: (d / "m").mkdir() or (d / "m" / "metrics.csv").write_text("step,x\n0,1\n") or d / "m",
])
def test_things_that_are_not_runs_are_one_line_and_exit_2(tmp_path, capsys, make):
    rc = drift_place.main([str(make(tmp_path)), "--delay", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")


def test_the_reader_names_the_run_s_group_size_and_the_nearest_measured_one():
    from grids.drift_place import group_size_lines

    assert "measured at G = 8" in group_size_lines(8, [])[0] and len(group_size_lines(8, [])) == 1
    out = group_size_lines(64, [])
    assert "G = 64 lies outside the measured range (8-8)" in out[1]
    cells = [{"G": G, "B": 128 // G, "level": "adamclip0.0001", "estimator": "gmc", "stable_share": s, "n": 5,
              "kl_early_pre_collapse": 0.05} for G, s in ((4, 0.2), (16, 0.6), (32, 1.0))]
    out = group_size_lines(24, cells)
    assert "nearest measured G = 32" in out[0] and "G = 4, 8, 16, 32" in out[0]
    assert not any("outside" in line for line in out)
    assert any("stable 100% of 5" in line for line in out)
    assert "unknown (give --group-size)" in group_size_lines(None, cells)[0]


def test_a_group_size_below_two_is_refused(tmp_path, capsys):
    from grids.drift_place import main

    assert main([str(tmp_path), "--group-size", "1"]) == 2
    assert "--group-size must be an integer >= 2, got 1" in capsys.readouterr().err


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


# --- nothing silently wrong: each bad value named, each unplaceable drift said why ---------------------------


def _written(path, text):
    path.write_text(text)
    return path


def _fake_run(folder, delay=4, group_size=8, kl=0.02, steps=40):
    """A run folder as the reader sees it: config.json and a metrics table of steps 0..T."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"config": {"delay": delay, "group_size": group_size,
                                                               "steps": steps, "estimator": "gmc"}}))
    rows = "".join(f"{t},{kl}\n" for t in range(steps)) + f"{steps},\n"
    (folder / "metrics.csv").write_text("step,drift/kl\n" + rows)
    return folder


@pytest.mark.parametrize(("make", "args", "rc", "want", "never"), [
    # a run's settings: named with the run and the value, never a traceback or a truncation
    (lambda d: _fake_run(d / "r", group_size=0), [], 2, r"r/config.json: group_size = 0 is not an integer >= 2", None),
    (lambda d: _fake_run(d / "r", group_size="abc"), [], 2, r"group_size = 'abc' is not an integer >= 2", None),
    (lambda d: _fake_run(d / "r", delay=2.7), [], 2, r"r/config.json: delay = 2.7 is not an integer >= 0", None),
    (lambda d: _fake_run(d / "r", delay=True), [], 2, r"r/config.json: delay = True is not an integer >= 0", None),
    # outside the group sizes measured: said so with the nearest measured G, and no "held" list
    (lambda d: _fake_run(d / "r", group_size=64), [], 0,
     r"map: not placed: G = 64 lies outside the group sizes measured \(8-8; nearest measured G = 8\)", "held ("),
    # an early KL of 0 is no drift (on-policy), of inf an overflow: neither is "no level to compare" nor "collapsed"
    (lambda d: _fake_run(d / "r", kl=0.0), [], 0, r"map: an early KL per token of 0: no drift was measured .*on-policy",
     "held ("),
    (lambda d: _fake_run(d / "r", kl="inf"), [], 0, r"map: an early KL per token of inf: the KL overflowed",
     "collapse"),
    # a verl export: n/a is a missing value, counted and shown; a value neither a number nor missing is refused
    (lambda d: _verl_export(d / "m.jsonl", lambda t: "n/a"), ["--stack", "verl", "--delay", "4"], 0,
     r"its KL column rollout_corr/k3_kl holds no value at all", "held ("),
    (lambda d: _verl_export(d / "m.jsonl", lambda t: 0.02 if t < 30 else "n/a"), ["--stack", "verl", "--delay", "4"],
     0, r"rollout_corr/k3_kl; 10 of 36 all values missing", None),
    (lambda d: _verl_export(d / "m.jsonl", lambda t: "abc" if t == 7 else 0.02), ["--stack", "verl", "--delay", "4"],
     2, r"rollout_corr/k3_kl at step 7: 'abc' is not a number", None),
    (lambda d: _verl_export(d / "m.jsonl", lambda t: t == 7 or 0.02), ["--stack", "verl", "--delay", "4"],
     2, r"rollout_corr/k3_kl at step 7: True is not a number", None),
    (lambda d: _written(d / "m.csv", "step,rollout_corr/k3_kl\n0,0.1\n1.5,0.1\n"), ["--stack", "verl", "--delay", "0"],
     2, r"the step column 'step' at row 2 holds '1.5': a step is an integer", None),
])
def test_the_drift_reader_names_bad_values_and_says_why_a_drift_is_not_placed(tmp_path, monkeypatch, capsys, make,
                                                                             args, rc, want, never):
    import re

    path = tmp_path / "map.json"
    path.write_text(json.dumps(_TABLE))
    monkeypatch.setattr(drift_place, "map_path", lambda: path)
    monkeypatch.setattr(drift_place, "group_size_cells", list)
    got = drift_place.main([str(make(tmp_path)), *args])
    cap = capsys.readouterr()
    text = cap.err if rc else cap.out
    assert got == rc and re.search(want, text), (cap.out, cap.err)
    assert "Traceback" not in cap.err and (rc == 0 or len(cap.err.strip().splitlines()) == 1)
    assert never is None or never not in cap.out, cap.out


@pytest.mark.parametrize(("drift_value", "reason"), [
    (0.0, "no drift was measured"), (math.inf, "the KL overflowed"), (math.nan, "not a number"),
    (-0.01, "negative, so not a KL"), (-math.inf, "negative, so not a KL")])
def test_place_says_why_a_drift_has_no_place_before_it_reads_any_map(drift_value, reason):
    with pytest.raises(ValueError, match=reason):
        drift.place(drift_value, "kl", {"axis": "chi2"})  # the drift's reason, not the map's
