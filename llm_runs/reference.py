"""The reference setup of the LLM runs, which the committed warm starts were made with (llm_runs/warmstarts;
:data:`COMMITTED_WARM_STARTS`, :func:`committed_config`): the model (:data:`STUDY_MODEL`, and
:data:`STUDY_MODEL_LARGE`, the larger one), the shared settings (:data:`STUDY_BASE`) and one block of task settings
per horizon (:data:`HORIZONS`). The grids (:mod:`grids.spec`, defined in ``studies/<study>/grids.py``) are built on
these; what one grid sets of its own (its arms, its kernel path) lives with it, not here."""
from __future__ import annotations

from schema.results import HORIZON_TASKS

STUDY_MODEL = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16}
"""A 4-layer, 64-wide Qwen3 (247k parameters): a quarter of ``tiny-cpu``'s compute per token."""

STUDY_MODEL_LARGE = {"hidden_size": 128, "intermediate_size": 544, "num_hidden_layers": 8, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 32}
"""An 8-layer, 128-wide Qwen3 (2,068,992 parameters with the scratchpad's 15-token vocabulary: 8.4
times :data:`STUDY_MODEL`'s 247,424): the mechanism study's second model size (M5)."""

STUDY_BASE = {"preset": "tiny-cpu", "model_kwargs": STUDY_MODEL, "digits": 1, "heldout_size": 200,
              "eval_train_size": 0, "warm_start_batch": 128, "warm_start_seed": 0,
              "prompts_per_step": 16, "group_size": 8, "lr": 1e-4, "eps": 0.2, "advantage": "loo", "steps": 200,
              "eval_every": 20, "checkpoint_every": 50, "keep_checkpoints": 1, "threads": 1}
"""Shared by every run of the study (and the pilot): B = 16 prompts x G = 8, Adam, eps 0.2,
leave-one-out advantages, 200 updates, held-out evaluation (200 problems) every 20 updates."""

HORIZONS = {
    "short": {"task": HORIZON_TASKS["short"], "terms": 3, "warm_start_steps": 150, "warm_start_lr": 2e-3},
    "long": {"task": HORIZON_TASKS["long"], "terms": 7, "train_size": 20000, "warm_start_steps": 700,
             "warm_start_lr": 2e-3},
}
"""Horizon -> task settings. short: ``3+5+9=`` -> ``17`` (H <= 3 tokens with EOS); long: seven
one-digit operands with every partial sum written out, ``08,17,...`` (H = 18 tokens)."""


COMMITTED_WARM_STARTS = {"long": {**STUDY_BASE, **HORIZONS["long"]}, "short": {**STUDY_BASE, **HORIZONS["short"]},
                         "large": {**STUDY_BASE, **HORIZONS["long"], "model_kwargs": STUDY_MODEL_LARGE}}
"""The settings whose warm starts are committed (llm_runs/warmstarts): the staleness study's long and
short horizons and the larger model's (the scale grids)."""


def committed_config(which: str):
    """The run configuration of :data:`COMMITTED_WARM_STARTS` ``which``."""
    from .config import resolve_config

    if which not in COMMITTED_WARM_STARTS:
        raise ValueError(f"unknown warm start {which!r}; valid: {', '.join(COMMITTED_WARM_STARTS)}")
    return resolve_config(COMMITTED_WARM_STARTS[which])
