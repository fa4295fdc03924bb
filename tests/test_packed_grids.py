"""A finished grid packed into three tables (schema.packed): every reader sees exactly what the run
folders held (settings, summaries, the metrics text byte for byte, logs), a packed run is complete
for --resume, and packing refuses what it cannot keep exactly."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from schema.io import dumps_json
from schema.packed import PACKED_LOGS, PACKED_METRICS, PACKED_RUNS, read_log
from schema.packing import pack_grid, unpack_run
from schema.results import (
    METRICS_FILE,
    is_packed_run,
    metrics_path,
    metrics_text,
    read_run,
    read_run_config,
    read_run_doc,
    read_run_summary,
    run_dirs,
    run_finished,
    run_folders,
    run_settings,
)

PILOT = Path(__file__).resolve().parent.parent / "results" / "llm" / "pilot"


@pytest.fixture
def grid(tmp_path) -> Path:
    """The committed pilot grid (three finished runs, their logs, sweep.json) as run folders, whether
    it is committed packed or not."""
    assert (PILOT / "sweep.json").is_file(), f"the committed pilot grid {PILOT} is missing"
    root = tmp_path / "llm" / "pilot"
    root.mkdir(parents=True)
    for name in ("sweep.json", "summary.csv"):
        shutil.copy(PILOT / name, root / name)
    (root / "logs").mkdir()
    for run in run_folders(PILOT):
        unpack_run(run, root / run.name)
        (root / "logs" / f"{run.name}.log").write_text(read_log(PILOT, f"{run.name}.log"))
    return root


def _everything(root: Path) -> dict:
    out = {}
    for run in run_folders(root):
        settings, m = read_run(run)
        out[run.name] = {"settings": settings, "metrics": m, "text": metrics_text(metrics_path(run)),
                         "doc": dumps_json(read_run_doc(run)), "config": read_run_config(run),
                         "summary": dumps_json(read_run_summary(run)), "finished": run_finished(run)}
    return out


def _same(before: dict, after: dict) -> None:
    assert list(before) == list(after)
    for name, b in before.items():
        a = after[name]
        assert a["text"] == b["text"]
        pd.testing.assert_frame_equal(a["metrics"], b["metrics"], check_exact=True)
        assert [a[k] == b[k] for k in ("settings", "doc", "config", "summary", "finished")] == [True] * 5


def test_a_packed_grid_reads_exactly_as_its_folders(grid):
    from grids.check import audit

    logs = {p.name: p.read_bytes() for p in (grid / "logs").iterdir()}
    before, audit_before = _everything(grid), audit(grid)
    assert pack_grid(grid, log=lambda m: None) == 3
    assert sorted(p.name for p in grid.iterdir()) == sorted(["summary.csv", "sweep.json", PACKED_RUNS, PACKED_METRICS,
                                                             PACKED_LOGS])
    after, audit_after = _everything(grid), audit(grid)
    _same(before, after)
    assert all(is_packed_run(grid / n) for n in after)
    assert [p.name for p in audit_after.runs] == [p.name for p in audit_before.runs]
    assert (audit_after.grid, audit_after.foreign, audit_after.no_metrics) == (audit_before.grid, {}, [])
    assert {n: read_log(grid, n).encode() for n in logs} == logs


def test_values_keep_their_text_nan_inf_and_integers_included(grid):
    run = run_folders(grid)[0]
    text = metrics_text(metrics_path(run))
    header = text.split("\n", 1)[0].split(",")
    odd = ["", "inf", "-inf", "0", "1", "1e-300", "-0.0", "5e-324", "0.30000000000000004", "1.0"]
    steps = run_settings(read_run_config(run))["steps"]  # every step 0..T: a finished run packs whole only
    rows = [[str(step)] + [odd[(step + i) % len(odd)] for i in range(len(header) - 1)] for step in range(steps + 1)]
    body = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    (run / METRICS_FILE).write_text(body)
    before = _everything(grid)
    pack_grid(grid, log=lambda m: None)
    after = _everything(grid)
    _same(before, after)
    assert metrics_text(metrics_path(grid / run.name)) == body
    from llm_runs.replay import compare_metrics

    copy = grid.parent / "reference.csv"
    copy.write_text(body)
    assert compare_metrics(metrics_path(grid / run.name), copy, 3) == []


def test_a_packed_run_is_complete_for_resume_and_never_resumed(grid):
    from llm_runs.config import load_run_config, resolve_config
    from llm_runs.run_folder import check_resumable, run_state
    from studies.grids import GRIDS

    pack_grid(grid, log=lambda m: None)
    for cell in GRIDS["pilot"].cells():
        planned = resolve_config(cell.overrides).to_dict()
        assert run_state(grid / cell.name, planned) == "complete"
        with pytest.raises(ValueError, match="nothing to resume"):
            check_resumable(grid / cell.name, planned)
        assert load_run_config(grid / cell.name).to_dict() == load_run_config_dict(grid / cell.name)
    name = GRIDS["pilot"].cells()[0].name
    other = {**resolve_config(GRIDS["pilot"].cells()[0].overrides).to_dict(), "lr": 0.5}
    with pytest.raises(ValueError, match="other settings"):
        run_state(grid / name, other)


def load_run_config_dict(run: Path) -> dict:
    from llm_runs.config import TrainConfig

    return TrainConfig.from_dict(read_run_config(run)).to_dict()


def test_packing_refuses_an_unfinished_run_or_a_foreign_file_and_changes_nothing(grid):
    runs = run_folders(grid)
    (runs[0] / "summary.json").unlink()
    with pytest.raises(ValueError, match="not finished"):
        pack_grid(grid, log=lambda m: None)
    (runs[1] / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match="model.safetensors"):
        pack_grid(grid, log=lambda m: None)
    assert not (grid / PACKED_RUNS).exists() and all((r / "config.json").is_file() for r in runs)


def test_a_grid_packed_in_two_steps_holds_every_run_once(grid, tmp_path):
    runs = run_folders(grid)
    aside = tmp_path / "aside"
    shutil.move(str(runs[2]), aside)
    before = _everything(grid)
    pack_grid(grid, log=lambda m: None)
    shutil.move(str(aside), runs[2])  # a run folder beside the packed tables
    assert [p.name for p in run_dirs(grid)] == [r.name for r in runs]
    assert not is_packed_run(runs[2]) and run_finished(runs[2])
    both = _everything(grid)
    _same(before, {k: v for k, v in both.items() if k in before})
    pack_grid(grid, log=lambda m: None)
    assert [p.name for p in run_folders(grid)] == [r.name for r in runs]
    assert all(is_packed_run(r) for r in runs)
    _same(both, _everything(grid))


def test_pack_study_refuses_a_grid_with_unfinished_cells(grid):
    from grids.runner import pack_finished_grid
    from studies.grids import GRIDS

    shutil.rmtree(run_folders(grid)[0])
    with pytest.raises(ValueError, match="have not finished"):
        pack_finished_grid(GRIDS["pilot"], grid)
    assert not (grid / PACKED_RUNS).exists()


def test_the_packed_runs_table_is_json_lines(grid):
    import gzip

    pack_grid(grid, log=lambda m: None)
    lines = gzip.decompress((grid / PACKED_RUNS).read_bytes()).decode().splitlines()
    docs = [json.loads(line) for line in lines]
    assert [d["run"] for d in docs] == sorted(d["run"] for d in docs)
    assert {"run", "config", "summary", "columns"} == set(docs[0])
    table = pd.read_parquet(grid / PACKED_METRICS)
    assert list(table.columns[:2]) == ["run", "step"] and table["run"].nunique() == 3


@pytest.mark.parametrize("packed", [False, True], ids=["folders", "packed"])
def test_summary_writes_the_grids_table_again_with_every_setting_a_column(grid, packed, capsys):
    from studies.run import main

    if packed:
        pack_grid(grid, log=lambda m: None)
    (grid / "summary.csv").unlink()
    assert main(["--grid", "pilot", "--out", str(grid), "--summary"]) == 0
    assert "summary.csv" in capsys.readouterr().out
    made, committed = pd.read_csv(grid / "summary.csv"), pd.read_csv(PILOT / "summary.csv")
    pd.testing.assert_frame_equal(made[committed.columns], committed)
    assert {"optimizer", "lr", "group_size"} <= set(made.columns) and (made["optimizer"] == "adam").all()
    assert main(["--grid", "mechanism", "--out", str(grid), "--summary"]) == 2  # another grid's folder: refused
    assert "holds grid pilot" in capsys.readouterr().err
