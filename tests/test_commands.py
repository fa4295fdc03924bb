"""Every documented command starts: each ``make`` target's module and each ``python -m`` command the
README and docs name answers ``--help`` (benchmarks included), the quickest real form of the cheap ones
runs, and every import a toolkit module makes, those inside functions included (where a command's
work starts), names something that exists: a name moved to another module fails here, not when someone
types the command."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in REPO.iterdir() if (p / "__init__.py").is_file())
DOC_FILES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md")
                                         if not p.name.startswith("PREREGISTRATION") and p.name != "THEORY.md"),
             *sorted(REPO.glob("studies/*/README.md"))]
"""The README, the docs (the frozen preregistrations and THEORY aside, as in tests/test_readme.py) and the
studies' READMEs."""


RETIRED = {"figures.study"}
"""Commands the docs name only to say they are gone (docs/LLM.md, studies/staleness/README.md)."""


def documented_modules() -> list[str]:
    """The toolkit modules the Makefile runs (``$(PY) -m``) and the README and docs name (``python -m``)."""
    found = set(re.findall(r"\$\(PY\) -m ([a-z_][\w.]*)", (REPO / "Makefile").read_text()))
    for path in DOC_FILES:
        found |= set(re.findall(r"python3? -m ([a-z_][\w.]*)", path.read_text()))
    return sorted(m for m in found if m.split(".")[0] in PACKAGES and m not in RETIRED)


def test_a_retired_command_is_gone():
    for m in RETIRED:
        assert _module_file(m) is None, f"{m} exists: take it out of RETIRED so its --help is checked"


def test_every_documented_command_answers_help():
    mods = [m for m in documented_modules() if m != "claims"]  # claims runs every check (its own tests)
    assert {"llm_runs.bench", "estimators.bench", "simulators.bench", "report_card", "grids.drift_place"} <= set(mods)
    code = textwrap.dedent("""
        import contextlib, io, runpy, sys
        for m in sys.argv[1:]:
            sys.argv = [m, "--help"]
            with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    runpy.run_module(m, run_name="__main__", alter_sys=True)
                    rc = 0
                except SystemExit as e:
                    rc = e.code or 0
                except BaseException as e:  # an import that fails: the command is broken
                    rc = f"{type(e).__name__}: {e}"
            said = out.getvalue()
            print(repr((m, rc, "usage" in said.lower(), err.getvalue().strip().splitlines()[-1:])))
    """)
    out = subprocess.run([sys.executable, "-c", code, *mods], check=False, cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [eval(line) for line in out.stdout.splitlines() if line.startswith("(")]
    assert [r[0] for r in rows] == mods
    bad = [r for r in rows if r[1] != 0 or not r[2]]
    assert not bad, bad


@pytest.mark.parametrize("argv", [
    ["-m", "estimators.bench", "--n", "2000", "--repeat", "1"],
])
def test_the_quick_form_of_a_cheap_command_runs(argv):
    out = subprocess.run([sys.executable, *argv], check=False, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]


def _top_level_names(path: Path) -> set[str] | None:
    """Names a module defines at its top level (None: it defines ``__getattr__`` or star-imports, so
    its names cannot be read off its source)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name == "*":
                        return False
                    names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                             *[h.body for h in getattr(node, "handlers", [])]):
                    if visit(part) is False:
                        return False
        return True

    if visit(tree.body) is False or "__getattr__" in names:
        return None
    return names


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def test_every_import_of_a_toolkit_name_resolves():
    """``from X import a`` anywhere in the toolkit (inside functions too) names an ``a`` that X defines or a
    submodule of X: the check ``python -m llm_runs.bench`` failed for a name moved out of llm_runs.study."""
    problems = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO)
            here = list(rel.with_suffix("").parts)
            package = here[:-1]  # a module's package, and an __init__.py's own
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] not in PACKAGES:
                    continue
                file = _module_file(target)
                if file is None:
                    problems.append(f"{rel}:{node.lineno}: no module {target}")
                    continue
                defined = _top_level_names(file)
                if defined is None:
                    continue
                for a in node.names:
                    if a.name != "*" and a.name not in defined and _module_file(f"{target}.{a.name}") is None:
                        problems.append(f"{rel}:{node.lineno}: {target} has no {a.name}")
    assert not problems, problems
