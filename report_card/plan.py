"""``--dry-run``: what the card computes, what it reads, and what it costs, before any work."""
from __future__ import annotations

from pathlib import Path

from . import llm, llm_cells
from .load import Correction

EXACT_S = 2.0  # E1 + E2 at every delta, measured (0.1 s) with margin; the search over ratios 0.01 s
ASYNC_S = 15.0  # the H = 16 setting, 4 optimisers x 4 delays x 20 seeds: 10 s measured on this 2-core machine
ROBUST_S = 1.0
THEORY8_S = 20.0  # claims.normalised.points (16 s on the loaded 2-core machine) and the sign laws


REFERENCE = {"trajectory": "gmc", "token": "token_clip"}
"""The registered correction whose cost the estimates above were measured with, per level."""


def call_seconds(name: str, level: str) -> float:
    """Seconds one call of correction ``name`` takes on a battery batch of its level (one timed call,
    after one untimed: the first may import or compile)."""
    import time

    import estimators
    from estimators.losses import TOKEN_LOSSES, check_options

    from .load import EPS, _scheme_cases, _token_batches

    if level == "trajectory":
        lr, adv = next(iter(_scheme_cases()))
        a = adv if estimators.get_scheme(name).needs_advantages else None

        def call():
            estimators.weights(name, lr.copy(), EPS, None if a is None else a.copy())
    else:
        logp, old, mask, adv = next(iter(_token_batches(4)))

        def call():
            TOKEN_LOSSES[name].fn(logp.clone(), old.clone(), mask, adv.clone(), 4, EPS, **check_options(name, {}))
    call()
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def cost_factor(corr: Correction) -> tuple[float, float, float]:
    """``(factor, seconds per call, the reference's seconds per call)``: the simulator and battery estimates
    were measured with the reference correction of the same level (:data:`REFERENCE`); a correction that
    costs more per call scales them by ``its time / the reference's`` (never below 1)."""
    own, ref = call_seconds(corr.name, corr.level), call_seconds(REFERENCE[corr.level], corr.level)
    return max(1.0, own / max(ref, 1e-6)), own, ref


def local_parts(corr: Correction, cost: tuple[float, float, float] | None = None) -> list[str]:
    """The plan's lines for the parts computed on this machine's CPU (battery, exact, THEORY §8, the
    asynchronous simulator), their times scaled by the correction's own cost (:func:`cost_factor`, or
    ``cost`` when given)."""
    from simulators.optimizer_sweeps import scheme_list

    k, own, ref = cost if cost is not None else cost_factor(corr)
    lines: list[str] = []
    lines.append(f"  one call of {corr.name} on a battery batch: {own:.3g} s ({REFERENCE[corr.level]}'s: {ref:.3g} s); "
                 + (f"the times below are scaled by {k:.3g}" if k > 1 else "the times below are the measured ones"))
    exact = "read from results/sim/peers" if not corr.is_new else f"computed, about {_seconds(EXACT_S * k)}"
    lines.append(f"  membership, robustness sweep: computed, about {_seconds(ROBUST_S * k)}")
    lines.append(f"  exact E1/E2 moments and frontier: {exact}")
    lines.append("  THEORY §8 (share bound, exact sign-error probabilities at claims 20-22's points): "
                 "computed, about "
                 f"{_seconds(THEORY8_S * k)} (trajectory schemes)")
    if corr.level != "trajectory":
        lines.append("  asynchronous simulator: not applicable (a token-level loss)")
    elif corr.name in scheme_list() and not corr.is_new:
        lines.append("  asynchronous simulator: read from results/sim/async_optimizers")
    else:
        lines.append("  asynchronous simulator: computed (the committed H = 16 setting, 20 seeds), "
                     f"about {_seconds(ASYNC_S * k)}")
    return lines


def describe(corr: Correction, card_dir: Path, *, quick: bool, jobs: int, new_runs: bool) -> str:
    lines = [(f"report card of {corr.name} ({corr.level}, {'from ' + corr.source if corr.is_new else 'registered'})"
             f" -> {card_dir}")]
    lines += local_parts(corr)
    eq = llm.delay0_equivalence(corr.name)
    todo_all = llm.needed(corr, llm_cells.CELLS, llm.committed_runs((corr.name,)), eq)
    todo = [c for c in todo_all if not quick or c in llm_cells.QUICK_CELLS]
    seeds = llm_cells.QUICK_SEEDS if quick else llm_cells.FULL_SEEDS
    for c in llm_cells.CELLS:
        state = ("read (committed)" if c not in todo_all else
                 "to run" if c in todo and new_runs else "not computed")
        lines.append(f"  LLM {c.label}: {state}")
    glist = llm.grids(corr, todo, seeds)
    runs = [cc.name for _, g in glist for cc in g.cells()]
    cost = llm.cost_seconds(glist, jobs) if new_runs else 0.0
    lines.append(f"  LLM runs to make: {len(runs) if new_runs else 0} "
                 f"({', '.join(runs[:4])}{', ...' if len(runs) > 4 else ''}),"
                 f" about {cost / 60:.0f} min at {jobs} at a time (grids.runner.estimate_seconds), plus a warm start "
                 "per horizon if this machine has none cached; finished runs are skipped on a rerun")
    if quick and todo_all != todo:
        full = llm.cost_seconds(llm.grids(corr, todo_all, llm_cells.FULL_SEEDS), jobs)
        lines.append("  the full card's LLM runs: "
                     f"{sum(len(g.cells()) for _, g in llm.grids(corr, todo_all, llm_cells.FULL_SEEDS))}"
                     f", about {full / 60:.0f} min")
    return "\n".join(lines)


def _seconds(s: float) -> str:
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min" if s < 7200 else f"{s / 3600:.3g} h"
