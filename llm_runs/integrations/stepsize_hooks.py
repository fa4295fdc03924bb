"""Step-size control in TRL: :class:`StepSizeCallback`, a ``transformers.TrainerCallback`` for
:class:`llm_runs.integrations.trl.TrajectoryGRPOTrainer`.

    trainer = TrajectoryGRPOTrainer(..., estimator="gmc", eps=0.2)
    trainer.add_callback(StepSizeCallback(trainer, ess_scaling="sqrt"))     # VCPO's ESS scaling
    trainer.add_callback(StepSizeCallback(trainer, gmc_step=True))          # GMC's step form

Before each optimiser step (``on_pre_optimizer_step``) it computes the step's factor from the ratios
of every loss call that contributed to the gradient (all ``gradient_accumulation_steps`` micro-batches
since the last step, on every process: :func:`llm_runs.integrations.step_sync.synced_step_scale`
all-gathers the statistics over accelerate's processes, so every replica steps at one rate, as VCPO
does over its data-parallel group; the factor is :func:`llm_runs.stepsize.step_scale`'s on the union
batch: VCPO's ``ess_scaling.{scaling_rule, base_ess_ratio, use_clipped}``, GMC's step form),
multiplies every parameter group's learning rate by it and restores it after the step
(``on_optimizer_step``), as VCPO's actor does around ``optimizer.step()``; the factor is logged as
``step/lr_scale`` (and ``step/ess_ratio``, ``step/gmc_scale``). The learning-rate scheduler is not
touched. ``estimator`` and ``eps`` default to the trainer's; ``eps`` may differ (GMC's step form with
its own cap), ``estimator`` may not (the weights are the trainer's estimator's).
"""
from __future__ import annotations

from transformers import TrainerCallback

from ..stepsize import hook_control, restore_lrs, scale_lrs
from .step_sync import synced_step_scale


class StepSizeCallback(TrainerCallback):
    def __init__(self, trainer, estimator: str | None = None, eps: float | None = None, **controls):
        if estimator is not None and estimator != trainer.estimator:
            raise ValueError(f"StepSizeCallback(estimator={estimator!r}) but the trainer's estimator is "
                             f"{trainer.estimator!r}: the step's weights are the trainer's estimator's")
        self.trainer = trainer
        self.control = hook_control("StepSizeCallback", controls, estimator=trainer.estimator,
                                    eps=trainer.eps if eps is None else eps)
        self._base: list[float] | None = None
        self.last: dict[str, float] = {}
        trainer.record_step_ratios = True
        trainer.step_ratios.clear()

    def _take(self):
        """The ratios (prompts_per_step, G) and weights of every loss call since the last optimiser step."""
        import torch

        seen = list(self.trainer.step_ratios)
        self.trainer.step_ratios.clear()
        if not seen:
            return None, None
        lr = torch.cat([s.double().cpu() for s, _ in seen])
        ws = [w for _, w in seen]
        return lr, (torch.cat([w.double().cpu() for w in ws]) if all(w is not None for w in ws) else None)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        lr, w = self._take()
        if lr is None:
            raise ValueError("StepSizeCallback: the trainer computed no loss before the optimiser step")
        self.last = synced_step_scale(self.control, lr, w)
        self._base = scale_lrs(self.trainer.optimizer, self.last["step/lr_scale"])
        for key, value in self.last.items():
            self.trainer._metrics["train"][key].append(float(value))
        return control

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._base is not None:
            restore_lrs(self.trainer.optimizer, self._base)
            self._base = None
        return control
