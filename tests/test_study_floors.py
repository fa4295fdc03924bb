"""studies/ has floors of its own: ``studies/common/`` (what studies share) below the studies, each study a leaf
that imports no other study, and the report (``studies/report/``) with the registries of every study's grids and
figures (``studies/grids.py``, ``studies/figures.py``, ``studies/run.py``) above them. Checked on the import graph
of every module (function-level and relative imports included), and no private name (``_x``) is imported from
another folder."""
from __future__ import annotations

from pathlib import Path

from test_layering import import_records

REPO = Path(__file__).resolve().parents[1]
FLOOR = "common"
TOP = "report"


def _imports(path: Path, root: Path):
    """``(line, imported module, the modules it reaches as parts, the names it takes)`` of every import in
    ``path`` (:func:`test_layering.import_records`, relative ones resolved). ``from pkg import mod`` of a module
    ``mod`` is an import of ``pkg.mod`` for the floor check, and ``mod`` is no name taken from another folder."""
    for mod, line, names in import_records(path, root.parent):
        target = mod.split(".")
        there = root.parent.joinpath(*target)
        modules = [n for n in names if (there / f"{n}.py").is_file() or (there / n / "__init__.py").is_file()]
        reached = [[*target, n] for n in modules] + ([target] if len(modules) < len(names) or not names else [])
        yield line, mod, reached, [n for n in names if n not in modules]


def _unit(parts: list[str], root: Path) -> str | None:
    """The folder of ``studies/`` a module belongs to (``None``: a module outside studies; ``"."``: a module
    directly under studies/)."""
    if not parts or parts[0] != root.name:
        return None
    if len(parts) == 1 or not (root / parts[1]).is_dir():
        return "."
    return parts[1]


def violations(root: Path) -> list[str]:
    """Every import under ``root`` (a ``studies`` package) that breaks its floors, as ``file:line says why``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        src = _unit(list(path.relative_to(root.parent).with_suffix("").parts), root)
        where = path.relative_to(root.parent)
        for line, name, reached, names in _imports(path, root):
            at = f"{where}:{line}"
            target = name.split(".")
            for dst in dict.fromkeys(_unit(parts, root) for parts in reached):
                if dst is None or dst == src:
                    continue
                if src == FLOOR:
                    out.append(f"{at} imports {name}: {FLOOR}/ imports no study, no report and no registry")
                elif src not in (TOP, ".") and dst != FLOOR:
                    kind = "another study" if dst not in (TOP, ".") else "a floor above the studies"
                    out.append(f"{at} imports {name}, {kind}")
            own = path.parent
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    if target and target[0] == root.name:
                        there = root.parent.joinpath(*target)
                        folder = there if there.is_dir() else there.parent
                    else:
                        folder = None  # a private name of a module outside studies: always another folder
                    if folder != own:
                        out.append(f"{at} imports the private name {n} from {'.'.join(target)}, another folder")
    return out


def test_no_study_imports_another_and_no_private_name_crosses_a_folder():
    assert violations(REPO / "studies") == []


def test_the_floors_are_what_the_tree_holds():
    studies = {p.name for p in (REPO / "studies").iterdir() if (p / "__init__.py").is_file()}
    assert {FLOOR, TOP} <= studies and len(studies - {FLOOR, TOP}) >= 8


def test_the_check_finds_each_kind_of_violation(tmp_path):
    root = tmp_path / "studies"
    for pkg in ("", "common", "report", "alpha", "beta", "alpha/figures"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "grids.py").write_text("from .alpha.grids import G\n")
    (root / "common" / "shared.py").write_text("import math\n\n\ndef f():\n    from studies.alpha import rules\n")
    (root / "alpha" / "rules.py").write_text("from studies.common.shared import f\nfrom ._own import _fine\n")
    (root / "alpha" / "_own.py").write_text("_fine = 1\n")
    (root / "alpha" / "figures" / "f1.py").write_text("from ..rules import f\nfrom .. import _own\n")
    (root / "beta" / "analysis.py").write_text(
        "from studies.alpha.rules import f\n"            # another study
        "from studies.grids import GRIDS\n"             # a registry above the studies
        "from studies.report import build\n"            # the report
        "from grids.run_table import _hidden\n"         # a private name from another folder
        "def g():\n    from ..alpha._own import _fine\n")  # both, relative, in a function
    (root / "report" / "build.py").write_text("from studies.alpha import rules\nfrom studies.beta import analysis\n")
    found = violations(root)
    assert found == [
        "studies/beta/analysis.py:1 imports studies.alpha.rules, another study",
        "studies/beta/analysis.py:2 imports studies.grids, a floor above the studies",
        "studies/beta/analysis.py:3 imports studies.report, a floor above the studies",
        "studies/beta/analysis.py:4 imports the private name _hidden from grids.run_table, another folder",
        "studies/beta/analysis.py:6 imports studies.alpha._own, another study",
        "studies/beta/analysis.py:6 imports the private name _fine from studies.alpha._own, another folder",
        "studies/common/shared.py:5 imports studies.alpha: common/ imports no study, no report and no registry",
    ], found
