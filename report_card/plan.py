"""``--dry-run``: what the card computes, what it reads, and what it costs, before any work."""
from __future__ import annotations

from pathlib import Path

from . import llm
from .load import Correction

EXACT_S = 2.0  # E1 + E2 at every delta, measured (0.1 s) with margin; the search over ratios 0.01 s
ASYNC_S = 15.0  # the H = 16 setting, 4 optimisers x 4 delays x 20 seeds: 10 s measured on this 2-core machine
ROBUST_S = 1.0
THEORY8_S = 20.0  # claims.normalised.points (16 s on the loaded 2-core machine) and the sign laws


def describe(corr: Correction, card_dir: Path, *, quick: bool, jobs: int, new_runs: bool) -> str:
    from simulators.optimizer_sweeps import scheme_list

    lines = [(f"report card of {corr.name} ({corr.level}, {'from ' + corr.source if corr.is_new else 'registered'})"
             f" -> {card_dir}")]
    exact = "read from results/sim/peers" if not corr.is_new else f"computed, about {EXACT_S:g} s"
    lines.append(f"  membership, robustness sweep: computed, about {ROBUST_S:g} s")
    lines.append(f"  exact E1/E2 moments and frontier: {exact}")
    lines.append("  THEORY §8 (share bound, exact sign-error probabilities at claims 20-22's points): "
                 "computed, about "
                 f"{THEORY8_S:g} s (trajectory schemes)")
    if corr.level != "trajectory":
        lines.append("  asynchronous simulator: not applicable (a token-level loss)")
    elif corr.name in scheme_list() and not corr.is_new:
        lines.append("  asynchronous simulator: read from results/sim/async_optimizers")
    else:
        lines.append("  asynchronous simulator: computed (the committed H = 16 setting, 20 seeds), "
                     f"about {ASYNC_S:g} s")
    eq = llm.delay0_equivalence(corr.name)
    todo_all = llm.needed(corr, llm.CELLS, llm.committed_runs((corr.name,)), eq)
    todo = [c for c in todo_all if not quick or c in llm.QUICK_CELLS]
    seeds = llm.QUICK_SEEDS if quick else llm.FULL_SEEDS
    for c in llm.CELLS:
        state = ("read (committed)" if c not in todo_all else
                 "to run" if c in todo and new_runs else "not computed")
        lines.append(f"  LLM {c.label}: {state}")
    glist = llm.grids(corr, todo, seeds)
    runs = [cc.name for _, g in glist for cc in g.cells()]
    cost = llm.cost_seconds(glist, jobs) if new_runs else 0.0
    lines.append(f"  LLM runs to make: {len(runs) if new_runs else 0} "
                 f"({', '.join(runs[:4])}{', ...' if len(runs) > 4 else ''}),"
                 f" about {cost / 60:.0f} min at {jobs} at a time (llm_runs.study.estimate_seconds), plus a warm start "
                 "per horizon if this machine has none cached; finished runs are skipped on a rerun")
    if quick and todo_all != todo:
        full = llm.cost_seconds(llm.grids(corr, todo_all, llm.FULL_SEEDS), jobs)
        lines.append("  the full card's LLM runs: "
                     f"{sum(len(g.cells()) for _, g in llm.grids(corr, todo_all, llm.FULL_SEEDS))}"
                     f", about {full / 60:.0f} min")
    return "\n".join(lines)
