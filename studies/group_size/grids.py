"""The group-size study's grids as data (:data:`GRIDS`, docs/PREREGISTRATION-GROUP-SIZE.md): the
iso-samples G grid (seeds 0-4) and its decisive cells (seeds 5-9). Run with
``python -m studies.run --grid group_size`` (and ``--grid group_size_decisive``), ``--resume`` to continue.

Iso-samples: every update samples B x G = :data:`ISO_SAMPLES` completions (``--prompts-per-step`` =
128 / G), so every update of every cell costs about the same. The G = 8 cells have the drift map's
settings field for field; they are run again here (the committed drift runs were made on a CPU that
rounds otherwise than the machine this grid started on), so that every cell shares one rounding and
seeds pair across G."""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS
from studies.common.settings import DRIFT_BASE, GS_LEVELS

GROUP_SIZES = (4, 8, 16, 32)
ISO_SAMPLES = 128
"""Completions per update, B x G, at every G."""
GS_ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is")
GS_INSIDE = {"adamclip5.5e-05": {"max_grad_norm": 1.0, "lr": 5.5e-5}}
"""A level inside the drift map's interpolated gap (GMC's boundary lay between 3e-5 and 1e-4, a 5.7x KL
gap no run measured): gmc and tic_trunc only."""
INSIDE_ESTIMATORS = ("gmc", "tic_trunc")
CONTROL_LEVEL = "adamclip0.0001"
"""The level of the d = 0 controls (one run per seed and G: at d = 0 GMC's group mean stays below 1 + eps,
so lambda = 1 and GMC's update is IS's bit for bit; the one run stands for both)."""
FIXED_PROMPTS = {"prompts_per_step": 16, "group_size": 32}
"""The block that separates larger groups from fewer prompts: 16 prompts x G = 32 (512 completions per
update) for gmc and tic_trunc at Adam + clip 1e-4."""
DECISIVE_ESTIMATORS = ("gmc", "tic_trunc")


def group(G: int) -> dict:
    """The iso-samples settings of group size ``G``; a G that does not divide :data:`ISO_SAMPLES` is refused."""
    if isinstance(G, bool) or not isinstance(G, int) or G < 2 or ISO_SAMPLES % G:
        raise ValueError(f"group size {G!r} does not divide the iso-samples budget of {ISO_SAMPLES} completions "
                         f"per update into whole groups (G >= 2 dividing {ISO_SAMPLES})")
    return {"group_size": G, "prompts_per_step": ISO_SAMPLES // G}


def arm_label(level: str, G: int) -> str:
    return f"{level}_G{G}"


def group_size_arms() -> tuple[Arm, ...]:
    arms = []
    for G in GROUP_SIZES:
        for level, s in GS_LEVELS.items():
            arms.append(Arm(arm_label(level, G), {**s, **group(G)}, GS_ESTIMATORS, zero_delay=level == CONTROL_LEVEL))
        for level, s in GS_INSIDE.items():
            arms.append(Arm(arm_label(level, G), {**s, **group(G)}, INSIDE_ESTIMATORS, zero_delay=False))
    arms.append(Arm("adamclip0.0001_G32B16", {**GS_LEVELS[CONTROL_LEVEL], **FIXED_PROMPTS}, INSIDE_ESTIMATORS,
                    zero_delay=False))
    return tuple(arms)


def decisive_arms() -> tuple[Arm, ...]:
    return tuple(Arm(arm_label(CONTROL_LEVEL, G), {**GS_LEVELS[CONTROL_LEVEL], **group(G)}, DECISIVE_ESTIMATORS,
                     zero_delay=False) for G in GROUP_SIZES)


GRIDS = {
    "group_size": Grid("group_size", grid_out("group_size"), DRIFT_BASE, {"long": HORIZONS["long"]}, (), delays=(64,),
                        seeds=tuple(range(5)), floor=(), arms=group_size_arms(),
                        doc="the iso-samples group-size grid (docs/PREREGISTRATION-GROUP-SIZE.md): G = 4, 8, 16, 32 "
                            "with 128 / G prompts per update; gmc, tic_trunc, tic_mask, topr, is at Adam + clip 3e-5 "
                            "and 1e-4 and SGD 3e-4, gmc and tic_trunc at Adam + clip 5.5e-5, d = 64; the d = 0 control "
                            "at Adam + clip 1e-4 per G; 16 prompts x G = 32 for gmc and tic_trunc at Adam + clip 1e-4; "
                            "long horizon, seeds 0-4"),
    "group_size_decisive": Grid("group_size_decisive", grid_out("group_size_decisive"), DRIFT_BASE,
                                 {"long": HORIZONS["long"]}, (), delays=(64,), seeds=tuple(range(5, 10)), floor=(),
                                 arms=decisive_arms(),
                                 pairs=("group_size",),
                                 doc="seeds 5-9 of G3's cells (docs/PREREGISTRATION-GROUP-SIZE.md): gmc and tic_trunc "
                                     "at "
                                     "Adam + clip 1e-4, d = 64, G = 4, 8, 16, 32 with 128 / G prompts per update"),
}
