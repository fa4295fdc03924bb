"""``python -m figures.study``: the staleness study's pre-registered analysis (docs/PREREGISTRATION.md).

The analysis is :mod:`claims.study` (the claims layer, so that the verdict on the abstract's
claim 7 is computed from it, below the figures). The pre-registration quotes this module's
names (``figures.study.seeds_for_power``, ``figures.study.differences_table``, the rule's
constants) and its command; each name here is bound to the very object of :mod:`claims.study`,
so the quoted names and the rule that runs are one.
"""
from __future__ import annotations

import sys

from claims.study import (  # noqa: F401  (the names the pre-registration quotes)
    ALPHA,
    BOOT_SEED,
    BOUND_COLUMNS,
    COLLAPSE_FRACTION,
    H4_DIAGNOSTIC,
    H4_THRESHOLD,
    H4_WINDOW,
    HYPOTHESES,
    MARGIN,
    MIN_COLLAPSES,
    MIN_SEEDS,
    N_RESAMPLES,
    STABLE_FRACTION,
    TRAJECTORY,
    analyse,
    bootstrap,
    bound_ratio,
    bound_table,
    collapse_timing,
    differences_table,
    holm,
    main,
    p_below,
    paired,
    read_runs,
    read_traces,
    seeds_for_power,
    stable_in_cell,
    whole_seeds,
)

if __name__ == "__main__":
    sys.exit(main())
