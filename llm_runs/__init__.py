"""GRPO on Qwen3-architecture models with a controlled rollout delay (the LLM track).

Public API (loaded lazily, so ``import llm_runs`` stays cheap):

* :class:`TrainConfig`, :func:`resolve_config`, :func:`load_run_config`  (``llm_runs.config``)
* :func:`train`, :class:`Trainer`, :class:`RunResult`, :func:`main`  (``llm_runs.train``)
* :func:`read_metrics`, :data:`COLUMNS`  (``llm_runs.metrics``)
* registries: :func:`register_preset` / ``PRESETS``, :func:`register_task` / ``TASKS``,
  :func:`register_rollout_source` / ``ROLLOUT_SOURCES`` (by ``mode``)

Results of a run live in ``results/llm/<run>/``: ``config.json``, ``metrics.csv``,
``summary.json``, ``checkpoints/step-NNNNNN/``.
"""

_EXPORTS = {
    "TrainConfig": "config", "resolve_config": "config", "load_run_config": "config",
    "train": "train", "Trainer": "train", "RunResult": "train", "main": "train",
    "read_metrics": "metrics", "COLUMNS": "metrics",
    "register_preset": "presets", "PRESETS": "presets", "Preset": "presets", "load_pretrained": "presets",
    "register_task": "tasks", "TASKS": "tasks", "Problem": "tasks", "ArithmeticTask": "tasks",
    "ROLLOUT_SOURCES": "rollout_sources", "register_rollout_source": "rollout_sources",
}


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(name)


__all__ = list(_EXPORTS)
