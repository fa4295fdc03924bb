"""The module verl's ``external_lib`` setting loads: importing it installs the toolkit's losses,
advantage estimators and engine-path patch into verl (:func:`llm_runs.integrations.verl.install`).

    actor_rollout_ref.model.external_lib=llm_runs.integrations.verl_plugin

Everything else lives in :mod:`llm_runs.integrations.verl`, whose modules change nothing in verl
until :func:`~llm_runs.integrations.verl.install` (or ``register``) is called.
"""
from __future__ import annotations

from .verl import core_algos_or_none, extend_policy_loss_config, install

REGISTERED: list[str] = install() if core_algos_or_none() is not None else []
"""Loss names registered at import ([] when verl is not installed)."""

PolicyLossConfig = extend_policy_loss_config() if REGISTERED else None
"""verl's ``PolicyLossConfig`` taking every knob and the plugin's settings (:data:`~llm_runs.integrations.verl.
settings.PLUGIN_SETTINGS`). Point the actor's policy-loss config at it and Hydra imports this module (so
installs the plugin) wherever verl builds that config, in ``validate_config`` in the driver first:

    actor_rollout_ref.actor.policy_loss._target_=llm_runs.integrations.verl_plugin.PolicyLossConfig
    +actor_rollout_ref.actor.policy_loss.kappa=2 +actor_rollout_ref.actor.policy_loss.ess_scaling=sqrt
"""
