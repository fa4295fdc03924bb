"""studies/: every study has a README whose links resolve, whose commands name modules that exist,
and whose results folders are the ones studies.grids.STUDIES names; each study defines its grids
(``studies/<study>/grids.py``), the toolkit's one table names their folders
(schema.results.GRID_FOLDERS), and each committed folder's record reads back as its grid."""
from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUDY_DIRS = sorted(p for p in (REPO / "studies").iterdir() if p.is_dir() and not p.name.startswith("__"))
READMES = [REPO / "studies" / "README.md", *(p / "README.md" for p in STUDY_DIRS)]


def test_every_study_has_a_readme():
    assert {p.name for p in STUDY_DIRS} >= {"staleness", "mechanism", "drift", "replicate", "corrections_2025",
                                            "scale", "gpu"}
    for p in READMES:
        assert p.is_file(), p


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_readme_links_commands_and_folders(readme):
    from studies.grids import STUDIES

    text = readme.read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (readme.parent / target).resolve().exists(), f"{readme}: broken link {target}"
    for mod in re.findall(r"python -m (studies(?:\.[a-z_0-9]+)+)", text):
        m = importlib.import_module(mod)
        assert hasattr(m, "main") or importlib.util.find_spec(mod + ".__main__"), mod
    folders = {s.out for s in STUDIES.values()}
    for name, folder in re.findall(r"^\| `([a-z_0-9]+)` \| `(results/llm/[a-z_0-9]+)/` \|", text, re.MULTILINE):
        assert name in STUDIES and STUDIES[name].out == folder and folder in folders, (readme, name, folder)


def test_study_commands_resolve():
    for name in ("staleness", "mechanism", "drift", "replicate"):
        assert importlib.util.find_spec(f"studies.{name}.__main__") is not None
        assert callable(importlib.import_module(f"studies.{name}.analysis").main)
    assert callable(importlib.import_module("studies.report").main)


def test_the_report_finds_the_figures_where_python_m_figures_draws_them():
    import inspect

    from figures import style
    from studies import report

    assert style.OUT == REPO / "figures" / "out"
    assert "style.OUT" in inspect.getsource(report.write_report)


def test_each_study_defines_its_grids_and_the_one_table_names_their_folders():
    import llm_runs.grids
    from schema.results import GRID_FOLDERS, GRID_PAIRS
    from studies.grids import STUDIES

    assert sorted(STUDIES) == sorted(GRID_FOLDERS)
    for name, grid in STUDIES.items():
        assert grid.name == name and grid.out == f"results/{GRID_FOLDERS[name]}", name
    for name, paired in GRID_PAIRS.items():
        assert name in STUDIES and set(paired) <= set(STUDIES) - {name}, name
    defined = {}
    for d in STUDY_DIRS:
        if (d / "grids.py").is_file():
            for name, grid in importlib.import_module(f"studies.{d.name}.grids").GRIDS.items():
                assert name not in defined, f"{name} defined by {defined.get(name)} and {d.name}"
                assert STUDIES[name] is grid
                defined[name] = d.name
    assert sorted(defined) == sorted(STUDIES)
    assert not hasattr(llm_runs.grids, "STUDIES")  # the toolkit holds the schema, never a study's grid


def test_every_committed_grid_folder_reads_back_as_the_grid_that_defines_it():
    from llm_runs.grids import recorded_study
    from schema.results import grid_folder
    from studies.grids import STUDIES

    read = 0
    for name, grid in STUDIES.items():
        if not (grid_folder(name) / "sweep.json").is_file():
            continue
        found = recorded_study(grid_folder(name))
        assert found.name == name and found.record() == grid.record(), name
        assert [(c.name, c.overrides) for c in found.cells()] == [(c.name, c.overrides) for c in grid.cells()], name
        read += 1
    assert read >= 15


def test_a_folder_without_a_grid_record_is_named(tmp_path):
    from llm_runs.grids import recorded_study

    with pytest.raises(ValueError, match=f"{tmp_path / 'sweep.json'} does not exist"):
        recorded_study(tmp_path)
    (tmp_path / "sweep.json").write_text('{"settings": {"name": "x"}}')
    with pytest.raises(ValueError, match="records no study grid .*base"):
        recorded_study(tmp_path)


@pytest.mark.filterwarnings("ignore:'llm_runs.study' found in sys.modules:RuntimeWarning")
def test_the_toolkit_runner_names_the_studies_command(capsys):
    import runpy

    with pytest.raises(SystemExit) as stop:
        runpy.run_module("llm_runs.study", run_name="__main__")
    assert stop.value.code == 2
    assert "python -m studies.run" in capsys.readouterr().err


def test_every_committed_grid_summary_has_each_setting_as_a_column():
    import pandas as pd

    from schema.results import grid_folder
    from studies.grids import STUDIES

    seen = 0
    for name in STUDIES:
        path = grid_folder(name) / "summary.csv"
        if not (grid_folder(name) / "sweep.json").is_file() or not path.is_file():
            continue
        tab = pd.read_csv(path)
        assert {"estimator", "delay", "seed", "optimizer", "lr", "max_grad_norm", "group_size",
                "prompts_per_step"} <= set(tab.columns), name
        seen += 1
    assert seen >= 15
    mech = pd.read_csv(grid_folder("mechanism") / "summary.csv")
    assert set(mech["optimizer"]) == {"adam", "adamw", "sgd"}
