"""The Qwen3-0.6B study's grid as data: :class:`GpuStudy` (a :class:`grids.Grid` whose plan may be cut to its
first seeds), the trainer settings of its runs (:func:`run_base`) and the grid of a plan (:func:`make_study`);
its runs' folder is :data:`GPU_STUDY` (``results/llm/gpu_study/``, made by ``python -m studies.gpu.run``)."""
from __future__ import annotations

from dataclasses import dataclass

from grids import Grid, GridCell
from llm_runs.reference import STUDY_BASE
from schema.results import LLMSource

from .plan import TASK, GpuPlan

GPU_STUDY = LLMSource("llm gpu study", ("llm/gpu_study",), "python -m studies.gpu.run")
"""The GPU study's run folders (:attr:`studies.gpu.plan.GpuPlan.out`)."""


@dataclass(frozen=True)
class GpuStudy(Grid):
    """:class:`grids.spec.Grid` whose plan may be cut to its first seeds (``only_seeds``, not a setting:
    the sweep runner's ``sweep.json`` holds the whole study, whatever part of it ran)."""

    only_seeds: tuple[int, ...] | None = None

    def record(self) -> dict:
        s = super().record()
        s.pop("only_seeds", None)
        return s

    def cells(self) -> list[GridCell]:
        cells = super().cells()
        return cells if self.only_seeds is None else [c for c in cells if c.seed in self.only_seeds]


def run_base(plan: GpuPlan, model_path: str) -> dict:
    """The trainer settings shared by every GRPO run of ``plan``."""
    keep = ("digits", "eps", "advantage", "warm_start_seed")
    return {**{k: STUDY_BASE[k] for k in keep}, "preset": "qwen3-0.6b", "model_path": model_path,
            "warm_start_steps": 0, "dtype": "float32", "amp": "bfloat16", "device": plan.device,
            "heldout_size": plan.heldout_size, "eval_train_size": 0, "eval_batch_size": plan.eval_batch_size,
            "prompts_per_step": plan.prompts_per_step, "group_size": plan.group_size, "lr": plan.lr,
            "steps": plan.steps, "eval_every": plan.eval_every, "checkpoint_every": 0, "keep_checkpoints": 1,
            "threads": 1}


def make_study(plan: GpuPlan, model_path: str) -> GpuStudy:
    return GpuStudy(f"gpu_{plan.name}", plan.out, run_base(plan, model_path), {"long": TASK}, plan.estimators,
                    delays=(plan.delay,), seeds=plan.seeds, floor=(), zero_delay="gmc",
                    doc=f"Qwen3 {plan.name} shape: {', '.join(plan.estimators)} at delay {plan.delay} + one delay-0 "
                        f"run, x {len(plan.seeds)} paired seeds, {plan.steps} updates")
