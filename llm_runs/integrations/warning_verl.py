"""The early warning in verl: :func:`install_warning` wraps a verl engine's ``optimizer_step`` (as the step-size
control does, :mod:`llm_runs.integrations.verl.stepsize`) with the frozen rule (docs/PREREGISTRATION-WARNING.md,
:data:`llm_runs.warning.FROZEN`). The plugin installs it when ``actor.policy_loss`` sets the one switch:

    +actor_rollout_ref.actor.policy_loss.early_warning=log          # or stop, lower_step (default off)
    +actor_rollout_ref.actor.policy_loss.early_warning_dir=/ckpt    # where stop saves the engine's checkpoint

The statistic is the per-token KL (k3) of each optimiser step's batch, from the log-ratios the plugin's loss already
takes: every micro-batch's loss adds its k3 sum and token count (:func:`loss_metrics`), and the step reads the sums
since the last step, summed over the engine's data-parallel group, so every rank sees one value. Its mean over the
last 7 steps fires at the frozen threshold: one ``logging`` warning; ``lower_step`` multiplies every later step's rate
by :data:`llm_runs.warning.STEP_FACTOR` (:func:`llm_runs.stepsize.scaled_lr`, restored after the step); ``stop`` saves
the engine's checkpoint (``engine.save_checkpoint``: weights, optimiser and their state) under ``early_warning_dir``
and raises :class:`EarlyWarningStop` after the firing step. In verl's metrics the loss reports ``actor/warn/kl`` (the
micro-batch's KL) and ``actor/warn/kl_rolling``, ``actor/warn/fired`` as of the last optimiser step. One warned engine
per process (verl runs one actor engine per worker).
"""
from __future__ import annotations

import math

import torch

from ..stepsize import scaled_lr
from ..warning import EarlyWarning, check_action

_SUMS = [0.0, 0]
_LAST: dict[str, float] = {}
_HOOKS = [0]
"""The k3 sum and token count since the last optimiser step, the rule's state after it, and how many engines have a
warning installed (nothing is recorded while none has)."""


class EarlyWarningStop(RuntimeError):
    """The warning fired under ``early_warning=stop``: the engine's checkpoint was saved, the run stops here."""


def loss_metrics(log_prob, old_log_prob, response_mask) -> dict[str, float]:
    """Called by the plugin's loss once per micro-batch: adds its k3 sum and token count for the next optimiser
    step and returns the ``warn/`` metrics to log ({} when no warning is installed: the loss is unchanged)."""
    if not _HOOKS[0]:
        return {}
    from estimators.losses import masked_token_log_ratio

    mask = response_mask.bool()
    x = masked_token_log_ratio(log_prob.detach(), old_log_prob.detach(), response_mask).double()
    k3, n = float(torch.where(mask, torch.expm1(x) - x, 0.0).sum()), int(mask.sum())
    _SUMS[0] += k3
    _SUMS[1] += n
    return {"warn/kl": k3 / n if n else math.nan, **_LAST}


def _step_kl(group) -> float:
    sums = torch.tensor(_SUMS, dtype=torch.float64)
    _SUMS[0], _SUMS[1] = 0.0, 0
    if group is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(sums, group=group)
    return float(sums[0] / sums[1]) if sums[1] > 0 else math.nan


def install_warning(engine, action: str = "log", checkpoint_dir: str | None = None) -> EarlyWarning | None:
    """Wrap ``engine.optimizer_step`` with the frozen early warning (module docstring); the monitor is
    ``engine.early_warning`` and the last step's ``warn/`` metrics ``engine.early_warning_last``. ``off`` installs
    nothing (None); a second install on one engine is a no-op if the same, else a ValueError, as is ``stop``
    without ``checkpoint_dir``."""
    action = check_action(action)
    if action == "off":
        return None
    installed = getattr(engine, "early_warning", None)
    if installed is not None:
        if installed.action == action:
            return installed
        raise ValueError(f"install_warning: this engine already has an early warning ({installed.action}); "
                         f"installing {action} would apply two")
    if action == "stop" and not checkpoint_dir:
        raise ValueError("early_warning=stop saves the engine's checkpoint before stopping: set "
                         "actor_rollout_ref.actor.policy_loss.early_warning_dir")
    monitor = EarlyWarning(action, where="verl")
    original = engine.optimizer_step
    _SUMS[0], _SUMS[1] = 0.0, 0
    _LAST.clear()
    _HOOKS[0] += 1
    steps = [0]

    def optimizer_step(*args, **kwargs):
        group = engine.get_data_parallel_group() if hasattr(engine, "get_data_parallel_group") else None
        scale = monitor.step_scale()  # the firing step itself is taken at the full rate
        engine.early_warning_last = monitor.observe(_step_kl(group), steps[0])
        _LAST.update({k: v for k, v in engine.early_warning_last.items() if k != "warn/kl"})
        with scaled_lr(engine.optimizer, scale):
            out = original(*args, **kwargs)
        steps[0] += 1
        if monitor.should_stop():
            path = f"{checkpoint_dir}/global_step_{steps[0]}"
            engine.save_checkpoint(path, global_step=steps[0])
            raise EarlyWarningStop(f"early warning at optimiser step {monitor.fired_at}: checkpoint saved to {path}; "
                                   "the run stops (early_warning=stop)")
        return out

    engine.optimizer_step = optimizer_step
    engine.early_warning = monitor
    engine.early_warning_last = {}
    engine._early_warning_original = original
    return monitor


def uninstall_warning(engine) -> None:
    """Undo :func:`install_warning` on ``engine`` (its ``optimizer_step`` as before; the loss stops recording once
    no engine of the process has a warning)."""
    if getattr(engine, "early_warning", None) is None:
        return
    engine.optimizer_step = engine._early_warning_original
    engine.early_warning = None
    _HOOKS[0] -= 1
    _SUMS[0], _SUMS[1] = 0.0, 0
    _LAST.clear()


def install_from_config(engine, config) -> EarlyWarning | None:
    """:func:`install_warning` with ``actor.policy_loss.early_warning`` and ``early_warning_dir`` of verl's actor
    ``config`` (None: the switch is off, the default)."""
    from .verl.compat import _cfg

    pl = _cfg(config, "policy_loss", None) if config is not None else None
    action = _cfg(pl, "early_warning", None) if pl is not None else None
    if engine is None or action in (None, "off"):
        return None
    return install_warning(engine, action, _cfg(pl, "early_warning_dir", None))
