"""A grid's summary table: one row per run with every setting, its leading columns as the committed tables hold."""
from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from llm_runs.grid_summary import SUMMARY_COLUMNS, summary_row, summary_table

RESULTS = Path(__file__).resolve().parents[1] / "results" / "llm"


@pytest.mark.parametrize("grid, runs", [("mechanism", ("long-sgd-gmc-d64-s2", "long-adamclip-topr-d64-s1")),
                                         ("study", ("short-topr-d16-s7", "long-gmc-d64-s0"))])
def test_committed_rows_come_out_the_same_with_every_setting_after_them(grid, runs):
    committed = pd.read_csv(RESULTS / grid / "summary.csv", dtype=str, keep_default_na=False).set_index("run")
    rows = [summary_row(RESULTS / grid / r, r, int(committed.loc[r, "steps_planned"])) for r in runs]
    text = summary_table(rows).to_csv(index=False, float_format="%.6g")
    ours = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).set_index("run")
    lead = [c for c in SUMMARY_COLUMNS if c != "run"]
    pd.testing.assert_frame_equal(ours.loc[list(runs), lead], committed.loc[list(runs), lead])
    settings = list(ours.columns[len(lead):])
    assert settings == sorted(settings) and {"optimizer", "lr", "max_grad_norm", "group_size"} <= set(settings)
    assert "steps" not in settings  # the planned updates are steps_planned; steps is the updates done
    if grid == "mechanism":
        assert ours.loc["long-sgd-gmc-d64-s2", "optimizer"] == "sgd"


def test_a_setting_one_run_predates_is_empty_in_its_row():
    table = summary_table([{"run": "a", "lr": 1e-4}, {"run": "b", "lr": 2e-4, "ess_scaling": "sqrt"}])
    assert list(table.columns) == SUMMARY_COLUMNS + ["ess_scaling", "lr"]
    assert pd.isna(table.loc[0, "ess_scaling"]) and table.loc[1, "ess_scaling"] == "sqrt"


def test_a_folder_without_metrics_has_no_row(tmp_path):
    (tmp_path / "run").mkdir()
    assert summary_row(tmp_path / "run") is None
