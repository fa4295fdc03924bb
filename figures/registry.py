"""Every figure the toolkit draws, by name, and how one is placed in a markdown document: its module
(:func:`fig_module`), whether its PNG is older than its results (:func:`_png_stale`), and its heading,
image and caption (:func:`figure_section`, drawing a missing or out-of-date PNG first). ``python -m
figures`` draws :data:`FIGURES`; the report (``python -m studies.report``) places them in its sections."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from schema.results import MissingResults

from . import style
from .mdhtml import plain

STUDY_FIGURES = ["f10_study_differences", "f11_study_pc_vs_delay", "f12_chi2_vs_horizon", "f13_theory_in_the_loop"]
"""The staleness study's figures: drawn by ``python -m figures`` with the others, shown in the
report's first section (:func:`studies.staleness.section.study_section`) instead of its figure list."""
MECHANISM_FIGURES = ["f20_mechanism_pc", "f21_mechanism_diagnostics"]
"""The mechanism study's figures: shown in its section (:func:`studies.mechanism.section.mechanism_section`)."""
OPTIMIZER_FIGURES = ["f15_second_moment_vs_chi2", "f16_async_optimizers"]
"""The exact simulators against the LLM's ordering: shown in their own section
(:func:`studies.report.optimizer_section`)."""
FRAME_FIGURES = ["f22_shared_collapse", "f23_theory_frame"]
"""The shared-parameter model's search and the theory-against-LLM frame: their own section
(:func:`studies.report.frame_section`)."""
DRIFT_FIGURES = ["f24_drift_map"]
"""The drift map: shown in the drift study's section (:mod:`studies.drift.section`)."""
FIGURES = ["f1_bias_vs_G", "f2_sqbias_vs_eps", "f3_tuned_delay_vs_G", "f4_second_moment_vs_delay", "f5_async_sgd",
           "f6_llm_accuracy", "f7_llm_final_vs_delay", "f8_llm_diagnostics", "f9_peers_frontier", *STUDY_FIGURES,
           *MECHANISM_FIGURES, *OPTIMIZER_FIGURES, *FRAME_FIGURES, *DRIFT_FIGURES]
"""Every figure ``python -m figures`` draws."""
GPU_FIGURE = "f14_gpu_pc_vs_delay"
"""The GPU study's figure: drawn by the report (not by ``python -m figures``, which runs without a GPU's results)."""


def fig_module(name: str):
    return importlib.import_module(f"figures.{name}")


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


def figure_section(name: str, report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], str | None]:
    """A figure's heading, image (relative to ``report_dir``) and caption; a figure whose results are
    missing is named with the command that makes them. Returns (markdown lines, the figure if not drawn)."""
    m = fig_module(name)
    png = figures_out / f"{name}.png"
    try:
        df = m.load()
    except MissingResults as e:
        return [f"### {plain(m.TITLE)}", "", f"*Not drawn: {e}*"], f"{plain(m.TITLE)}: results missing"
    if draw_missing and _png_stale(png, m):
        style.save(m.plot(df), name, figures_out)
    rel = os.path.relpath(png, report_dir)
    lines = [f"### {plain(m.TITLE)}", ""]
    lines += [f"![{name}]({rel})", ""] if png.exists() else ["*PNG missing: run `python -m figures`.*", ""]
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
