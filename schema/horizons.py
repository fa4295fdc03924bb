"""The horizon of a run: the staleness study's horizon labels and their tasks (:data:`HORIZON_TASKS`, read
back from a run's settings by :func:`horizon_of`) and H, the completion tokens of a run's task
(:func:`horizon_tokens`, from :func:`sum_width` and :func:`scratchpad_horizon`)."""
from __future__ import annotations

HORIZON_TASKS = {"short": "arithmetic", "long": "scratchpad"}
"""The staleness study's horizon labels and the task each names (``llm_runs.reference.HORIZONS``
holds the rest of each horizon's settings)."""


def horizon_of(config: dict) -> str:
    """The horizon label of a run's settings (from its task), else the task name itself."""
    label = {task: h for h, task in HORIZON_TASKS.items()}
    return label.get(config.get("task"), str(config.get("task")))


def sum_width(digits: int, terms: int) -> int:
    """Characters of the largest sum of ``terms`` operands of ``digits`` digits: the arithmetic
    task's longest answer and the scratchpad's zero-padded field width (one definition, read by
    :mod:`llm_runs.tasks` and by the figures)."""
    return len(str((10**int(digits) - 1) * int(terms)))


def scratchpad_horizon(digits: int, terms: int) -> int:
    """H, the number of completion tokens (EOS included) of every scratchpad completion:
    ``terms - 1`` partial sums of :func:`sum_width` characters, each followed by a comma or EOS."""
    return (int(terms) - 1) * (sum_width(digits, terms) + 1)


def horizon_tokens(config: dict) -> int:
    """The horizon H of a run from its stored settings: exactly :func:`scratchpad_horizon` for
    the scratchpad tasks, and for the arithmetic task its longest completion (answer and EOS:
    ``sum_width + 1``; shorter sums finish earlier). Another task is a ``ValueError``."""
    task, digits, terms = config.get("task"), config.get("digits"), config.get("terms")
    if task in ("scratchpad", "scratchpad_answer"):
        return scratchpad_horizon(digits, terms)
    if task == "arithmetic":
        return sum_width(digits, terms) + 1
    raise ValueError(f"no fixed horizon for task {task!r} (scratchpad, scratchpad_answer or arithmetic)")
