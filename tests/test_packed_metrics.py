"""A finished run's metrics table stored packed (``metrics.csv.gz``): the same bytes, read the same
everywhere, refused when ambiguous or corrupt, never resumed."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from llm_runs.train import main as train_main
from schema.results import (
    METRICS_FILE,
    PACKED_METRICS_FILE,
    MissingResults,
    metrics_path,
    pack_metrics,
    read_metrics_csv,
    read_run,
)

MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1}
SMALL = {"model_kwargs": MODEL, "warm_start_steps": 5, "heldout_size": 8, "eval_train_size": 8, "prompts_per_step": 2,
         "group_size": 2, "eval_every": 2, "threads": 1, "steps": 4, "estimator": "gmc", "delay": 2}


def _flags(cache: Path) -> list[str]:
    values = {**SMALL, "cache_dir": str(cache)}
    return [f"--{k.replace('_', '-')}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in values.items()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real finished run of the trainer (4 updates of a tiny model)."""
    root = tmp_path_factory.mktemp("packed")
    out = root / "run"
    assert train_main(["--out", str(out), "--no-progress", *_flags(root / "cache")]) == 0
    assert (out / "summary.json").is_file() and (out / METRICS_FILE).is_file()
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return out


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    copy = tmp_path / finished_run.name
    shutil.copytree(finished_run, copy)
    return copy


def test_packing_keeps_the_bytes_and_the_reader_sees_the_same_table(run):
    original = (run / METRICS_FILE).read_bytes()
    settings, before = read_run(run)
    packed = pack_metrics(run)
    assert packed == run / PACKED_METRICS_FILE and metrics_path(run) == packed
    assert not (run / METRICS_FILE).exists()
    assert gzip.decompress(packed.read_bytes()) == original
    settings2, after = read_run(run)
    assert settings2 == settings
    pd.testing.assert_frame_equal(after, before)
    assert len(after) == SMALL["steps"] + 1


def test_packing_is_deterministic_and_idempotent(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run, other)
    a, b = pack_metrics(run), pack_metrics(other)
    assert a.read_bytes() == b.read_bytes()  # no name or time in the header
    assert pack_metrics(run) == a and a.read_bytes() == b.read_bytes()  # packing a packed run changes nothing


def test_an_unfinished_run_is_not_packed(run):
    (run / "summary.json").unlink()
    with pytest.raises(ValueError, match="not finished"):
        pack_metrics(run)
    assert (run / METRICS_FILE).is_file() and not (run / PACKED_METRICS_FILE).exists()


def test_a_corrupt_table_is_not_packed(run):
    with (run / METRICS_FILE).open("a") as fh:
        fh.write("7,not-a-number\n")
    with pytest.raises(ValueError, match="line"):
        pack_metrics(run)
    assert (run / METRICS_FILE).is_file() and not (run / PACKED_METRICS_FILE).exists()


def test_a_folder_with_no_table_is_a_missing_result(run):
    (run / METRICS_FILE).unlink()
    assert metrics_path(run) is None
    with pytest.raises(MissingResults, match="no metrics.csv"):
        pack_metrics(run)
    with pytest.raises(MissingResults, match="no metrics.csv"):
        read_run(run)


def test_both_tables_at_once_are_refused(run):
    shutil.copy(run / METRICS_FILE, run / "keep.csv")
    pack_metrics(run)
    shutil.copy(run / "keep.csv", run / METRICS_FILE)
    with pytest.raises(ValueError, match="both metrics.csv and metrics.csv.gz"):
        read_run(run)


def test_a_corrupt_packed_table_is_an_error_naming_the_file(run):
    pack_metrics(run)
    path = run / PACKED_METRICS_FILE
    path.write_bytes(path.read_bytes()[:20])  # truncated
    with pytest.raises(ValueError, match="metrics.csv.gz"):
        read_metrics_csv(path)
    path.write_bytes(gzip.compress(b"step,x\n1,2\n3,oops\n", mtime=0))
    with pytest.raises(ValueError, match=r"metrics.csv.gz, line 3"):
        read_metrics_csv(path)


def test_a_packed_run_is_never_resumed(run, capsys):
    pack_metrics(run)
    before = sorted(p.name for p in run.iterdir())
    assert train_main(["--out", str(run), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "packed" in err and "nothing to resume" in err
    assert sorted(p.name for p in run.iterdir()) == before


def test_the_study_packs_only_its_finished_runs_and_reads_them_unchanged(finished_run, tmp_path):
    """``python -m studies.run --pack``: every finished run packed, an unfinished one left; the
    analysis reads the same numbers and the plan sees the packed runs as complete."""
    from studies.grids import GRIDS
    from studies.run import main as study_main
    from studies.staleness.analysis import read_runs

    study = GRIDS["pilot"]
    out = tmp_path / "study"
    names = [c.name for c in study.cells()]
    for cell in study.cells():  # one finished run stands for each cell (its seed set to the cell's)
        shutil.copytree(finished_run, out / cell.name)
        cfg_file = out / cell.name / "config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["config"]["seed"] = cell.seed
        cfg_file.write_text(json.dumps(cfg))
    (out / names[-1] / "summary.json").unlink()  # one run is not finished
    before = read_runs(out)
    assert study_main(["--grid", "pilot", "--out", str(out), "--pack"]) == 0
    assert [metrics_path(out / n).name for n in names] == [PACKED_METRICS_FILE] * (len(names) - 1) + [METRICS_FILE]
    pd.testing.assert_frame_equal(read_runs(out), before)
    assert study_main(["--grid", "pilot", "--out", str(out), "--pack"]) == 0  # again: nothing left to pack
    assert [metrics_path(out / n).name for n in names][-1] == METRICS_FILE
