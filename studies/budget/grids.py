"""The budget study's grid as data (docs/PREREGISTRATION-BUDGET.md): how a sample budget N = B x G per update
is best split into B prompts of G completions each under staleness. Run with
``python -m studies.run --grid budget`` (``--resume`` to continue, ``--dry-run`` for the plan);
``python -m studies.budget.plan`` lists every cell of the design, the reused ones beside the grid's own.

The design (:func:`design`): every (B, G) with B, G in {4, 8, 16, 32} and B x G <= 512 (15 cells), gmc,
tic_trunc, topr and is at Adam + clip 1e-4, d = 64, seeds 0-4, with a d = 0 control per cell and seed; at
(B, G) = (4, 32) and (4, 16), gmc_cap at kappa 2 and 4 under the same optimiser, and gmc and topr under SGD
3e-4. The group-size grid (``results/llm/group_size``) already holds some of these runs with every setting
equal (:data:`REUSED`; ``tests/test_budget_grid.py`` compares every field of their recorded configs with the
design's): they are read from there and not run again, and the budget grid (:data:`GRIDS`) holds the rest.
Its runs go seed-major, so a partial grid holds whole seeds.
"""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS
from studies.common.settings import DRIFT_BASE, GS_LEVELS

PROMPTS = (4, 8, 16, 32)
"""B: prompts per update."""
GROUPS = (4, 8, 16, 32)
"""G: completions per prompt (the group size)."""
MAX_SAMPLES = 512
"""The largest sample budget N = B x G of the design (B = G = 32 is left out)."""
BUDGET_ESTIMATORS = ("gmc", "tic_trunc", "topr", "is")
LEVEL = "adamclip0.0001"
"""Adam + clip 1.0 at lr 1e-4: the group-size grid's level where GMC's stability fell with G."""
SGD_LEVEL = "sgd0.0003"
MECHANISM_CELLS = ((4, 32), (4, 16))
"""(B, G) of the mechanism arms: the cells where GMC's share of one trajectory, (1+eps)/B, is largest."""
CAP_KAPPAS = (2.0, 4.0)
"""gmc_cap's kappa: one trajectory weighs at most kappa (1+eps) (GMC alone: up to G (1+eps))."""
SGD_ESTIMATORS = ("gmc", "topr")
SEEDS = tuple(range(5))
DELAY = 64


def splits() -> tuple[tuple[int, int], ...]:
    """Every (B, G) of the design, by N, then B: 15 cells."""
    cells = [(B, G) for B in PROMPTS for G in GROUPS if B * G <= MAX_SAMPLES]
    return tuple(sorted(cells, key=lambda c: (c[0] * c[1], c[0])))


def split(B: int, G: int) -> dict:
    """The settings of one split; a (B, G) outside the design is refused."""
    if (B, G) not in splits():
        raise ValueError(f"(B, G) = ({B!r}, {G!r}) is not a cell of the budget design: B, G in {PROMPTS} with "
                         f"B x G <= {MAX_SAMPLES}")
    return {"prompts_per_step": B, "group_size": G}


def arm_label(level: str, B: int, G: int, kappa: float | None = None) -> str:
    return f"{level}_B{B}G{G}" + (f"_cap{kappa:g}" if kappa is not None else "")


def level_settings(level: str) -> dict:
    return dict(GS_LEVELS[level])


# --------------------------------------------------------------------------- the design and what is reused

REUSED = {
    arm_label(LEVEL, 32, 4): ("group_size", "adamclip0.0001_G4", BUDGET_ESTIMATORS, True),
    arm_label(LEVEL, 16, 8): ("group_size", "adamclip0.0001_G8", BUDGET_ESTIMATORS, True),
    arm_label(LEVEL, 8, 16): ("group_size", "adamclip0.0001_G16", BUDGET_ESTIMATORS, True),
    arm_label(LEVEL, 4, 32): ("group_size", "adamclip0.0001_G32", BUDGET_ESTIMATORS, True),
    arm_label(LEVEL, 16, 32): ("group_size", "adamclip0.0001_G32B16", ("gmc", "tic_trunc"), False),
    arm_label(SGD_LEVEL, 4, 32): ("group_size", "sgd0.0003_G32", SGD_ESTIMATORS, False),
}
"""Budget arm -> (grid, its arm there, the estimators reused at d = 64, whether its d = 0 run is reused): the
group-size grid's runs at seeds 0-4 whose every setting equals the design's (the iso-samples cells are
B = 128 / G; the fixed-prompts block is 16 x 32; the SGD cell is 4 x 32)."""


def design() -> tuple[Arm, ...]:
    """Every arm of the design, reused runs included (:data:`REUSED` says which are read from elsewhere)."""
    arms = [Arm(arm_label(LEVEL, B, G), {**level_settings(LEVEL), **split(B, G)}, BUDGET_ESTIMATORS, zero_delay=True)
            for B, G in splits()]
    for B, G in MECHANISM_CELLS:
        for k in CAP_KAPPAS:
            arms.append(Arm(arm_label(LEVEL, B, G, k), {**level_settings(LEVEL), **split(B, G), "gmc_cap_kappa": k},
                            ("gmc_cap",), zero_delay=False))
        arms.append(Arm(arm_label(SGD_LEVEL, B, G), {**level_settings(SGD_LEVEL), **split(B, G)}, SGD_ESTIMATORS,
                        zero_delay=False))
    return tuple(arms)


def budget_arms() -> tuple[Arm, ...]:
    """The design's arms less what :data:`REUSED` reads from the group-size grid (an arm left empty is dropped)."""
    out = []
    for arm in design():
        _, _, ests, d0 = REUSED.get(arm.label, (None, None, (), False))
        keep = tuple(e for e in arm.estimators if e not in ests)
        zero = arm.zero_delay and not d0
        if keep or zero:
            out.append(Arm(arm.label, arm.overrides, keep, zero_delay=zero))
    return tuple(out)


def _grid(name: str, arms: tuple[Arm, ...], doc: str) -> Grid:
    return Grid(name, grid_out(name), DRIFT_BASE, {"long": HORIZONS["long"]}, (), delays=(DELAY,), seeds=SEEDS,
                floor=(), arms=arms, pairs=("group_size",), doc=doc)


DESIGN = _grid("budget", design(), "the budget design in full (reused runs included; not run as such)")
"""The whole design as one grid (its :meth:`~grids.spec.Grid.cells` name every run; :data:`REUSED` maps some
of them to the group-size grid's folder)."""

GRIDS = {
    "budget": _grid("budget", budget_arms(),
                    "the budget grid (docs/PREREGISTRATION-BUDGET.md): B, G in {4, 8, 16, 32} with B x G <= 512; gmc, "
                    "tic_trunc, topr, is at Adam + clip 1e-4, d = 64, a d = 0 control per cell; gmc_cap (kappa 2, 4) "
                    "and gmc, topr under SGD 3e-4 at (B, G) = (4, 32), (4, 16); long horizon, seeds 0-4; the "
                    "group-size grid's equal cells are reused, not run (studies.budget.grids.REUSED)"),
}
