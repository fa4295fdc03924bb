"""The staleness study's grids as data (:data:`GRIDS`): the primary grid, the horizon grid and the
delay-0 pilots that sized them (docs/PREREGISTRATION.md). Run with ``python -m studies.run --grid NAME``."""
from __future__ import annotations

from grids import Grid, grid_out
from llm_runs.reference import HORIZONS, STUDY_BASE

HORIZON_TERMS = (2, 3, 4, 5, 6, 7)
"""The horizon grid's operand counts: scratchpad completions of H = 3 (terms - 1) = 3, 6, ..., 18 tokens."""


HORIZON_WARM_START_STEPS = {2: 150, 3: 200, 4: 300, 5: 425, 6: 500, 7: 700}
"""Warm-start steps per operand count: the fewest multiple of 25 (at most the long horizon's
700) after which the held-out pc reaches the long horizon's warm-start pc (0.514), measured by
running the warm start's own loop with an evaluation every 25 steps. So every H starts from a
comparable policy; the long horizon's 700 steps would start the short ones near-solved (pc
0.77 at terms = 2, whose 80 training problems bound it, and 0.98 at terms = 3). Reached
(pc): 150 (0.515), 200 (0.544), 300 (0.604), 425 (0.673), 500 (0.603), 700 (0.514)."""


def scratchpad_settings(terms: int) -> dict:
    """The long horizon's task settings with ``terms`` operands (:data:`HORIZON_GRID`). Its
    20,000 training problems need terms >= 5 (one-digit operands give 10^terms problems):
    below that the pool is every problem not held out, and at terms = 2 (100 problems) the
    held-out split is 20 problems. The warm start is the long horizon's (lr 2e-3) with
    :data:`HORIZON_WARM_START_STEPS` steps."""
    out = {**HORIZONS["long"], "terms": terms, "warm_start_steps": HORIZON_WARM_START_STEPS[terms]}
    if 10**terms < HORIZONS["long"]["train_size"] + STUDY_BASE["heldout_size"]:
        out["train_size"] = None
    if terms == 2:
        out["heldout_size"] = 20
    return out


HORIZON_GRID = {f"H{3 * (t - 1)}": scratchpad_settings(t) for t in HORIZON_TERMS}
"""Horizon label ``H<tokens>`` -> task settings, the label being the run's H (the runs' own
horizon is read back from their config by :func:`schema.results.horizon_tokens`)."""

HORIZON_BASE = {**STUDY_BASE, "steps": 60, "eval_every": 0, "checkpoint_every": 0}
"""The horizon grid's settings: the study's, but 60 updates, held-out evaluation at the start
and end only, and no checkpoint before the end."""
ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "token_clip", "gspo", "m2po", "cispo", "topr", "opsm",
              "seq_tis_bn")

GRIDS = {
    "primary": Grid("primary", grid_out("primary"), STUDY_BASE, HORIZONS, ESTIMATORS, delays=(16, 64),
                     seeds=tuple(range(10)),
                     doc="11 estimators x delays 16, 64 + stale at 64 + one delay-0 run, x short and long "
                         "horizon, x 10 paired seeds (480 runs of 200 updates)"),
    "horizon": Grid("horizon", grid_out("horizon"), HORIZON_BASE, HORIZON_GRID, ("gmc",), delays=(16,),
                     seeds=(0, 1, 2), floor=(), zero_delay=None,
                     doc="chi^2 against the horizon: GMC at delay 16 on the scratchpad task with 2..7 operands "
                         "(H = 3..18 tokens), 60 updates, 3 seeds (18 runs)"),
    "pilot": Grid("pilot", grid_out("pilot"), STUDY_BASE, {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1, 2),
                   floor=(), doc="delay 0, long horizon, 3 seeds: the learning curve, step costs and seed spread"),
    "pilot_short": Grid("pilot_short", grid_out("pilot_short"), STUDY_BASE, {"short": HORIZONS["short"]}, (),
                         delays=(), seeds=(0, 1, 2), floor=(), doc="the same at the short horizon"),
    "pilot_long_steps": Grid("pilot_long_steps", grid_out("pilot_long_steps"),
                              {**STUDY_BASE, "steps": 800, "eval_every": 40, "checkpoint_every": 100},
                              {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1, 2), floor=(),
                              doc="delay 0, long horizon, 800 updates (four times the study's), 3 seeds: how much "
                                  "of the pc gain the study's 200 updates leave (exploratory, after the grid)"),
}
