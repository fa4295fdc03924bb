"""Run folders made before a configuration field existed read as what they actually ran.

The committed GSPO runs of ``results/llm/sweep`` predate ``gspo_eps_low``/``gspo_eps_high``:
the trainer then passed its own ``eps`` (0.2) to GSPO as the lower clip, so they clipped
the sequence ratio at ``[0.8, 1 + 4e-4]``. Tests read copies; committed results are never written.
"""
import json
from pathlib import Path

import pytest

from llm_runs.config import TrainConfig, config_diff, load_run_config
from schema.packing import unpack_run
from schema.results import (
    LEGACY_FIELDS,
    RENAMED_FIELDS,
    legacy_fields,
    read_run,
    read_run_config,
    read_run_doc,
    renamed,
    run_dirs,
    run_folders,
)
from schema.runs import knob_fields

SWEEP = Path(__file__).resolve().parents[1] / "results" / "llm" / "sweep"
GSPO_RUN = SWEEP / "gspo-controlled-d2-s0"


@pytest.fixture
def old_gspo(tmp_path):
    assert GSPO_RUN in run_folders(SWEEP), f"the committed reference run {GSPO_RUN} is missing"
    return unpack_run(GSPO_RUN, tmp_path / GSPO_RUN.name)  # a folder of its own, whether committed packed or not


def test_committed_gspo_run_reads_as_the_clip_range_it_used(old_gspo):
    stored = read_run_config(old_gspo, legacy=False)
    assert stored["estimator"] == "gspo" and stored["eps"] == 0.2 and stored["eps_high"] is None
    assert "gspo_eps_low" not in stored and "gspo_eps_high" not in stored  # a legacy configuration
    assert legacy_fields(stored)["gspo_eps_low"] == 0.2 and legacy_fields(stored)["gspo_eps_high"] == 4e-4
    cfg = read_run_config(old_gspo)
    assert (cfg["gspo_eps_low"], cfg["gspo_eps_high"]) == (0.2, 4e-4)
    loaded = load_run_config(old_gspo)
    assert loaded.loss_options() == {"eps_low": 0.2, "eps_high": 4e-4}  # clip [0.8, 1.0004]
    assert TrainConfig().gspo_eps_low != 0.2  # today's default differs: filling it in would misdescribe the run
    settings, metrics = read_run(old_gspo)
    assert settings["estimator"] == "gspo" and len(metrics) > 0


def test_resuming_a_legacy_gspo_run_with_todays_defaults_is_a_difference(old_gspo):
    today = {**read_run_config(old_gspo, legacy=False), "gspo_eps_low": TrainConfig().gspo_eps_low,
             "gspo_eps_high": TrainConfig().gspo_eps_high}
    diff = config_diff(read_run_config(old_gspo), today)
    assert diff == {"gspo_eps_low": (0.2, TrainConfig().gspo_eps_low)}
    same = {**read_run_config(old_gspo, legacy=False), "gspo_eps_low": 0.2, "gspo_eps_high": 4e-4}
    assert config_diff(read_run_config(old_gspo), same) == {}


def test_recorded_fields_win_and_eps_high_carries_over(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    base = {"estimator": "gspo", "eps": 0.1, "eps_high": 0.05}
    (run / "config.json").write_text(json.dumps({"config": base}))
    assert (read_run_config(run)["gspo_eps_low"], read_run_config(run)["gspo_eps_high"]) == (0.1, 0.05)
    (run / "config.json").write_text(json.dumps({"config": {**base, "gspo_eps_low": 0.01, "gspo_eps_high": 0.02}}))
    assert (read_run_config(run)["gspo_eps_low"], read_run_config(run)["gspo_eps_high"]) == (0.01, 0.02)


def test_every_field_a_committed_run_lacks_has_a_legacy_entry():
    fields = set(TrainConfig().to_dict())
    assert set(LEGACY_FIELDS) <= fields, sorted(set(LEGACY_FIELDS) - fields)
    runs = [r for g in sorted(SWEEP.parent.iterdir()) for r in run_dirs(g)]  # every committed run, packed or not
    assert runs, f"no committed runs under {SWEEP.parent}"
    missing = set()
    for run in runs:
        missing |= fields - set(renamed(read_run_doc(run)["config"]))
    assert missing, "every committed run records every field: the legacy table is not exercised"
    covered = set(LEGACY_FIELDS) | set(knob_fields())  # a knob a run lacks: today's default, never read
    assert missing <= covered, f"fields committed runs lack with no legacy entry: {sorted(missing - covered)}"
    assert all(legacy_fields({})[k] is None for k in knob_fields() if k not in LEGACY_FIELDS)


def test_a_run_stored_under_old_field_names_reads_and_compares_under_todays():
    """Committed runs store ``tis_cap``, ``geo_cap``, ...: every reader gives today's names
    (:data:`schema.runs.RENAMED_FIELDS`), and the resume rule finds no difference with a plan that
    spells them today's way."""
    run = SWEEP.parent / "drift" / "long-vcpo-seq_tis-d64-s0"
    stored = read_run_doc(run)["config"]
    assert stored["seq_tis_cap"] == 8.0 and "seq_tis_c" not in stored  # the file as written
    cfg = read_run_config(run)
    assert cfg["seq_tis_c"] == 8.0 and not set(RENAMED_FIELDS) & set(cfg)
    assert read_run_config(run, legacy=False)["seq_tis_c"] == 8.0
    assert load_run_config(run).seq_tis_c == 8.0
    planned = read_run_config(run, legacy=False)  # today's names, the stored values
    assert config_diff(stored, planned) == {}
    assert config_diff(stored, {**planned, "seq_tis_c": 2.0}) == {"seq_tis_c": (8.0, 2.0)}
    with pytest.raises(ValueError, match="seq_tis_cap"):
        renamed({"seq_tis_cap": 8.0, "seq_tis_c": 2.0})


def test_gspos_legacy_clip_range_is_filled_only_into_gspo_runs(tmp_path):
    """The legacy rule filled GSPO's knob into every run that predates it, so a committed pilot's GMC run
    read as made with ``gspo_eps_low = 0.2`` and its own grid refused it (``--grid pilot --dry-run``)."""
    for estimator, expected in (("gmc", None), ("gspo", 0.2)):
        filled = legacy_fields({"estimator": estimator, "eps": 0.2})
        assert filled["gspo_eps_low"] == expected, estimator
        assert filled["gspo_eps_high"] == (4e-4 if estimator == "gspo" else None)
    run = SWEEP.parent / "pilot" / "long-gmc-d0-s0"
    assert "gspo_eps_low" not in read_run_doc(run)["config"]
    assert "gspo_eps_low" not in read_run_config(run)  # today's default, which it never read
    assert load_run_config(run).gspo_eps_low == TrainConfig().gspo_eps_low


def _committed_grids() -> list[str]:
    from grids import grid_folder
    from studies.grids import GRIDS

    return [name for name in GRIDS if (grid_folder(name) / "sweep.json").is_file()]


@pytest.mark.parametrize("grid", _committed_grids())
def test_every_committed_grid_passes_its_own_dry_run(grid, capsys):
    """A committed grid can be continued: its definition plans each committed run with the settings the run
    stored (a setting the grid's record predates planned as its runs used it, Grid.legacy_settings: the drift
    map's VCPO arm ran before opob_flat_zero existed and left a flat group at OPOB's value)."""
    from studies.run import main

    assert main(["--grid", grid, "--dry-run"]) == 0, capsys.readouterr().err


def test_the_first_sweep_passes_its_own_dry_run(capsys):
    """Its GSPO runs clipped at 1 - eps (gspo_eps_low 0.2), before the setting existed: planned so."""
    from grids.sweep import SWEEPS, main, plan

    gspo = [c for c in plan(SWEEPS["full"]) if c.estimator == "gspo"]
    assert gspo and all(c.overrides["gspo_eps_low"] == 0.2 for c in gspo)
    assert all("gspo_eps_low" not in c.overrides for c in plan(SWEEPS["full"]) if c.estimator != "gspo")
    assert main(["--dry-run"]) == 0, capsys.readouterr().err


def test_committed_summary_tables_keep_their_headers_and_read_under_todays_names():
    """The committed grids' summary.csv files were written with the older setting names (``tis_cap``,
    ``geo_length``, ...) and are not rewritten; their reader (studies.report.findings.load) maps each row's
    names through schema.runs.RENAMED_FIELDS."""
    from studies.report.findings import load

    header = (SWEEP.parent / "study_2025" / "summary.csv").read_text().split("\n", 1)[0].split(",")
    assert {"tis_cap", "geo_length"} <= set(header)
    row = load()["peers_2025_runs"][0]
    assert "seq_tis_bn_c" in row and "seq_geo_mask_length" in row and not set(RENAMED_FIELDS) & set(row)
