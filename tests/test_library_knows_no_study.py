"""The training library (``llm_runs/``) knows no study and no grid: it imports no study module, spells no grid's
folder and builds none (``schema.results.llm_relpath``, ``grids.grid_folder``), and runs no module of a floor above
its own but the one-release alias ``python -m llm_runs.drift`` -> ``python -m grids.drift_place``. What is study- or
grid-specific lives on the floor that owns it (docs/LAYERS.md): the grids' files in ``grids/``, a study's in
``studies/<study>/``."""
from __future__ import annotations

import ast
from pathlib import Path

import test_layering
from test_layering import LAYERS, ROOT, imports_of

GRID_FOLDER_BUILDERS = ("llm_relpath", "grid_relpath", "grid_folder", "grid_out", "grid_source")
"""The functions that turn a grid's name into its folder (schema.results, grids.folders, grids.spec)."""
ALIASES = {("llm_runs/drift.py", "grids.drift_place")}
"""The modules of a floor above llm_runs that llm_runs runs (``runpy.run_module``): the one-release command alias."""


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            for st in node.body:  # a module's attribute docstrings too: every bare string statement
                if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                    out.add(id(st.value))
    return out


def study_knowledge(package: Path, grid_folders: set[str], root: Path = ROOT) -> list[str]:
    """What in ``package`` names a study or a grid: an import of ``studies``, a string (docstrings aside) holding a
    grid's folder (``llm/<grid>``), a call of a function that builds one, a module of a floor above ``llm_runs``
    run by ``runpy.run_module`` other than :data:`ALIASES`."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        bad += [f"{rel}:{line} imports {mod}" for mod, line in imports_of(path) if mod.split(".")[0] == "studies"]
        tree = ast.parse(path.read_text(), filename=str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                parts = node.value.strip("/").split("/")
                bad += [f"{rel}:{node.lineno} names the folder of a grid, {f!r}" for f in sorted(grid_folders)
                        if any(parts[i:i + 2] == f.split("/") for i in range(len(parts)))]
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in GRID_FOLDER_BUILDERS:
                    bad.append(f"{rel}:{node.lineno} builds a grid's folder ({name})")
                if name == "run_module" and node.args and isinstance(node.args[0], ast.Constant):
                    mod = str(node.args[0].value)
                    if LAYERS.get(mod.split(".")[0], -1) > LAYERS["llm_runs"] and (rel, mod) not in ALIASES:
                        bad.append(f"{rel}:{node.lineno} runs {mod}, a floor above")
    return bad


def _grid_folders() -> set[str]:
    from grids import grid_relpath
    from studies.grids import GRIDS

    return {grid_relpath(name) for name in GRIDS}


def test_the_training_library_names_no_grid_and_imports_no_study():
    folders = _grid_folders()
    assert {"llm/drift", "llm/group_size", "llm/study"} <= folders  # the drift command's grids, and a legacy folder
    bad = study_knowledge(ROOT / "llm_runs", folders)
    assert not bad, "llm_runs/ knows a study or a grid:\n" + "\n".join(bad)


def test_the_alias_runs_the_command_it_names():
    tree = ast.parse((ROOT / "llm_runs" / "drift.py").read_text())
    runs = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "")
            == "run_module"]
    assert runs == ["grids.drift_place"] and (ROOT / "grids" / "drift_place.py").is_file()


def test_the_check_finds_each_kind_of_knowledge(tmp_path, monkeypatch):
    monkeypatch.setattr(test_layering, "ROOT", tmp_path)  # the scanner names modules from the root
    pkg = tmp_path / "llm_runs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A docstring may say results/llm/drift/map.json."""\n')
    assert study_knowledge(pkg, {"llm/drift"}, tmp_path) == []
    (pkg / "m.py").write_text(
        "import runpy\nfrom schema.results import llm_relpath\n"
        "def f():\n    from studies.drift import analysis\n    return 'results/llm/drift/map.json', llm_relpath('x')\n"
        "def g():\n    runpy.run_module('studies.report')\n    runpy.run_module('llm_runs.train')\n")
    found = study_knowledge(pkg, {"llm/drift"}, tmp_path)
    assert sorted(found) == ["llm_runs/m.py:4 imports studies.drift",
                             "llm_runs/m.py:5 builds a grid's folder (llm_relpath)",
                             "llm_runs/m.py:5 names the folder of a grid, 'llm/drift'",
                             "llm_runs/m.py:7 runs studies.report, a floor above"], found
