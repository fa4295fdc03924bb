"""The drift map's grids as data (:data:`GRIDS`): the pilot, the map (seeds 0-4) and its decisive
cells (seeds 5-9), docs/PREREGISTRATION-DRIFT.md. Run with ``python -m studies.run --grid NAME``."""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS, STUDY_BASE
from studies.common.settings import DRIFT_BASE, DRIFT_OPTIMIZERS, MECHANISM_ESTIMATORS, NEWCOMER_HORIZONS, SGD_LR

DRIFT_PILOT_LRS = {"sgd": (3e-4, 6e-4, 1e-3), "adamclip": (1e-5, 3e-5, 3e-4)}
"""The drift pilot's step sizes beside the mechanism grid's (SGD 1e-4, Adam + clip 1e-4, whose seed-0
runs it reuses): SGD up to the rate that collapsed at delay 0 in the SGD pilot, Adam + clip down to a
tenth of the study's rate, so the drift at d = 64 spans SGD's 1e-4 level to beyond Adam's."""


def drift_pilot_arms() -> tuple[Arm, ...]:
    """One arm per (optimiser, rate) of :data:`DRIFT_PILOT_LRS`: its delay-0 run and gmc, topr at d = 64."""
    arms = [Arm(f"sgd{lr:g}", {"optimizer": "sgd", "lr": lr}, ("gmc", "topr")) for lr in DRIFT_PILOT_LRS["sgd"]]
    arms += [Arm(f"adamclip{lr:g}", {"max_grad_norm": 1.0, "lr": lr}, ("gmc", "topr"))
             for lr in DRIFT_PILOT_LRS["adamclip"]]
    return tuple(arms)


DRIFT_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr", "gspo", "vespo")
"""The drift map's estimators, run at every level (docs/PREREGISTRATION-DRIFT.md)."""

DRIFT_LEVELS = {"sgd": (1e-4, 2e-4, 3e-4, 6e-4), "adamclip": (1e-5, 3e-5, 1e-4)}
"""The drift map's step sizes per optimiser (the drift pilot, docs/PREREGISTRATION-DRIFT.md): the
drift at d = 64 grows with the rate; SGD 6e-4 already degrades its delay-0 run (seed 0: pc 0.514 ->
0.227), so SGD cannot reach Adam's drift at a rate that learns. The 1e-4 levels of both optimisers
are the mechanism grid's arms (gmc, is, tic_mask, tic_trunc, topr and the delay-0 run, read from
results/llm/mechanism); the drift grid adds gspo and vespo there."""

DRIFT_STUDY_LR = 1e-4
"""The Adam + clip rate of the step-size arms: the staleness study's (and the mechanism grid's)."""


def drift_level_arms(seeds_note: str = "") -> tuple[Arm, ...]:
    """One arm per (optimiser, rate) of :data:`DRIFT_LEVELS`: its delay-0 run and every drift
    estimator at d = 64, except at the mechanism grid's levels, where only gspo and vespo are new."""
    arms = []
    for opt, rates in DRIFT_LEVELS.items():
        for lr in rates:
            reused = lr == (SGD_LR if opt == "sgd" else DRIFT_STUDY_LR)
            ests = tuple(e for e in DRIFT_ESTIMATORS if not (reused and e in MECHANISM_ESTIMATORS))
            arms.append(Arm(f"{opt}{lr:g}", {**DRIFT_OPTIMIZERS[opt], "lr": lr}, ests, zero_delay=not reused))
    return tuple(arms)


def drift_step_arms() -> tuple[Arm, ...]:
    """The step-size arms at d = 64: under Adam + clip 1.0 at the study's rate, VCPO's recipe, ESS sqrt
    scaling on gmc, is and topr, GMC's step form on gmc; under the study's unclipped Adam (where the
    mask collapsed in 10 of 10 seeds), the zero-gradient skip on seq_geo_mask (L = 18)."""
    from llm_runs.stepsize import RECIPES

    clip = {**DRIFT_OPTIMIZERS["adamclip"], "lr": DRIFT_STUDY_LR}
    vcpo = {k: v for k, v in RECIPES["vcpo"].items() if k != "estimator"}
    return (Arm("vcpo", {**clip, **vcpo}, (RECIPES["vcpo"]["estimator"],), zero_delay=False),
            Arm("ess", {**clip, "ess_scaling": "sqrt"}, ("gmc", "is", "topr"), zero_delay=False),
            Arm("gmcstep", {**clip, "gmc_step": True}, ("gmc",), zero_delay=False),
            Arm("skip0", {"skip_zero_grad": True,
                          "seq_geo_mask_length": NEWCOMER_HORIZONS["long"]["seq_geo_mask_length"]},
                ("seq_geo_mask",), zero_delay=False))




def drift_decisive_arms() -> tuple[Arm, ...]:
    """Seeds 5-9 of the cells the hypotheses decide: gmc and topr at every level (D1, D2), the
    step-size arms (D3, D4, D6) and every drift estimator at Adam + clip 1e-5 (D7's level if the
    pilot's gains hold; the analysis names the level it used)."""
    arms = []
    for arm in drift_level_arms():
        keep = tuple(e for e in arm.estimators if e in ("gmc", "topr") or arm.label == "adamclip1e-05")
        if keep or arm.zero_delay:
            arms.append(Arm(arm.label, arm.overrides, keep, zero_delay=arm.zero_delay))
    return (*arms, *drift_step_arms())


GRIDS = {
    "pilot_drift": Grid("pilot_drift", grid_out("pilot_drift"), {**STUDY_BASE, "mechanism_diagnostics": True},
                         {"long": HORIZONS["long"]}, (), delays=(64,), seeds=(0,), floor=(), arms=drift_pilot_arms(),
                         pairs=("primary", "mechanism"),
                         doc="the drift map's pilot (docs/PREREGISTRATION-DRIFT.md): SGD at 3e-4, 6e-4, 1e-3 and "
                             "Adam + clip 1.0 at 1e-5, 3e-5, 3e-4, each a delay-0 run and gmc, topr at d = 64, long "
                             "horizon, seed 0 (18 runs; the mechanism grid's seed 0 gives the 1e-4 rates): which "
                             "rates collapse at d = 0 and the drift each reaches at d = 64"),
    "drift": Grid("drift", grid_out("drift"), DRIFT_BASE, {"long": HORIZONS["long"]}, (), delays=(64,),
                   seeds=tuple(range(5)), floor=(), arms=(*drift_level_arms(), *drift_step_arms()),
                   pairs=("primary", "mechanism", "peers_2025"),
                   legacy_settings=("opob_flat_zero",),  # its VCPO arm ran before the setting existed
                   doc="the drift map (docs/PREREGISTRATION-DRIFT.md): SGD at 1e-4, 2e-4, 3e-4, 6e-4 and Adam + clip "
                       "1.0 at 1e-5, 3e-5, 1e-4, each with gmc, is, tic_mask, tic_trunc, topr, gspo, vespo at d = 64 "
                       "and a delay-0 run (the 1e-4 levels' first five estimators are the mechanism grid's runs), plus "
                       "the step-size arms (VCPO's recipe; ESS sqrt scaling on gmc, is, topr; GMC's step form; the "
                       "zero-gradient skip on seq_geo_mask under Adam), long horizon, seeds 0-4 (250 runs)"),
    "drift_decisive": Grid("drift_decisive", grid_out("drift_decisive"), DRIFT_BASE, {"long": HORIZONS["long"]}, (),
                            delays=(64,), seeds=tuple(range(5, 10)), floor=(), arms=drift_decisive_arms(),
                            pairs=("primary", "mechanism", "drift"), legacy_settings=("opob_flat_zero",),
                            doc="seeds 5-9 of the drift map's decisive cells (docs/PREREGISTRATION-DRIFT.md): gmc and "
                                "topr at every level with the delay-0 runs, every drift estimator at Adam + clip "
                                "1e-5, and the step-size arms"),
}
