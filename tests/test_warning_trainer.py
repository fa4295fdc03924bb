"""The early warning live in the toolkit's trainer (``early_warning``): a run made to drift (a large step at delay 4)
fires it, an on-policy run does not; off leaves the run's table as it was; stop and lower_step act."""
from __future__ import annotations

import logging

import pandas as pd
import pytest
from conftest import tiny

from llm_runs.trainer import Trainer
from schema.metrics import WARN

DRIFT = {"delay": 4, "lr": 0.03, "steps": 8}  # the tiny model moves far from its behaviour policy within 7 updates


def _run(tmp_path, name, **kw):
    cfg = tiny(tmp_path / "cache", **kw)
    out = tmp_path / name
    result = Trainer(cfg, out, progress=False, log=lambda m: None).run()
    return result, pd.read_csv(out / "metrics.csv", dtype=str), out


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llm_runs.warning"]


def test_a_drifting_run_fires_and_an_on_policy_run_does_not(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        _, drift, _ = _run(tmp_path, "drift", early_warning="log", **DRIFT)
    upd = drift[drift["step"].astype(int) < DRIFT["steps"]]
    fired = upd["warn/fired"].astype(int).tolist()
    assert fired[-1] == 1 and fired[:6] == [0] * 6  # the mean over 7 updates exists from update 6 on
    first = fired.index(1)
    assert float(upd["warn/kl_rolling"].iloc[first]) >= 0.12472130167818271
    assert len(_warned(caplog)) == 1 and f"at update {first}" in _warned(caplog)[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        _, quiet, _ = _run(tmp_path, "on_policy", early_warning="log", **{**DRIFT, "delay": 0})
    upd = quiet[quiet["step"].astype(int) < DRIFT["steps"]]
    assert upd["warn/fired"].astype(int).eq(0).all() and not _warned(caplog)
    assert upd["warn/kl"].astype(float).abs().max() < 1e-6  # on-policy: the ratios are 1 up to the forward's rounding


def test_off_is_the_run_as_before_and_log_changes_no_number(tmp_path):
    _, off, _ = _run(tmp_path, "off", **DRIFT)
    _, on, _ = _run(tmp_path, "on", early_warning="log", **DRIFT)
    assert not any(c.startswith("warn/") for c in off.columns)
    assert list(on.columns) == list(off.columns) + list(WARN)
    keep = [c for c in off.columns if not c.startswith("perf/")]
    pd.testing.assert_frame_equal(on[keep], off[keep])  # as text: byte for byte


def test_stop_saves_a_checkpoint_and_stops(tmp_path):
    result, m, out = _run(tmp_path, "stop", early_warning="stop", **{**DRIFT, "steps": 12})
    first = m["warn/fired"].astype(int).tolist().index(1)
    assert result.status == "interrupted" and result.summary == {"signal": "early_warning"}
    assert result.step == first + 1 and len(m) == first + 1
    assert (out / "checkpoints" / f"step-{first + 1:06d}").is_dir()


def test_lower_step_halves_every_step_after_the_firing(tmp_path):
    _, log, _ = _run(tmp_path, "log", early_warning="log", **{**DRIFT, "steps": 9})
    _, low, _ = _run(tmp_path, "low", early_warning="lower_step", **{**DRIFT, "steps": 9})
    first = log["warn/fired"].iloc[:9].astype(int).tolist().index(1)
    assert first < 8
    keep = [c for c in log.columns if not c.startswith("perf/")]
    # up to the firing update both runs took the same steps, byte for byte
    pd.testing.assert_frame_equal(log[keep].iloc[:first + 1], low[keep].iloc[:first + 1])
    # the next update is the first taken at half the rate: everything it measured before its step is the same; the
    # cosine of its step to the previous one (train/update_cos) is left out: it is scale-free only in exact
    # arithmetic (the step is the float32 difference of the parameters after and before it, each rounded to 2^-24 of
    # the parameter, not of the step, so a step and its half give cosines a few 2^-24 |theta| / |step| apart)
    same = [c for c in keep if c != "train/update_cos"]
    pd.testing.assert_frame_equal(log[same].iloc[first + 1:first + 2], low[same].iloc[first + 1:first + 2])
    assert not log[keep].iloc[first + 2:].equals(low[keep].iloc[first + 2:])


def test_a_bad_switch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="early_warning must be one of"):
        _run(tmp_path, "bad", early_warning="loud", steps=1)


def test_a_run_stopped_by_the_warning_resumes_as_if_never_stopped(tmp_path):
    cfg = tiny(tmp_path / "cache", early_warning="stop", **{**DRIFT, "steps": 10})
    out = tmp_path / "stop"
    first = Trainer(cfg, out, progress=False, log=lambda m: None).run()
    assert first.status == "interrupted" and first.step == 7
    again = Trainer(cfg, out, progress=False, log=lambda m: None, resume=True).run()
    assert again.status == "complete"
    _, log, _ = _run(tmp_path, "log", early_warning="log", **{**DRIFT, "steps": 10})
    resumed = pd.read_csv(out / "metrics.csv", dtype=str)
    keep = [c for c in log.columns if not c.startswith("perf/")]
    pd.testing.assert_frame_equal(resumed[keep], log[keep])  # the stop and the resume changed no number
