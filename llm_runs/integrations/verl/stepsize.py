"""Step-size control in verl: :func:`install_step_control` wraps a verl engine's ``optimizer_step``
(``verl.workers.engine.fsdp.transformer_impl.FSDPEngine.optimizer_step``, which clips and steps the
actor's optimiser) so that the step is taken with the learning rate scaled by the toolkit's
step-size controls (:mod:`llm_runs.stepsize`: VCPO's ESS scaling, GMC's step form), computed from the
trajectory log-ratios of every micro-batch this plugin's loss saw since the last step (the
mini-batch, as VCPO computes ``rho_ess`` over it), summed over the engine's data-parallel group
(``engine.get_data_parallel_group()``; :func:`llm_runs.integrations.step_sync.synced_step_scale`, as VCPO
all-gathers its sums) so every rank steps at one rate, and restored after it, as VCPO's actor does
around ``optimizer.step()`` (mit-han-lab/vcpo ``verl/workers/actor/megatron_actor.py``). The plugin
installs it itself when ``actor.policy_loss`` sets a control
(``+actor_rollout_ref.actor.policy_loss.ess_scaling=sqrt``).

    from llm_runs.integrations.verl.stepsize import install_step_control
    install_step_control(worker.engine, estimator="gmc", eps=0.2, ess_scaling="sqrt")

The settings take the trainer's names (VCPO's ``actor.ess_scaling.{scaling_rule, base_ess_ratio,
use_clipped}`` are ``ess_scaling``, ``ess_base_ratio``, ``ess_use_clipped``). Only this plugin's
policy losses record ratios; with another loss the hook refuses the step (a ValueError), never
steps unscaled in silence. One controlled engine per process (verl runs one actor engine per
worker): the ratios recorded since the last step belong to whichever engine steps next.
"""
from __future__ import annotations

import torch

from ...stepsize import StepControl, hook_control, scaled_lr
from ..step_sync import synced_step_scale

_SEEN: list[tuple[torch.Tensor, torch.Tensor | None]] = []
_HOOKS = [0]
"""The ratios recorded since the last optimiser step, and how many engines have a control installed
(nothing is recorded while none has: the loss keeps no history)."""


def record(seq_log_ratio: torch.Tensor, weights: torch.Tensor | None) -> None:
    """Called by the plugin's loss once per micro-batch: the ratios the next optimiser step's scale uses."""
    if _HOOKS[0]:
        _SEEN.append((seq_log_ratio.detach().double().cpu(),
                      None if weights is None else weights.detach().double().cpu()))


def take() -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The ratios (prompts_per_step, G) and weights recorded since the last call, concatenated over micro-batches."""
    seen = list(_SEEN)
    _SEEN.clear()
    if not seen:
        return None, None
    lr = torch.cat([s for s, _ in seen])
    ws = [w for _, w in seen]
    return lr, (torch.cat(ws) if all(w is not None for w in ws) else None)


def install_step_control(engine, **controls) -> StepControl:
    """Wrap ``engine.optimizer_step`` with the step-size controls ``controls`` (``estimator``, ``eps``,
    ``ess_scaling``, ``ess_base_ratio``, ``ess_use_clipped``, ``gmc_step``); the last step's factor is
    ``engine.step_control_last`` (``step/lr_scale``, ``step/ess_ratio``, ``step/gmc_scale``). Installing the
    same control twice is a no-op; another control on an engine that has one, a setting the hook cannot
    apply (``skip_zero_grad``, ...) or a bad value is a ValueError here, before any step."""
    control = hook_control("install_step_control", controls)
    installed = getattr(engine, "_step_control", None)
    if installed is not None:  # a second install: the same control is a no-op, another one is refused
        if installed == control:
            return installed
        raise ValueError(f"install_step_control: this engine already has a step control ({installed}); installing "
                         f"another ({control}) would apply two: build the engine afresh to change it")
    original = engine.optimizer_step
    take()  # start clean
    _HOOKS[0] += 1

    def optimizer_step(*args, **kwargs):
        lr, w = take()
        group = engine.get_data_parallel_group() if hasattr(engine, "get_data_parallel_group") else None
        try:
            engine.step_control_last = synced_step_scale(control, lr, w, group)  # one rate on every dp rank
        except ValueError as exc:
            raise ValueError(f"{exc} (the policy loss is not one of this plugin's?)") from None
        with scaled_lr(engine.optimizer, engine.step_control_last["step/lr_scale"]):
            return original(*args, **kwargs)

    engine.optimizer_step = optimizer_step
    engine._step_control = control
    engine.step_control_last = {}
    return control
