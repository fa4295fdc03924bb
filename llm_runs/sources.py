"""The rollout-source registry: ``mode`` -> the class that delivers each update's batch.

Sources register here (:mod:`llm_runs.delay` the ``controlled`` one, :mod:`llm_runs.async_rollout`
the ``async`` one); :mod:`llm_runs.rollout_sources` imports both and is what readers of the
registry import, so no source module imports another's registry through a cycle.
"""
from __future__ import annotations

from .registry import Registry


class RolloutSourceError(RuntimeError):
    """A rollout source cannot deliver the batch of an update (its worker died, failed or hung)."""


ROLLOUT_SOURCES = Registry("mode")


def register_rollout_source(name: str, cls: type) -> type:
    """Register a rollout source class ``cls(config, task, tokenizer, max_new_tokens)`` as ``mode = name``."""
    return ROLLOUT_SOURCES.register(name, cls)
