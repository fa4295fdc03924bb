"""The one per-run record (run_row) and a grid's summary table made of it: every setting a column, the
committed outcomes unchanged."""
from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from grids.run_table import RUN_COLUMNS, read_runs, run_row, summary_table

RESULTS = Path(__file__).resolve().parents[1] / "results" / "llm"
OUTCOMES = [c for c in RUN_COLUMNS if c != "run"]


@pytest.mark.parametrize("grid, runs", [("mechanism", ("long-sgd-gmc-d64-s2", "long-adamclip-topr-d64-s1")),
                                         ("study", ("short-topr-d16-s7", "long-gmc-d64-s0"))])
def test_committed_rows_come_out_the_same_with_every_setting_after_them(grid, runs):
    committed = pd.read_csv(RESULTS / grid / "summary.csv", dtype=str, keep_default_na=False).set_index("run")
    rows = [run_row(RESULTS / grid / r) for r in runs]
    text = summary_table(rows).to_csv(index=False, float_format="%.6g")
    ours = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).set_index("run")
    pd.testing.assert_frame_equal(ours.loc[list(runs), OUTCOMES], committed.loc[list(runs), OUTCOMES])
    settings = list(ours.columns[len(OUTCOMES):])
    assert settings == sorted(settings) and {"optimizer", "lr", "max_grad_norm", "group_size"} <= set(settings)
    if grid == "mechanism":
        assert ours.loc["long-sgd-gmc-d64-s2", "optimizer"] == "sgd"


def test_the_analyses_read_the_committed_summary_s_rows():
    """The rows an analysis reads (read_runs) are the committed summary.csv's, written as the summary writes
    them: same runs, same columns, same text."""
    runs = read_runs(RESULTS / "mechanism")
    text = summary_table(runs.to_dict("records")).to_csv(index=False, float_format="%.6g")
    ours = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).set_index("run").sort_index()
    committed = pd.read_csv(RESULTS / "mechanism" / "summary.csv", dtype=str,
                            keep_default_na=False).set_index("run").sort_index()
    assert list(ours.columns) == list(committed.columns)
    pd.testing.assert_frame_equal(ours, committed)


def test_steps_is_the_plan_and_steps_done_what_the_metrics_hold():
    row = run_row(RESULTS / "study" / "long-gmc-d64-s0")
    assert row["steps"] == 200 and row["steps_done"] == 200 and row["complete"] and row["finished"]
    assert row["pc_final"] == row["pc_final"] and 0 <= row["pc_final"] <= 1
    # the stability rule's accuracy drop and the collapse timing are two columns, not one name
    assert isinstance(row["acc_drop"], bool) and isinstance(row["collapsed"], bool)


def test_a_setting_one_run_predates_is_empty_in_its_row():
    table = summary_table([{"run": "a", "lr": 1e-4}, {"run": "b", "lr": 2e-4, "ess_scaling": "sqrt"}])
    assert list(table.columns) == RUN_COLUMNS + ["ess_scaling", "lr"]
    assert pd.isna(table.loc[0, "ess_scaling"]) and table.loc[1, "ess_scaling"] == "sqrt"


def test_a_folder_without_metrics_has_no_row(tmp_path):
    (tmp_path / "run").mkdir()
    assert run_row(tmp_path / "run") is None
