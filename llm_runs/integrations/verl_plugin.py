"""The module verl's ``external_lib`` setting loads: importing it installs the toolkit's losses,
advantage estimators and engine-path patch into verl (:func:`llm_runs.integrations.verl.install`).

    actor_rollout_ref.model.external_lib=llm_runs.integrations.verl_plugin

Everything else lives in :mod:`llm_runs.integrations.verl`, whose modules change nothing in verl
until :func:`~llm_runs.integrations.verl.install` (or ``register``) is called.
"""
from __future__ import annotations

from .verl import core_algos_or_none, install

REGISTERED: list[str] = install() if core_algos_or_none() is not None else []
"""Loss names registered at import ([] when verl is not installed)."""
