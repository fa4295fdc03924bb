"""Step-size control in TRL: :class:`StepSizeCallback`, a ``transformers.TrainerCallback`` for
:class:`llm_runs.integrations.trl.TrajectoryGRPOTrainer`.

    trainer = TrajectoryGRPOTrainer(..., estimator="gmc", eps=0.2)
    trainer.add_callback(StepSizeCallback(trainer, ess_scaling="sqrt"))     # VCPO's ESS scaling
    trainer.add_callback(StepSizeCallback(trainer, gmc_step=True))          # GMC's step form

Before each optimiser step (``on_pre_optimizer_step``) it computes the step's factor from the ratios
of the loss call that produced the gradient (:func:`llm_runs.stepsize.step_scale`, the trainer's own
definition: VCPO's ``ess_scaling.{scaling_rule, base_ess_ratio, use_clipped}``, GMC's step form),
multiplies every parameter group's learning rate by it and restores it after the step
(``on_optimizer_step``), as VCPO's actor does around ``optimizer.step()``; the factor is logged as
``step/lr_scale`` (and ``step/ess_ratio``, ``step/gmc_scale``). The learning-rate scheduler is not
touched. One loss call per optimiser step: ``gradient_accumulation_steps`` must be 1 (a ValueError
otherwise, since the ESS is a statistic of the update's whole batch).
"""
from __future__ import annotations

from transformers import TrainerCallback

from ..stepsize import StepControl, is_active, restore_lrs, scale_lrs, step_scale


class StepSizeCallback(TrainerCallback):
    def __init__(self, trainer, **controls):
        if getattr(trainer.args, "gradient_accumulation_steps", 1) != 1:
            raise ValueError(f"StepSizeCallback needs gradient_accumulation_steps = 1 (one loss call per optimiser "
                             f"step), got {trainer.args.gradient_accumulation_steps}")
        self.trainer = trainer
        self.control = StepControl(estimator=trainer.estimator, eps=trainer.eps, **controls)
        if not is_active(self.control):
            raise ValueError("StepSizeCallback with no control on: give ess_scaling='sqrt'|'linear' or gmc_step=True")
        self._base: list[float] | None = None
        self.last: dict[str, float] = {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        out = getattr(self.trainer, "last_loss_output", None)
        if out is None:
            raise ValueError("StepSizeCallback: the trainer computed no loss before the optimiser step")
        self.last = step_scale(self.control, out.seq_log_ratio, out.weights)
        self._base = scale_lrs(self.trainer.optimizer, self.last["step/lr_scale"])
        for key, value in self.last.items():
            self.trainer._metrics["train"][key].append(float(value))
        return control

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._base is not None:
            restore_lrs(self.trainer.optimizer, self._base)
            self._base = None
        return control
