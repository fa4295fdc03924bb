"""M5's grids as data (:data:`GRIDS`): the larger model's pilot, the scale grid and its two
exploratory companions (docs/PREREGISTRATION-MECHANISM.md). Run with ``python -m studies.run --grid NAME``."""
from __future__ import annotations

from grids import Grid, grid_out
from llm_runs.reference import HORIZONS, STUDY_BASE, STUDY_MODEL_LARGE

SCALE_ESTIMATORS = ("gmc", "is", "tic_trunc", "topr", "gspo")
"""M5's estimators at the larger model; the best M3/M4 variant joins them (its own folder, the same
warm start and seeds) once M3 and M4 are decided."""

GRIDS = {
    "pilot_large": Grid("pilot_large", grid_out("pilot_large"), {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE},
                         {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1), floor=(),
                         doc="the larger model (STUDY_MODEL_LARGE) at delay 0, long horizon, the study's warm start "
                             "recipe and lr, 2 seeds: its warm-start pc, gain and step cost before M5's grid"),
    "scale": Grid("scale", grid_out("scale"), {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE},
                   {"long": HORIZONS["long"]}, SCALE_ESTIMATORS, delays=(64,), seeds=tuple(range(5)), floor=(),
                   doc="M5 of docs/PREREGISTRATION-MECHANISM.md: the larger model (STUDY_MODEL_LARGE, 2.07M "
                       "parameters), the study's warm start recipe and lr (the pilot's addendum), long horizon, "
                       "gmc, is, tic_trunc, topr, gspo at d = 64 and a delay-0 run, 5 paired seeds (30 runs)"),
    "scale_mech": Grid("scale_mech", grid_out("scale_mech"),
                        {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE, "mechanism_diagnostics": True},
                        {"long": HORIZONS["long"]}, ("gmc", "topr"), delays=(64,), seeds=tuple(range(5)), floor=(),
                        zero_delay=None,
                        pairs=("scale",),
                        doc="exploratory, not pre-registered: the scale grid's gmc and topr runs at d = 64 again "
                            "with the mechanism diagnostics on (they never change the update, so every column "
                            "the scale runs share must replay them byte for byte), for the drift and update-"
                            "direction columns at the larger model (10 runs)"),
    "scale_variants": Grid("scale_variants", grid_out("scale_variants"),
                            {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE}, {"long": HORIZONS["long"]},
                            ("gmc_cap", "gmc_topr", "topr_gmc"), delays=(64,), seeds=tuple(range(5)), floor=(),
                            zero_delay=None,
                            pairs=("scale",),
                            doc="the mechanism study's three GMC variants at the larger model, d = 64, the scale "
                                "grid's warm start and seeds (15 runs): exploratory until M3/M4 pick the variant "
                                "M5's design adds (all three are run, so the pick needs no new run)"),
}
