"""studies/: every study has a README whose links resolve, whose commands name modules that exist,
and whose results folders are the ones studies.grids.GRIDS names; each study defines its grids
(``studies/<study>/grids.py``) and lives in ``results/llm/<grid name>`` (or its frozen entry in
grids.folders.FOLDERS_BEFORE_THE_CONVENTION), and each committed folder's record reads back as its grid."""
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
    from studies.grids import GRIDS

    text = readme.read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (readme.parent / target).resolve().exists(), f"{readme}: broken link {target}"
    for mod in re.findall(r"python -m (studies(?:\.[a-z_0-9]+)+)", text):
        m = importlib.import_module(mod)
        assert hasattr(m, "main") or importlib.util.find_spec(mod + ".__main__"), mod
    folders = {s.out for s in GRIDS.values()}
    for name, folder in re.findall(r"^\| `([a-z_0-9]+)` \| `(results/llm/[a-z_0-9]+)/` \|", text, re.MULTILINE):
        assert name in GRIDS and GRIDS[name].out == folder and folder in folders, (readme, name, folder)


def test_study_commands_resolve():
    for name in ("staleness", "mechanism", "drift", "replicate"):
        assert importlib.util.find_spec(f"studies.{name}.__main__") is not None
        assert callable(importlib.import_module(f"studies.{name}.analysis").main)
    assert callable(importlib.import_module("studies.report.build").main)


def test_the_report_finds_the_figures_where_python_m_figures_draws_them():
    import inspect

    from figures import style
    from studies.report import build as report

    assert style.OUT == REPO / "figures" / "out"
    assert "style.OUT" in inspect.getsource(report.write_report)


def test_each_study_defines_its_grids_and_each_grid_lives_in_its_folder():
    import grids.spec
    from grids import FOLDERS_BEFORE_THE_CONVENTION, grid_out
    from studies.grids import GRIDS

    for name, grid in GRIDS.items():
        folder = FOLDERS_BEFORE_THE_CONVENTION.get(name, f"llm/{name}")
        assert grid.name == name and grid.out == grid_out(name) == f"results/{folder}", name
        assert set(grid.pairs) <= set(GRIDS) - {name}, name
    assert set(FOLDERS_BEFORE_THE_CONVENTION) <= set(GRIDS)
    outs = [g.out for g in GRIDS.values()]
    assert len(set(outs)) == len(outs)  # no two grids share a folder
    defined = {}
    for d in STUDY_DIRS:
        if (d / "grids.py").is_file():
            for name, grid in importlib.import_module(f"studies.{d.name}.grids").GRIDS.items():
                assert name not in defined, f"{name} defined by {defined.get(name)} and {d.name}"
                assert GRIDS[name] is grid
                defined[name] = d.name
    assert sorted(defined) == sorted(GRIDS)
    assert not hasattr(grids.spec, "GRIDS")  # the toolkit holds the schema, never a study's grid


def test_the_folders_named_before_the_convention_are_frozen_and_a_new_grid_needs_no_entry(tmp_path, monkeypatch):
    from grids import FOLDERS_BEFORE_THE_CONVENTION, grid_folder, grid_out

    assert dict(FOLDERS_BEFORE_THE_CONVENTION) == {"primary": "llm/study", "peers_2025": "llm/study_2025"}
    with pytest.raises(TypeError):
        FOLDERS_BEFORE_THE_CONVENTION["new"] = "llm/elsewhere"
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert grid_folder("a_new_grid") == tmp_path / "llm" / "a_new_grid"
    assert grid_out("a_new_grid") == "results/llm/a_new_grid"
    assert grid_folder("primary") == tmp_path / "llm" / "study"
    for bad in ("", "..", "a/b", None):
        with pytest.raises(ValueError, match="not a grid name"):
            grid_folder(bad)


def test_the_pairs_a_grid_declares_are_what_the_runner_checks():
    from grids import pairing_with
    from grids.run_table import PRIMARY
    from studies.grids import GRIDS

    assert GRIDS["drift"].pairs == ("primary", "mechanism", "peers_2025")
    assert GRIDS["group_size_decisive"].paired_folders() == [GRIDS["group_size"].default_out()]
    assert GRIDS["primary"].pairs == () and GRIDS["primary"].paired_folders() == []
    assert "pairs" not in GRIDS["drift"].record()  # what a folder records does not depend on it
    assert pairing_with(GRIDS.values(), PRIMARY) == ("mechanism", "peers_2025", "geo_sgd", "pilot_drift", "drift",
                                                     "drift_decisive", "replicate_avx2", "corrections_2026")


def test_the_drift_command_reads_the_grids_folders():
    from grids import drift_place, grid_folder

    assert drift_place.map_path() == grid_folder("drift") / "map.json"
    assert drift_place.group_size_verdicts_path() == grid_folder("group_size") / "verdicts.json"


def test_every_committed_grid_folder_reads_back_as_the_grid_that_defines_it():
    from grids import grid_folder, recorded_grid
    from grids.spec import with_legacy_settings
    from studies.grids import GRIDS

    read = 0
    for name, grid in GRIDS.items():
        if not (grid_folder(name) / "sweep.json").is_file():
            continue
        found = recorded_grid(grid_folder(name))
        assert found.name == name and found.record() == grid.record(), name
        # the settings its record predates are the definition's (Grid.legacy_settings): as its runs used them
        recorded = [(c.name, with_legacy_settings(c.overrides, grid.legacy_settings)) for c in found.cells()]
        assert recorded == [(c.name, c.overrides) for c in grid.cells()], name
        read += 1
    assert read >= 15


def test_a_folder_without_a_grid_record_is_named(tmp_path):
    from grids import recorded_grid

    with pytest.raises(ValueError, match=f"{tmp_path / 'sweep.json'} does not exist"):
        recorded_grid(tmp_path)
    (tmp_path / "sweep.json").write_text('{"settings": {"name": "x"}}')
    with pytest.raises(ValueError, match="records no grid of this kind .*base"):
        recorded_grid(tmp_path)


def test_every_committed_grid_summary_has_each_setting_as_a_column():
    import pandas as pd

    from grids import grid_folder
    from studies.grids import GRIDS

    seen = 0
    for name in GRIDS:
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


def test_the_grids_set_beside_the_staleness_study_pair_with_it_and_live_in_its_companion_folder():
    from grids import grid_relpath
    from grids.folders import STUDY_2025
    from grids.run_table import PRIMARY
    from grids.spec import pairing_with
    from studies.common.settings import BESIDE_PRIMARY
    from studies.grids import GRIDS

    assert BESIDE_PRIMARY and set(BESIDE_PRIMARY) <= set(pairing_with(GRIDS.values(), PRIMARY))
    assert [grid_relpath(g) for g in BESIDE_PRIMARY] == list(STUDY_2025.candidates)
