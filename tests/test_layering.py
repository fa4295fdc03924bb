"""The import graph of the toolkit's packages points down only and has no cycle.

Every ``import``/``from ... import`` of every module (function-level imports included) and
every ``importlib.import_module``/``__import__`` call with a literal (or literal-prefixed)
name counts. Layers, bottom to top::

    estimators              pure math: the estimators and their records
    stats                   generic statistics (intervals, bootstrap, Holm, power)
    execution               where sweep runs execute (imports nothing of the toolkit)
    bounds                  THEORY's bounds (its tables' rows come from the estimators' records)
    schema                  the results contract
    simulators, llm_runs    producers (llm_runs: the training library)
    grids                   the LLM grids: specification, folders, runner, check, run tables, sweep
    claims                  claim checks and verdicts
    figures                 readers
    report_card             a card for one correction from every layer below
    studies                 the research campaigns: analyses, verdicts, report sections
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"estimators": 0, "bounds": 1, "execution": 0, "stats": 0, "schema": 1, "simulators": 2, "llm_runs": 2,
          "grids": 3, "claims": 4, "figures": 5, "report_card": 6, "studies": 7}


def _module_name(path: Path, root: Path | None = None) -> str:
    rel = path.relative_to(root or ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(module: str, level: int, current: str, is_pkg: bool) -> str:
    if level == 0:
        return module
    base = current.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(path: Path, root: Path | None = None) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``path`` (a module under ``root``, by default the checkout)."""
    return [(mod, line) for mod, line, _ in import_records(path, root)]


def import_records(path: Path, root: Path | None = None) -> list[tuple[str, int, list[str]]]:
    """``(imported module, line, names)`` for every import in ``path`` (a module under ``root``): ``names`` are
    those a ``from ... import`` takes from the module (empty for the other kinds)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    current, is_pkg = _module_name(path, root), path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((_resolve(node.module or "", node.level, current, is_pkg), node.lineno,
                        [a.name for a in node.names]))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name not in ("import_module", "__import__"):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((arg.value, node.lineno, []))
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                out.append((str(arg.values[0].value).rstrip("."), node.lineno, []))
    return out


def package_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for mod, line in imports_of(path):
                top = mod.split(".")[0]
                if top in LAYERS and top != pkg:
                    edges.setdefault((pkg, top), []).append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    return edges


def test_every_package_is_scanned():
    for pkg in LAYERS:
        assert (ROOT / pkg / "__init__.py").is_file(), pkg


def test_imports_point_down_only():
    bad = [w for (src, dst), where in package_edges().items() if LAYERS[dst] >= LAYERS[src] for w in where]
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


PRODUCERS = ("simulators", "llm_runs")
"""The packages that make results (simulations, LLM runs) and read their own run folders."""


def test_figures_import_no_producer():
    """Figures read results through schema and claims, never a producer's module: not even the LLM's run
    tables (claims reads those for them), function-level imports included."""
    bad = [w for (src, dst), where in package_edges().items() if src == "figures" and dst in PRODUCERS for w in where]
    assert not bad, "figures imports a producer:\n" + "\n".join(map(str, bad))


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {p: set() for p in LAYERS}
    for src, dst in package_edges():
        graph[src].add(dst)
    state: dict[str, int] = {}

    def visit(n, stack):
        state[n] = 1
        for m in graph[n]:
            if state.get(m) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack + [n, m]))
            if m not in state:
                visit(m, stack + [n])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [])


def test_the_scanner_sees_every_kind_of_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import a.b\nfrom c import d\nimport importlib\n"
                   "def f():\n    from e import g\n    importlib.import_module('h.i')\n"
                   "    importlib.import_module(f'j.{x}')\n    __import__('k')\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        found = {m for m, _ in imports_of(src)}
    finally:
        ROOT = old
    assert found == {"a.b", "c", "importlib", "e", "h.i", "j", "k"}


def test_figures_start_no_program():
    for path in (ROOT / "figures").rglob("*.py"):
        mods = {m.split(".")[0] for m, _ in imports_of(path)}
        assert "subprocess" not in mods, path


def module_edges() -> dict[str, dict[str, str]]:
    """``{module: {imported toolkit module: where}}`` over every module of every package, function-level
    imports included; ``from pkg import name`` counts as importing ``pkg.name`` when that is a module."""
    modules = {_module_name(p): p for pkg in LAYERS for p in (ROOT / pkg).rglob("*.py")}
    edges: dict[str, dict[str, str]] = {m: {} for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", node.level, mod, is_pkg)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    edges[mod].setdefault(t, f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def _cycles(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in edges:
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_no_import_cycle_between_modules():
    """A package's ``__init__`` importing its own submodules, which import names back from it, is a
    package's normal shape; every other cycle between modules is a defect."""
    edges = module_edges()
    for mod in edges:  # a submodule importing its own package's __init__ is not a cycle through other modules
        edges[mod] = {t: w for t, w in edges[mod].items() if not mod.startswith(t + ".")}
    cycles = _cycles(edges)
    where = ["; ".join(f"{a} -> {b} ({edges[a][b]})" for a in c for b in c if b in edges[a]) for c in cycles]
    assert not cycles, "module import cycles:\n" + "\n".join(where)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b": ""}, "b": {"c": ""}, "c": {"a": ""}, "d": {"a": ""}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": ""}, "b": {}}) == []


# --------------------------------------------------------------------------- the drawing of the layers

DRAWING = ROOT / "docs" / "LAYERS.md"


def draw() -> str:
    """``docs/LAYERS.md``: the packages floor by floor (top floor first) and every import between two of
    them, drawn from the import graph (:func:`package_edges`) as a Mermaid flowchart and as a table of
    arrows, each arrow pointing down a floor or more (an arrow up would be an upward import, which
    :func:`test_imports_point_down_only` refuses). ``python tests/test_layering.py`` writes it again."""
    floors: dict[int, list[str]] = {}
    for pkg, floor in LAYERS.items():
        floors.setdefault(floor, []).append(pkg)
    edges = package_edges()
    lines = ["# The layers of the toolkit", "",
             "Written by `python tests/test_layering.py` from the import graph of every module (function-level",
             "imports included); `tests/test_layering.py` checks that this file is what the graph gives today and",
             "that no arrow points up a floor. Top floor first: a package imports only from floors below its own.",
             "", "```mermaid", "flowchart TB"]
    for floor in sorted(floors, reverse=True):
        lines.append(f"  subgraph floor{floor}[\"floor {floor}\"]")
        lines += [f"    {pkg}" for pkg in sorted(floors[floor])]
        lines.append("  end")
    lines += [f"  {src} --> {dst}" for src, dst in sorted(edges)]
    lines += ["```", "", "| floor | package | imports from (floor) | imported by |", "|---|---|---|---|"]
    for floor in sorted(floors, reverse=True):
        for pkg in sorted(floors[floor]):
            down = sorted((dst for src, dst in edges if src == pkg), key=lambda d: (-LAYERS[d], d))
            up = sorted(src for src, dst in edges if dst == pkg)
            lines.append(f"| {floor} | `{pkg}` | {', '.join(f'`{d}` ({LAYERS[d]})' for d in down) or '-'} | "
                         f"{', '.join(f'`{u}`' for u in up) or '-'} |")
    return "\n".join(lines) + "\n"


def test_the_drawing_of_the_layers_is_the_import_graph_of_today():
    assert DRAWING.read_text() == draw(), "docs/LAYERS.md is stale: python tests/test_layering.py"


def test_in_the_drawing_studies_are_the_top_floor_and_no_arrow_points_up():
    top = max(LAYERS.values())
    assert [p for p, f in LAYERS.items() if f == top] == ["studies"]
    assert not [dst for (src, dst) in package_edges() if dst == "studies"]
    arrows = [line.split(" --> ") for line in DRAWING.read_text().splitlines() if " --> " in line]
    assert arrows and all(LAYERS[a.strip()] > LAYERS[b.strip()] for a, b in arrows)


if __name__ == "__main__":
    DRAWING.write_text(draw())
    print(f"wrote {DRAWING}")
