"""The mechanism study's grids as data (:data:`GRIDS`): the SGD pilot that chose the step and the
optimiser and scheme arms (docs/PREREGISTRATION-MECHANISM.md). Run with ``python -m studies.run --grid NAME``."""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS, STUDY_BASE
from studies.common.settings import (  # noqa: F401 (named here by the pre-registration)
    MECHANISM_ARMS,
    MECHANISM_ESTIMATORS,
    SGD_LR,
)

SGD_PILOT_LRS = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3)
"""SGD step sizes of the pilot (one seed). Adam's per-coordinate step of lr 1e-4 moves the 247k
parameters by about 1e-4 sqrt(247k) = 0.05 per update and the study's gradient norms at delay 0
have a median of about 23, so SGD at eta ~ 2e-3 would move them as far; but a first pilot found
eta = 1e-3 and 3e-3 (and 1e-2, 3e-2, stopped early) collapsing at delay 0 within 20 updates
(the reward fell from 0.42 to 0.09 after one step at 1e-3: the gradient is concentrated on few
coordinates), so the grid reaches down to 3e-5."""



GRIDS = {
    "mechanism": Grid("mechanism", grid_out("mechanism"), {**STUDY_BASE, "mechanism_diagnostics": True},
                       {"long": HORIZONS["long"]}, (), delays=(64,), seeds=tuple(range(10)), floor=(),
                       arms=MECHANISM_ARMS,
                       pairs=("primary",),
                       doc="why GMC fails on long completions (docs/PREREGISTRATION-MECHANISM.md): optimiser arms "
                           "(sgd, adamclip, adamwclip) x gmc, is, tic_mask, tic_trunc, topr + a delay-0 run each, and "
                           "scheme arms under unclipped Adam (gmc, topr, gmc_cap, gmc_topr, topr_gmc, snis; gmc_cap "
                           "kappa 2), long horizon, d = 64, 10 paired seeds (250 runs of 200 updates)"),
    "pilot_sgd": Grid("pilot_sgd", grid_out("pilot_sgd"), STUDY_BASE, {"long": HORIZONS["long"]}, (), delays=(),
                       seeds=(0,), floor=(),
                       arms=tuple(Arm(f"sgd{lr:g}", {"optimizer": "sgd", "lr": lr}, ()) for lr in SGD_PILOT_LRS),
                       doc="SGD (fixed step, no momentum) at delay 0, long horizon, step sizes "
                           f"{', '.join(f'{lr:g}' for lr in SGD_PILOT_LRS)}, seed 0: the step whose held-out gain "
                           "over 200 updates is closest to Adam's (the mechanism grid's SGD arm)"),
}
