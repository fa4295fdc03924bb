"""studies/: every study has a README whose links resolve, whose commands name modules that exist,
and whose results folders are the ones llm_runs.grids.STUDIES names (the one table of grid folders)."""
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
    from llm_runs.grids import STUDIES

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
