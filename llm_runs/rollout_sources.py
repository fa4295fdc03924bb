"""Every rollout source, registered: import the registry from here (:mod:`llm_runs.sources`)."""
from __future__ import annotations

from . import async_rollout, delay  # noqa: F401  (register modes "async" and "controlled")
from .sources import ROLLOUT_SOURCES, RolloutSourceError, register_rollout_source

__all__ = ["ROLLOUT_SOURCES", "RolloutSourceError", "register_rollout_source"]
