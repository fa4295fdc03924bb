"""The settings several studies' grids share, as data: each study's ``grids.py`` builds its grids from these and
its own, so that no study's grids import another's. The owning study is named beside each."""
from __future__ import annotations

from grids import Arm
from llm_runs.reference import HORIZONS, STUDY_BASE

# the mechanism study's (docs/PREREGISTRATION-MECHANISM.md)
SGD_LR = 1e-4
"""The mechanism grid's SGD step eta: of the pilot's step sizes whose held-out pc never fell below
the warm start's at delay 0, the one whose gain over 200 updates is closest to Adam's (seed 0:
SGD 1e-4 +0.161, Adam lr 1e-4 +0.163; 3e-4 gained +0.162 but fell to 0.476 on the way; 1e-3 and
above collapse at delay 0; docs/PREREGISTRATION-MECHANISM.md)."""

MECHANISM_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr")
"""The optimiser arms' estimators: GMC, IS (no correction), the two TIC schemes, TOPR."""

MECHANISM_ARMS = (
    Arm("sgd", {"optimizer": "sgd", "lr": SGD_LR}, MECHANISM_ESTIMATORS),
    Arm("adamclip", {"max_grad_norm": 1.0}, MECHANISM_ESTIMATORS),
    Arm("adamwclip", {"optimizer": "adamw", "weight_decay": 0.01, "max_grad_norm": 1.0}, MECHANISM_ESTIMATORS),
    Arm("adam", {}, ("gmc", "topr", "gmc_cap", "gmc_topr", "topr_gmc", "snis"), zero_delay=False),
    Arm("adamk2", {"gmc_cap_kappa": 2.0}, ("gmc_cap",), zero_delay=False),
)
"""docs/PREREGISTRATION-MECHANISM.md's arms: the optimiser arms (SGD with a fixed step, Adam with
the gradient norm clipped at 1, AdamW + decay 0.01 + clip 1: verl's actor), and the scheme arm
under the study's unclipped Adam (its gmc and topr again, with the diagnostics, as the full-length
replay of the committed runs they reuse)."""

# the 2025-2026 corrections' grids
BESIDE_PRIMARY = ("peers_2025",)
"""The grids whose runs pair with the staleness study's by seed, set beside them as exploratory rows
(:func:`grids.run_table.read_paired`): the grids whose ``Grid.pairs`` name ``primary``
(``tests/test_studies_layout.py`` holds the two equal)."""

NEWCOMER_HORIZONS = {"short": {**HORIZONS["short"], "seq_geo_mask_length": 3.0},
                     "long": {**HORIZONS["long"], "seq_geo_mask_length": 18.0}}
"""The study's horizons with seq_geo_mask's averaging length: L = 18 tokens at the long horizon
(every completion has 18), L = 3 at the short one (completions of at most 3 tokens). The grids of
the 2025-2026 corrections run them, so that an intervention on the mask changes nothing else."""

# the drift map's (docs/PREREGISTRATION-DRIFT.md)
DRIFT_OPTIMIZERS = {"sgd": {"optimizer": "sgd"}, "adamclip": {"max_grad_norm": 1.0}}

DRIFT_BASE = {**STUDY_BASE, "drift_diagnostics": True}
"""The drift grids' shared settings: the study's, with the drift/ columns (ratios only)."""

# the group-size study's (docs/PREREGISTRATION-GROUP-SIZE.md)
GS_LEVELS = {"adamclip3e-05": {"max_grad_norm": 1.0, "lr": 3e-5}, "adamclip0.0001": {"max_grad_norm": 1.0, "lr": 1e-4},
             "sgd0.0003": {"optimizer": "sgd", "lr": 3e-4}}
"""The drift map's levels where it separates the corrections: GMC held at Adam + clip 3e-5 (10 of 10),
collapsed in 8 of 10 at 1e-4, held in half at SGD 3e-4."""
