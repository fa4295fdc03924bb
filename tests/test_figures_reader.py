"""figures/: load() names the missing results and the command that makes them; the run-folder reader
refuses corrupted runs."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest
from _figures_data import MODULES, mod, results_fixture, write_llm_runs  # noqa: F401 (a fixture)

from schema import results as data

# ----------------------------------------------------------------------------------- load() errors


@pytest.mark.parametrize("name", MODULES)
def test_load_names_missing_results_and_command(name, results):
    m = mod(name)
    with pytest.raises(data.MissingResults) as e:
        m.load()
    msg = str(e.value)
    assert str(results) in msg
    assert any(s.command in msg for s in m.SOURCES)
    assert "python -m" in msg


def test_full_results_preferred_over_quick(results):
    for sub, v in (("bias_vs_G-quick", 1.0), ("bias_vs_G", 2.0)):
        (results / "sim" / sub).mkdir(parents=True)
        pd.DataFrame({"x": [v]}).to_parquet(results / "sim" / sub / "results.parquet")
    df = data.read_sim(data.Sim("bias_vs_G"))
    assert df["x"].item() == 2.0 and not df.attrs["quick"]


def test_llm_full_sweep_needs_a_finished_run(results):
    write_llm_runs(results / "llm" / "sweep_quick", estimators=("gmc",), delays=(0,), seeds=(0,), async_run=False)
    (results / "llm" / "sweep" / "partial").mkdir(parents=True)  # no metrics: not a run
    assert data.LLM.find() == results / "llm" / "sweep_quick"


# ----------------------------------------------------------------------------------- the run-folder reader


def _one_run(results):
    write_llm_runs(results / "llm" / "sweep", estimators=("gmc",), delays=(0,), seeds=(0,), async_run=False,
                   unstable=("none", 0, 0))
    return next((results / "llm" / "sweep").iterdir())


def test_reader_refuses_duplicated_steps(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + lines[3:6]))  # steps 2..4 twice, as two trainers on one folder write
    with pytest.raises(ValueError, match=r"metrics.csv: step\(s\) \[2, 3, 4\] appear more than once"):
        data.read_llm_runs()


def test_reader_refuses_missing_steps(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[5:]))
    with pytest.raises(ValueError, match="missing \\[3\\]"):
        data.read_run(run)


def test_reader_names_file_and_line_of_a_garbage_line(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = "3,abc" + lines[4][lines[4].index(",", 2):]
    path.write_text("".join(lines))
    with pytest.raises(ValueError, match=f"{path}, line 5: not a number"):
        data.read_run(run)
    path.write_text("".join(lines[:4]) + "garbage\n")
    with pytest.raises(ValueError, match=f"{path}, line 5: 1 fields"):
        data.read_run(run)


def test_reader_names_a_truncated_config(results):
    run = _one_run(results)
    cfg = run / "config.json"
    cfg.write_text(cfg.read_text()[:25])
    with pytest.raises(ValueError, match=f"{cfg}: not valid JSON \\(line 1"):
        data.read_llm_runs()


def test_async_run_placed_at_its_staleness_bound():
    s = data.run_settings({"estimator": "gmc", "mode": "async", "delay": 0, "max_staleness": 8})
    assert s["delay"] == 8 and s["mode"] == "async"
    assert data.run_settings({"estimator": "gmc", "delay": 4, "max_staleness": 8})["delay"] == 4
