"""What a grid's plan costs: the seconds of an update and of a held-out evaluation per horizon, measured
by the pilots (:data:`STEP_COST_S`, :data:`EVAL_COST_S`, :func:`horizon_cost`), and the fixed cost of a
run (:data:`RUN_OVERHEAD_S`); :func:`grids.runner.estimate_seconds` prices a plan with them."""
from __future__ import annotations

STEP_COST_S = {"short": 0.121, "long": 0.532}
"""Median seconds per update (rollout + update) measured by the pilots (``--cost-from
results/llm/pilot`` and ``results/llm/pilot_short`` recompute them), one run at a time on the
2-core machine while it was shared (load about 5): long 0.23 s rollout + 0.30 s update."""
EVAL_COST_S = {"short": 0.19, "long": 0.59}
"""Median seconds per held-out evaluation (200 problems), same pilots."""


def horizon_cost(costs: dict, label: str) -> float | None:
    """The cost of horizon ``label`` in ``costs`` (:data:`STEP_COST_S` or :data:`EVAL_COST_S`); a
    scratchpad horizon ``H<tokens>`` of the horizon grid without its own entry costs the long
    horizon's scaled by its tokens (H / 18). None if neither applies."""
    if label in costs:
        return costs[label]
    if label[:1] == "H" and label[1:].isdigit() and "long" in costs:
        return costs["long"] * int(label[1:]) / 18
    return None


RUN_OVERHEAD_S = 8.0
"""Process start, model load, final checkpoint and summary of one run."""
