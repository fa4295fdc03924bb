"""The early warning in TRL: :class:`EarlyWarningCallback`, a ``transformers.TrainerCallback`` for
:class:`llm_runs.integrations.trl.TrajectoryGRPOTrainer` (off unless added: the one switch is adding it).

    trainer = TrajectoryGRPOTrainer(..., estimator="gmc", eps=0.2)
    trainer.add_callback(EarlyWarningCallback(trainer, action="log"))   # or "stop", "lower_step"

The statistic is the frozen rule's (docs/PREREGISTRATION-WARNING.md, :data:`llm_runs.warning.FROZEN`): the per-token
KL (k3) the adapter's loss already computes on every loss call from its log-ratios (``mech/kl``, reduced over
accelerate's processes), averaged over the loss calls of each optimiser step (every accumulated micro-batch); its
mean over the last 7 steps fires at the frozen threshold. Each step logs ``warn/kl``, ``warn/kl_rolling`` and
``warn/fired`` in TRL's metrics (``log_history``), and the firing logs one ``logging`` warning. ``stop``: TRL saves
a checkpoint at the end of the firing step and stops; ``lower_step``: every later step's learning rate is multiplied
by :data:`llm_runs.warning.STEP_FACTOR` around ``optimizer.step()`` (:func:`llm_runs.stepsize.scale_lrs`, restored
after the step; the scheduler is untouched). Not to be combined with a :class:`StepSizeCallback` under lower_step
(each restores the rate it saw).
"""
from __future__ import annotations

from transformers import TrainerCallback

from ..stepsize import restore_lrs, scale_lrs
from ..warning import EarlyWarning

KL_KEY = "mech/kl"
"""The adapter's per-loss-call KL per token (:func:`llm_runs.theory.ratio_mechanism`), under TRL's name."""


class EarlyWarningCallback(TrainerCallback):
    def __init__(self, trainer, action: str = "log"):
        if action == "off":
            raise ValueError("EarlyWarningCallback(action='off'): leave the callback out to switch the warning off")
        self.monitor = EarlyWarning(action, where=type(trainer).__name__)
        self.trainer = trainer
        self._kl: list[float] = []
        self._base: list[float] | None = None
        self.last: dict[str, float] = {}
        original = trainer._log_reduced

        def log_reduced(mode, metrics):  # the adapter's one place a loss call's statistics are logged
            original(mode, metrics)
            if mode == "train" and KL_KEY in metrics:
                self._kl.append(float(trainer._metrics[mode][KL_KEY][-1]))  # the value reduced over processes

        trainer._log_reduced = log_reduced

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if not self._kl:
            raise ValueError("EarlyWarningCallback: the trainer computed no loss before the optimiser step (is it a "
                             "TrajectoryGRPOTrainer?)")
        scale = self.monitor.step_scale()  # the firing step itself is taken at the full rate
        kl = sum(self._kl) / len(self._kl)
        self._kl.clear()
        self.last = self.monitor.observe(kl, state.global_step)
        for key, value in self.last.items():
            self.trainer._metrics["train"][key].append(float(value))
        if scale != 1.0:
            self._base = scale_lrs(self.trainer.optimizer, scale)
        return control

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._base is not None:
            restore_lrs(self.trainer.optimizer, self._base)
            self._base = None
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor.should_stop():
            control.should_save = True
            control.should_training_stop = True
        return control
