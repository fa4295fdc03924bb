"""Every figure the toolkit draws, by name, and how one is placed in a markdown document: its module
(:func:`fig_module`), whether its PNG is older than its results (:func:`_png_stale`), and its heading,
image and caption (:func:`figure_section`, drawing a missing or out-of-date PNG first). ``python -m
figures`` draws the toolkit's :data:`FIGURES`, ``python -m studies.figures`` those and every study's; the report
(``python -m studies.report``) places them in its sections."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from schema.results import MissingResults

from . import style
from .mdhtml import plain

OPTIMIZER_FIGURES = ["f15_second_moment_vs_chi2", "f16_async_optimizers"]
"""The exact simulators against the LLM's ordering: shown in their own section
(:func:`studies.report.optimizer_section`)."""
FRAME_FIGURES = ["f22_shared_collapse", "f23_theory_frame"]
"""The shared-parameter model's search and the theory-against-LLM frame: their own section
(:func:`studies.report.frame_section`)."""
FIGURES = ["f1_bias_vs_G", "f2_sqbias_vs_eps", "f3_tuned_delay_vs_G", "f4_second_moment_vs_delay", "f5_async_sgd",
           "f6_llm_accuracy", "f7_llm_final_vs_delay", "f8_llm_diagnostics", "f9_peers_frontier",
           *OPTIMIZER_FIGURES, *FRAME_FIGURES]
"""The toolkit's own figures (the theory, the simulators, the first LLM sweep), which ``python -m figures``
draws; each study's figures live in its folder (``studies/<study>/figures/``) and ``python -m studies.figures``
draws them all."""


def fig_module(ref: str):
    """A figure's module: ``ref`` is a toolkit figure's name (``f7_llm_final_vs_delay``) or any figure
    module's dotted path (``studies.staleness.figures.f10_study_differences``)."""
    return importlib.import_module(ref if "." in ref else f"figures.{ref}")


def fig_name(ref: str) -> str:
    """A figure's name, that of its PNG in ``figures/out/``: the last part of its module's path."""
    return ref.rsplit(".", 1)[-1]


def _newest_mtime(path: Path) -> float:
    """A file's modification time; a folder's is that of the newest file under it (a run added
    to or rewritten in a study folder does not change the folder's own time)."""
    if path.is_file():
        return path.stat().st_mtime
    return max((f.stat().st_mtime for f in path.rglob("*") if f.is_file()), default=path.stat().st_mtime)


def _png_stale(png: Path, module) -> bool:
    """The figure is missing or older than one of its sources (files, or any file in a folder)."""
    if not png.exists():
        return True
    made = png.stat().st_mtime
    return any(_newest_mtime(p) > made for p in (s.find() for s in module.SOURCES) if p is not None)


def figure_section(ref: str, report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], str | None]:
    """A figure's heading, image (relative to ``report_dir``) and caption (``ref`` as :func:`fig_module`
    takes it); a figure whose results are missing is named with the command that makes them. Returns
    (markdown lines, the figure if not drawn)."""
    m = fig_module(ref)
    name = fig_name(ref)
    png = figures_out / f"{name}.png"
    try:
        df = m.load()
    except MissingResults as e:
        return [f"### {plain(m.TITLE)}", "", f"*Not drawn: {e}*"], f"{plain(m.TITLE)}: results missing"
    if draw_missing and _png_stale(png, m):
        style.save(m.plot(df), name, figures_out)
    rel = os.path.relpath(png, report_dir)
    lines = [f"### {plain(m.TITLE)}", ""]
    lines += [f"![{name}]({rel})", ""] if png.exists() else ["*PNG missing: run `python -m studies.figures`.*", ""]
    lines += [plain(m.caption(df))]
    return lines, None


def figure_sections(names, report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], list[str]]:
    """:func:`figure_section` of each figure in ``names``: (markdown lines, figures not drawn)."""
    md, missing = [], []
    for name in names:
        lines, miss = figure_section(name, report_dir, figures_out, draw_missing)
        md += lines + [""]
        if miss:
            missing.append(miss)
    return md, missing
