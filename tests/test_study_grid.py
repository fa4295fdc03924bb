"""The study grid (its plan, folders and price) and the grid check: a foreign run, a run without metrics, a
hand-assembled folder or a run from another machine's warm start is refused by name; every committed grid
records the settings its definition gives; the study runs through either executor."""
from __future__ import annotations

import pytest
from _study_runs import REPO, _copy_committed, _fake_run, _fake_study, _set_warm_start

# --------------------------------------------------------------------------- the study grid


def test_primary_grid_is_seed_major_paired_and_runs_delay_zero_once():
    from grids.sweep import plan
    from studies.grids import GRIDS
    from studies.staleness.grids import ESTIMATORS

    study = GRIDS["primary"]
    cells = plan(study)
    per_seed = 2 * (1 + len(ESTIMATORS) * 2 + 1)
    assert len(cells) == 10 * per_seed == 480
    assert [c.seed for c in cells] == sorted(c.seed for c in cells)  # seed-major
    d0 = [c for c in cells if c.delay == 0]
    assert len(d0) == 20 and {c.estimator for c in d0} == {"gmc"}
    stale = [c for c in cells if c.estimator == "stale"]
    assert {c.delay for c in stale} == {64} and len(stale) == 20
    for c in cells:  # common random numbers: everything but the estimator and delay is shared within a seed
        o = c.overrides
        assert o["seed"] == c.seed and o["estimator"] == c.estimator and o["delay"] == c.delay
        assert o["warm_start_seed"] == 0
    same_seed = [c.overrides for c in cells if c.seed == 3 and c.horizon == "long"]
    shared = {k for k in same_seed[0] if k not in ("estimator", "delay")}
    assert all({k: o[k] for k in shared} == {k: same_seed[0][k] for k in shared} for o in same_seed)


def test_study_folders_honour_the_results_root(tmp_path, monkeypatch):
    from studies.grids import GRIDS

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert GRIDS["primary"].default_out() == tmp_path / "llm" / "study"
    assert GRIDS["pilot"].default_out() == tmp_path / "llm" / "pilot"


def test_dry_run_prices_the_plan_and_names_missing_estimators(capsys):
    from grids.runner import estimate_seconds, missing_estimators
    from studies.grids import GRIDS
    from studies.run import main

    assert main(["--dry-run", "--grid", "pilot", "--out", "/nonexistent/pilot"]) == 0
    out = capsys.readouterr().out
    assert "long-gmc-d0-s0" in out and "3 runs (3 long)" in out and "estimated" in out
    cells = GRIDS["primary"].cells()
    one = estimate_seconds(cells, 1, {"short": 0.1, "long": 0.2}, {"short": 0.0, "long": 0.0})
    two = estimate_seconds(cells, 2, {"short": 0.1, "long": 0.2}, {"short": 0.0, "long": 0.0})
    from grids.runner import RUN_OVERHEAD_S

    assert one == pytest.approx(240 * 200 * 0.1 + 240 * 200 * 0.2 + 480 * RUN_OVERHEAD_S) \
        and two == pytest.approx(one / 2)
    with pytest.raises(ValueError, match="no measured step cost for horizon 'long'"):
        estimate_seconds(cells, 1, {"short": 0.1})
    from estimators.losses import loss_names

    assert set(missing_estimators(GRIDS["primary"])) == set(GRIDS["primary"].estimators) - set(loss_names())


# --------------------------------------------------------------------------- the grid check


def test_analysis_refuses_a_foreign_run_placed_under_a_grid_name(tmp_path, capsys):
    import json

    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    assert len(read_runs(root)) == 2
    cfg_file = root / "long-gmc-d0-s0" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["config"]["steps"] = 800  # a longer pilot run dropped in as seed 0's delay-0 run
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"long-gmc-d0-s0: run with other settings \(steps: 800, planned 200\)"):
        read_runs(root)
    (root / "long-gmc-d0-s0").rename(root / "long-gmc-d0-s0-pilot")
    with pytest.raises(ValueError, match="long-gmc-d0-s0-pilot: no cell of grid primary"):
        read_runs(root)


def test_a_run_folder_without_metrics_is_named_not_dropped(tmp_path, caplog):
    import logging

    from schema.results import metrics_path
    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    metrics_path(root / "long-gmc-d64-s0").unlink()
    with caplog.at_level(logging.WARNING, logger="llm_runs"):
        assert len(read_runs(root)) == 1
    warned = [r for r in caplog.records if r.name == "grids.run_table" and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "no metrics table and are not analysed: long-gmc-d64-s0" in warned[0].getMessage()


def test_a_hand_assembled_folder_must_agree_on_shared_settings_and_hold_each_cell_once(tmp_path):
    from studies.staleness.analysis import read_runs

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=2)
    assert len(read_runs(tmp_path / "s")) == 2 * 2 * 4
    base = {"task": "scratchpad", "eps": 0.2, "heldout_size": 200, "seed": 0, "mode": "controlled",
            "estimator": "gmc", "delay": 64}
    _fake_run(tmp_path / "s", "long-gmc-d64-s0-long", {**base, "steps": 80}, [0.2, 0.4, 0.6])
    with pytest.raises(ValueError, match=r"long-gmc-d64-s0-long: settings differ .*steps: 80 vs 40"):
        read_runs(tmp_path / "s")
    import shutil

    shutil.rmtree(tmp_path / "s" / "long-gmc-d64-s0-long")
    _fake_run(tmp_path / "s", "long-gmc-d64-s0-copy", {**base, "steps": 40}, [0.2, 0.4, 0.6])
    with pytest.raises(ValueError, match="long-gmc-d64-s0-copy: the same cell as long-gmc-d64-s0"):
        read_runs(tmp_path / "s")


def test_analysis_refuses_a_run_that_started_from_another_machines_warm_start(tmp_path):
    """Same settings and warm-start key, another warm start (a CPU that rounds differently): foreign."""
    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0", "long-topr-d64-s0"])
    assert len(read_runs(root)) == 3
    _set_warm_start(root / "long-topr-d64-s0", heldout_pc=0.010061427227023785)
    with pytest.raises(ValueError, match=r"long-topr-d64-s0: started from another warm start .*held-out pc "
                                         r"0\.010061427227023785 vs 0\.514326903992187"):
        read_runs(root)


def test_the_grid_refuses_to_add_runs_from_a_machine_whose_warm_start_differs(tmp_path):
    import json

    from grids.runner import check_warm_starts

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    theirs = json.loads((root / "long-gmc-d64-s0" / "config.json").read_text())["warm_start"]
    check_warm_starts(root, {"long": dict(theirs)})  # the same warm start: nothing to refuse
    check_warm_starts(tmp_path / "absent", {"long": dict(theirs)})
    here = {**theirs, "heldout_pc": 0.010061427227023785, "weights_sha256": "ab" * 32}
    with pytest.raises(ValueError, match=r"not the one the runs in .* started from \(horizon long \(held-out pc "
                                         r"0\.514326903992187 vs 0\.010061427227023785\): 2 run\(s\), e\.g\. "
                                         r"long-gmc-d0-s0\).*nothing was run"):
        check_warm_starts(root, {"long": here})
    check_warm_starts(root, {"long": {**here, "key": "another"}})  # another key: not this grid's warm start


def test_every_committed_grid_records_the_settings_its_definition_gives(tmp_path):
    """One grid protocol (cells, settings, default_out) for the sweep and the study: each committed
    grid's sweep.json holds exactly what its definition's record() gives (settings renamed since read as today's),
    so it can be continued."""
    import json

    from grids.spec import record_as_today
    from studies.grids import GRIDS

    found = 0
    for settings_file in sorted((REPO / "results" / "llm").glob("*/sweep.json")):
        stored = json.loads(settings_file.read_text())["settings"]
        if stored.get("name") in GRIDS:
            assert record_as_today(stored) == GRIDS[stored["name"]].record(), settings_file
            found += 1
    assert found >= 5


def test_the_study_runs_through_either_executor(tmp_path, capsys):
    from studies.run import main

    out = tmp_path / "scale"
    assert main(["--grid", "scale", "--executor", "ray", "--dry-run", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "30 runs (30 long), 5 seeds, 2 at a time (ray)" in said and not out.exists()
    with pytest.raises(SystemExit):
        main(["--grid", "scale", "--executor", "nowhere", "--dry-run", "--out", str(out)])
    assert main(["--grid", "scale", "--cpus-per-run", "2", "--dry-run", "--out", str(out)]) == 2
    assert "--cpus-per-run / --gpus-per-run need --executor ray" in capsys.readouterr().err
