"""The Qwen3-0.6B study's section of the report (``python -m studies.gpu.run`` on one CUDA GPU): its
warm start, plan and plain answer (the staleness study's rule, :func:`studies.report.sections.staleness.plain_answer`)
and F14. Renders only."""
from __future__ import annotations

import os
from pathlib import Path

from figures.mdhtml import num as _num
from figures.registry import fig_module, figure_section
from schema.results import results_root
from studies.gpu.figures import GPU_FIGURE
from studies.report.sections.staleness import plain_answer


def gpu_study_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> list[str]:
    """The Qwen3-0.6B study (``python -m studies.gpu.run``), beside the CPU study's figures: its row of the
    plain answer (:func:`plain_answer`, the same rule) and F14; "not yet run on a GPU" without its folder."""
    from schema.results import read_json
    from studies.gpu.grid import GPU_STUDY

    md = ["### Qwen3-0.6B on one GPU", ""]
    root = GPU_STUDY.find()
    if root is None:
        return md + [(f"Not yet run on a GPU: `{GPU_STUDY.command}` (one CUDA GPU, at most 8 minutes) writes "
                     "`results/llm/gpu_study/`, and this section then shows its plain answer and F14."), ""]
    runs = fig_module(GPU_FIGURE).load_runs()
    record = read_json(root / "gpu_study.json") if (root / "gpu_study.json").is_file() else {}
    ws, plan = record.get("warm_start", {}), record.get("plan", {})
    if ws:
        md += [(f"Warm start: {ws.get('steps')} supervised steps to held-out pc {_num(ws.get('heldout_pc'))} (target "
                f"{ws.get('target_pc')}, {'reached' if ws.get('reached') else 'not reached'}); completions of "
                f"{ws.get('completion_tokens')} Qwen3 tokens. GRPO: {plan.get('steps')} updates at lr "
                f"{plan.get('lr')}, "
                f"seeds run {[w['seed'] for w in record.get('waves', [])]}, peak GPU memory "
                f"{_num(record.get('peak_gpu_gb'), '.1f')} GB. Source: "
                f"`{os.path.relpath(root, results_root().parent)}/gpu_study.json`."), ""]
    md += ["| model | plain answer |", "|---|---|",
           (f"| {fig_module(GPU_FIGURE).model_label(runs)}, one GPU | "
           f"{plain_answer(runs).replace('|', '/')} |"), ""]
    lines, _ = figure_section(GPU_FIGURE, report_dir, figures_out, draw_missing)
    return md + lines + [""]
