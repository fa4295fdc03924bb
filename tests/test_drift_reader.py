"""A run's drift (llm_runs.drift) and its place on a map (grids.drift_place) from this toolkit's runs and from verl
and TRL metrics exports: the early window's summary, the exports read, the reader's edge cases (outside the
measured range, missing values, things that are not runs) and the bad values it names."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _drift import _table

from grids import drift_place
from llm_runs import drift


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
    """verl's file logger writes one JSON object per step, {"step": n, "data": {metric: value}}, the first update at
    step 1 (a validation before training at step 0 carries no training metric); the KL is rollout_corr/k3_kl, the
    sequence chi^2 rollout_corr/chi2_seq."""
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as fh:
        fh.write(json.dumps({"step": 0, "data": {"val-core/acc": 0.5}}) + "\n")
        for t in range(30):  # update t at step t + 1
            data = {"rollout_corr/k3_kl": 0.001 * t, "rollout_corr/chi2_seq": 0.1 * t, "actor/pg_loss": 0.5}
            fh.write(json.dumps({"step": t + 1, "data": data}) + "\n")
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


def test_a_run_of_a_packed_grid_reads_like_its_folder(tmp_path):
    from pathlib import Path

    from schema.packing import unpack_run
    from schema.results import is_packed_run

    run = Path(__file__).resolve().parents[1] / "results" / "llm" / "study" / "long-gmc-d64-s0"
    assert is_packed_run(run)  # the committed study grid is packed (docs/RESULTS.md)
    m, delay = drift.read_export(run)
    folder, d2 = drift.read_export(unpack_run(run, tmp_path / run.name))
    assert delay == d2 == 64 and drift.summary(m, delay) == drift.summary(folder, d2)


# --- the reader's edge cases: outside the measured range, missing values, things that are not runs ----------

_TABLE = {"axis": "kl", "boundaries": [
    {"estimator": "gmc", "optimizer": "sgd", "boundary": 0.02, "censored": None,
     "levels": [{"drift": 0.01, "stable_share": 1.0, "n": 5}, {"drift": 0.6, "stable_share": 0.2, "n": 5}]},
    {"estimator": "is", "optimizer": "sgd", "boundary": 0.02, "censored": None,
     "levels": [{"drift": 0.01, "stable_share": 1.0, "n": 5}, {"drift": 0.05, "stable_share": 0.9, "n": 5}]}]}


def _verl_export(path, kl_of_step, steps=range(1, 41)):
    """A verl file-logger export, steps numbered as verl numbers them (the first update at step 1)."""
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
    assert "KL logged at updates 0\u20139 (counted from 0); the early window is updates 25\u201344" in out
    assert "logs no KL" not in out


@pytest.mark.parametrize("stack,first", [("verl", 1), ("trl", 1), ("toolkit", 0)])
def test_the_early_window_starts_at_update_d_whatever_a_stack_numbers_its_first_update(tmp_path, stack, first):
    """verl and TRL log their first update at step 1, this toolkit at 0: the early window is the updates d .. d + 19
    (counted from 0) in each, so a KL equal to the update's index has the early median d + 9.5."""
    import pandas as pd

    d = 4
    kl = drift.COLUMNS[stack]["kl"][0]
    m = pd.DataFrame({"step": [u + first for u in range(60)], kl: [float(u) for u in range(60)]})
    s = drift.summary(m, d, stack)
    if stack == "trl":  # TRL reads only the updates d steps stale: u mod (d + 1) == d
        want = float(np.median([u for u in range(60) if u % (d + 1) == d][:drift.EARLY_UPDATES]))
    else:
        want = d + (drift.EARLY_UPDATES - 1) / 2
    assert s["kl_early"] == want and s["kl_steps"] == (0, 59)


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
    (lambda d: _verl_export(d / "m.jsonl", lambda t: 0.02 if t <= 30 else "n/a"), ["--stack", "verl", "--delay", "4"],
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
