"""The 2025-2026 corrections' grids as data (:data:`GRIDS`, exploratory, not pre-registered): the
newcomers at the primary grid's cells, and seq_geo_mask under the mechanism grid's SGD.
Run with ``python -m studies.run --grid NAME``."""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import STUDY_BASE
from studies.common.settings import NEWCOMER_HORIZONS, SGD_LR

NEWCOMERS_2025 = ("icepop", "seq_geo_mask", "sapo", "vespo", "dppo_tv")
"""The corrections verl, TRL, AReaL and prime-rl added in 2025-2026 (:mod:`estimators.peers_2025`,
:mod:`estimators.losses`)."""


GRIDS = {
    "peers_2025": Grid("peers_2025", grid_out("peers_2025"), STUDY_BASE,
                        NEWCOMER_HORIZONS, NEWCOMERS_2025, delays=(16, 64), seeds=tuple(range(10)), floor=(),
                        zero_delay=None,
                        pairs=("primary",),
                        doc="exploratory, not pre-registered: the 2025-2026 corrections at the primary grid's "
                            "delays, horizons, warm starts and seeds (200 runs); seq_geo_mask averages over "
                            "L = 18 tokens at the long horizon (every completion has 18) and L = 3 at the short "
                            "one (completions of at most 3 tokens: not verl's per-completion rule there)"),
    "geo_sgd": Grid("geo_sgd", grid_out("geo_sgd"), STUDY_BASE, {"long": NEWCOMER_HORIZONS["long"]},
                     (), delays=(16, 64), seeds=tuple(range(5)), floor=(), zero_delay=None,
                     arms=(Arm("sgd", {"optimizer": "sgd", "lr": SGD_LR}, ("seq_geo_mask",), zero_delay=False),),
                     pairs=("primary",),
                     doc="exploratory, not pre-registered: seq_geo_mask under the mechanism grid's SGD (fixed step "
                         "SGD_LR, no momentum) at the long horizon, d = 16 and 64, the study's warm start and seeds "
                         "0-4 (10 runs): does the mask's collapse under Adam need Adam (its first steps leave the "
                         "0.1% window, then it keeps stepping on momentum while every sequence is masked)?"),
}
