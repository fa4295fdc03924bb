"""The 2026 corrections' grid as data (:data:`GRIDS`), pre-registered in docs/PREREGISTRATION-2026.md: each
correction at the drift map's levels where it separates the corrections (Adam + clip 1.0 at 3e-5 and 1e-4,
SGD at 3e-4), d = 64, the long horizon, seeds 0-4, with the drift grid's settings, so that every run pairs by
seed with the committed gmc, topr, tic_trunc and is runs of the same level (``results/llm/drift`` at 3e-5
and SGD 3e-4, ``results/llm/mechanism`` at Adam + clip 1e-4). Run with ``python -m studies.run --grid
corrections_2026``."""
from __future__ import annotations

from estimators.losses import CORRECTIONS_2026
from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS
from studies.common.settings import DRIFT_BASE, DRIFT_OPTIMIZERS

LEVELS_2026 = (("adamclip", 3e-5), ("adamclip", 1e-4), ("sgd", 3e-4))
"""(optimiser, rate) of the pre-registered levels, in the drift map's labels (``adamclip3e-05`` ...)."""


def corrections_2026_arms() -> tuple[Arm, ...]:
    """One arm per level: every 2026 correction at d = 64 under the drift map's optimiser settings; no delay-0
    run of its own (the drift map's committed delay-0 runs are the warm start's controls)."""
    return tuple(Arm(f"{opt}{lr:g}", {**DRIFT_OPTIMIZERS[opt], "lr": lr}, CORRECTIONS_2026, zero_delay=False)
                 for opt, lr in LEVELS_2026)


GRIDS = {
    "corrections_2026": Grid(
        "corrections_2026", grid_out("corrections_2026"), DRIFT_BASE, {"long": HORIZONS["long"]}, (),
        delays=(64,), seeds=tuple(range(5)), floor=(), zero_delay=None, arms=corrections_2026_arms(),
        pairs=("primary", "mechanism", "drift"),
        doc="the 2026 corrections on the drift map (docs/PREREGISTRATION-2026.md): p3o, ctpo, minpro, trm_k2, "
            "trm_k3, dispo and oapl at their registered defaults under Adam + clip 1.0 at 3e-5 and 1e-4 and SGD at "
            "3e-4, d = 64, long horizon, the drift grid's settings, seeds 0-4 (105 runs), paired by seed with the "
            "drift map's committed runs of the same level"),
}
