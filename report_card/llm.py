"""The LLM study part: stable share, final held-out pc and paired differences against TOPR, GSPO,
VESPO and GMC, per cell (horizon, delay, optimiser arm).

Cells (:data:`CELLS`): the long horizon at d = 0 and 64 and the short horizon at d = 64 under the
study's Adam, and the long horizon at d = 0 and 64 under AdamW + decay 0.01 + clip 1.0 (the
mechanism grid's ``adamwclip`` arm: the only arm of that optimiser the toolkit has run).

Committed runs are read, never rerun: ``results/llm/study`` and ``results/llm/study_2025`` (Adam),
``results/llm/mechanism`` (its ``adamwclip`` arm), as :func:`grids.run_table.read_runs` reads them (the
grid audit, then :func:`grids.run_table.run_row` for final pc and stability), only the runs of the
card's cells, with :func:`grids.mechanism_table.arm_of`. At delay 0 every trajectory
scheme makes the same update (every ratio is 1), so the study ran one delay-0 run per seed that
stands for every estimator (:func:`grids.run_table.paired`); the card lets it stand for a correction
only when the correction's gradient at ratio 1 is IS's (:func:`delay0_equivalence`: exactly, or
up to a positive factor under unclipped Adam, which does not see a factor).

A correction's own runs (a new correction's, or a registered one's cell the committed grids lack)
are made by :func:`grids.sweep.run_sweep` on a grid of :class:`grids.Grid` (the
committed grid's settings, seeds 0-4; ``--quick``: seeds 0-1, the short horizon at d = 64 only),
under the card's folder, resumable. Before any run, this machine's warm start is computed and
checked against the committed runs' (:func:`grids.check.check_warm_starts`): where it
differs the part is refused, never mixed. Paired differences: :func:`grids.run_table.paired` and
:func:`grids.run_table.bootstrap` (95% percentile bootstrap, the study's seed and resamples).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from grids import grid_relpath
from schema.stability import STABLE_FRACTION

from .llm_cells import ARMS, CELLS, COMMITTED, FULL_SEEDS, QUICK_CELLS, QUICK_SEEDS, REFERENCES, LLMCell
from .llm_numbers import cell_stats, drift, paired_difference
from .load import EPS, Correction

# --------------------------------------------------------------------------- committed runs

_AUDITED: dict = {}
_ROWS: dict = {}


def _cell_of(run_name: str) -> tuple[str, str, int]:
    """(horizon, estimator, delay) from a study run's name, ``<horizon>[-<arm>]-<estimator>-d<delay>-s<seed>``."""
    parts = run_name.split("-")
    return parts[0], parts[-3], int(parts[-2][1:])


def committed_runs(estimators_: tuple[str, ...] = ()) -> pd.DataFrame:
    """The committed runs of the cells' arms (:data:`CELLS`) for ``estimators_`` (every estimator's
    delay-0 runs too), one row each, with ``arm`` and ``source``: each folder audited as
    :func:`grids.run_table.read_runs` audits it (:func:`grids.check.audit`, foreign runs refused),
    each run read by :func:`grids.run_table.run_row`; only the runs of the card's cells are read (and each
    once per process)."""
    from grids.check import audit, check_pairing
    from grids.mechanism_table import arm_of
    from grids.run_table import run_row
    from schema.results import read_run_config, results_root

    root = results_root()
    wanted = set(estimators_) | set(REFERENCES)
    cells = {(c.horizon, c.delay) for c in CELLS}
    rows = []
    for arm, folders in COMMITTED.items():
        for f in folders:
            path = root / f
            if not path.is_dir():
                continue
            if f not in _AUDITED:
                if f != grid_relpath("primary"):
                    check_pairing(path, root / grid_relpath("primary"))
                found = audit(path)
                found.raise_if_foreign(path)
                _AUDITED[f] = found.runs
            for run in _AUDITED[f]:
                h, e, d = _cell_of(run.name)
                if (h, d) not in cells or not (d == 0 or e in wanted):
                    continue
                if run not in _ROWS:
                    r = run_row(run)
                    _ROWS[run] = None if r is None else {**r, "arm": arm_of(read_run_config(run)),
                                                         "source": f"results/{f}"}
                if _ROWS[run] is not None and _ROWS[run]["arm"] == arm:
                    rows.append(_ROWS[run])
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- delay 0


def delay0_equivalence(estimator: str, T: int = 18, G: int = 8) -> dict:
    """Is ``estimator``'s gradient at ratio 1 (delay 0) IS's? On a batch of 2 groups of G completions of T
    tokens each (the long horizon: every completion has 18), float64: ``same`` (equal to 1e-12
    relative), ``scaled`` (a positive multiple s), ``different``."""
    import torch

    from estimators.losses import policy_loss

    gen = torch.Generator().manual_seed(0)
    old = torch.rand(2 * G, T, generator=gen, dtype=torch.float64) * -3.0
    adv = torch.randn(2 * G, generator=gen, dtype=torch.float64)
    mask = torch.ones(2 * G, T, dtype=torch.float64)

    def grad(n):
        x = old.clone().requires_grad_()
        policy_loss(n, x, old, mask, adv, G, EPS).loss.backward()
        return x.grad.reshape(-1)

    g, ref = grad(estimator), grad("is")
    s = float(g @ ref / (ref @ ref))
    err = float((g - s * ref).norm() / ref.norm())
    if err <= 1e-12 and abs(s - 1) <= 1e-12:
        kind = "same"
    elif err <= 1e-12 and s > 0:
        kind = "scaled"
    else:
        kind = "different"
    return {"kind": kind, "scale": s, "residual": err}


def stands_for(eq: dict, arm: str) -> bool:
    """May the committed delay-0 run stand for the correction under ``arm``? Unclipped Adam divides
    a constant factor out; a clipped norm does not."""
    return eq["kind"] == "same" or (eq["kind"] == "scaled" and arm == "adam")


# --------------------------------------------------------------------------- the plan


def needed(corr: Correction, cells, runs: pd.DataFrame, eq: dict) -> list[LLMCell]:
    """The cells for which the correction has no committed run to read."""
    out = []
    for c in cells:
        sel = runs[(runs["arm"] == c.arm) & (runs["horizon"] == c.horizon) & (runs["delay"] == c.delay)]
        if c.delay == 0:
            if not (stands_for(eq, c.arm) and len(sel)):
                out.append(c)
        elif corr.is_new or not (sel["estimator"] == corr.name).any():
            out.append(c)
    return out


def card_folder_llm(card_dir: Path, arm: str) -> Path:
    return Path(card_dir).absolute() / "llm" / arm


def grids(corr: Correction, todo: list[LLMCell], seeds, overrides: dict | None = None) -> list:
    """One :class:`grids.Grid` per arm for the cells ``todo`` (the committed grid's
    settings as its folder records them, :func:`grids.recorded_grid`; ``overrides`` on
    top, e.g. a smoke test's fewer updates)."""
    from grids import Arm, grid_folder, recorded_grid
    from grids import Grid as Study

    primary, mechanism = recorded_grid(grid_folder("primary")), recorded_grid(grid_folder("mechanism"))

    @dataclass(frozen=True)
    class CardGrid(Study):
        wanted: tuple = ()

        def cells(self):
            return [c for c in super().cells() if [c.horizon, c.delay] in [list(w) for w in self.wanted]]

    horizons_all = recorded_grid(grid_folder("peers_2025")).horizons if corr.name == "seq_geo_mask" \
        else primary.horizons
    out = []
    for arm in ARMS:
        cells = [c for c in todo if c.arm == arm]
        if not cells:
            continue
        hs = {h: horizons_all[h] for h in horizons_all if any(c.horizon == h for c in cells)}
        wanted = tuple((c.horizon, c.delay) for c in cells)
        zero = corr.name if any(c.delay == 0 for c in cells) else None
        if arm == "adam":
            base = {**primary.base, **(overrides or {})}
            g = CardGrid(f"card-{corr.name}-adam", f"results/cards/{corr.name}/llm/adam", base, hs, (corr.name,),
                         delays=(64,), seeds=tuple(seeds), floor=(), zero_delay=zero,
                         doc=f"report card of {corr.name}: its own runs under the study's Adam", wanted=wanted)
        else:
            spec = next(a for a in mechanism.arms if a.label == "adamwclip")
            base = {**mechanism.base, **(overrides or {})}
            g = CardGrid(f"card-{corr.name}-adamwclip", f"results/cards/{corr.name}/llm/adamwclip", base, hs, (),
                         delays=(64,), seeds=tuple(seeds), floor=(), zero_delay=zero,
                         arms=(Arm("adamwclip", spec.overrides, (corr.name,), zero_delay=zero is not None),),
                         doc=f"report card of {corr.name}: its own runs under AdamW + clip (the mechanism grid's arm)",
                         wanted=wanted)
        out.append((arm, g))
    return out


def cost_seconds(grid_list, jobs: int = 2) -> float:
    """:func:`grids.runner.estimate_seconds` of every grid's cells (the study's measured step costs)."""
    from grids.runner import estimate_seconds

    return sum(estimate_seconds(g.cells(), jobs) for _, g in grid_list)


def command(corr: Correction, quick: bool) -> str:
    what = f"--module {corr.source}" if corr.is_new else f"--estimator {corr.name}"
    return f"python -m report_card {what}" + (" --quick" if quick else "")


# --------------------------------------------------------------------------- running


def _executor(jobs: int, corr: Correction):
    from execution import LocalExecutor

    class CorrectionExecutor(LocalExecutor):
        """Local runs that import the correction file first (:mod:`report_card.train`)."""

        def start_command(self, cmd, *, env=None, log_path, cwd=None):
            if corr.is_new and list(cmd[1:3]) == ["-m", "llm_runs.train"]:
                cmd = [cmd[0], "-m", "report_card.train", "--correction", corr.source, "--", *cmd[3:]]
            return super().start_command(cmd, env=env, log_path=log_path, cwd=cwd)

    return CorrectionExecutor(jobs)


def run_grids(corr: Correction, card_dir: Path, grid_list, jobs: int, log=print) -> dict:
    """Check the warm starts, then run (or continue) each grid; ``{arm: status}``."""
    from grids.check import check_warm_starts
    from grids.runner import _warm_starts
    from grids.sweep import run_sweep
    from schema.results import read_run_doc, results_root, run_dirs

    status = {}
    for arm, g in grid_list:
        out = card_folder_llm(card_dir, arm)
        committed = results_root() / COMMITTED[arm][0]
        log(f"LLM part ({arm}): computing or loading this machine's warm start ...")
        warm = _warm_starts(g)
        try:
            check_warm_starts(committed, warm)
            check_warm_starts(out, warm)
        except ValueError as exc:
            status[arm] = {"state": "refused", "why": str(exc)}
            continue
        keys = {(read_run_doc(p).get("warm_start") or {}).get("key") for p in run_dirs(committed)}
        paired = all(info.get("key") in keys for info in warm.values())
        o = run_sweep(g, out, resume=True, jobs=jobs, progress=False, log=log, executor=_executor(jobs, corr))
        status[arm] = {"state": "ran", "paired": paired, "ran": len(o.ran), "skipped": len(o.skipped),
                       "failed": o.failed, "interrupted": o.interrupted,
                       "warm_start": {h: {k: w.get(k) for k in ("key", "heldout_pc")} for h, w in warm.items()}}
    return status


def own_runs(corr: Correction, card_dir: Path) -> pd.DataFrame:
    """The correction's own runs under the card's folder (:func:`grids.run_table.run_row` each)."""
    from grids.mechanism_table import arm_of
    from grids.run_table import run_row
    from schema.results import read_run_config, run_dirs

    rows = []
    for arm in ARMS:
        folder = card_folder_llm(card_dir, arm)
        if not folder.is_dir():
            continue
        for p in run_dirs(folder):
            r = run_row(p)
            if r is None:
                continue
            rows.append({**r, "arm": arm_of(read_run_config(p)), "source": str(folder)})
    return pd.DataFrame(rows)


@dataclass
class _Part:
    """What every cell of the LLM part reads: the plan (the cells the correction needs, ``todo_all``, and those
    computed now, ``todo``), each arm's run status and whether its new runs pair with the committed ones,
    the runs (``both``: the committed and the correction's own; ``mine``: its own only)."""
    corr: Correction
    eq: dict
    todo_all: list
    todo: list
    status: dict
    paired_ok: dict
    new_runs: bool
    overrides: dict | None
    jobs: int
    both: pd.DataFrame
    mine: pd.DataFrame


def part(corr: Correction, card_dir: Path, *, quick: bool, jobs: int = 2, new_runs: bool = True,
         overrides: dict | None = None, seeds: tuple[int, ...] | None = None, log=print) -> dict:
    """The whole LLM part: what was read, what was run, the numbers (``overrides`` and ``seeds``: a
    smoke test's smaller settings for the correction's own runs)."""
    seeds = seeds or (QUICK_SEEDS if quick else FULL_SEEDS)
    runs = committed_runs((corr.name,))
    eq = delay0_equivalence(corr.name)
    todo_all = needed(corr, CELLS, runs, eq)
    todo = [c for c in todo_all if not quick or c in QUICK_CELLS]
    glist = grids(corr, todo, seeds, overrides)
    status = run_grids(corr, card_dir, glist, jobs, log) if todo and new_runs else {}
    smoke = bool(overrides)
    paired_ok = {arm: s.get("state") == "ran" and s.get("paired", False) and not smoke for arm, s in status.items()}
    mine = _own_runs_used(corr, card_dir, paired_ok, smoke)
    keep = runs if not corr.is_new else runs[runs["estimator"] != corr.name]
    both = pd.concat([keep, mine], ignore_index=True) if len(mine) else keep
    x = _Part(corr, eq, todo_all, todo, status, paired_ok, new_runs, overrides, jobs, both, mine)
    out_cells = [_cell_record(c, x) for c in CELLS]
    total_cost = sum(r.get("cost_s", 0.0) for r in out_cells)
    return {"cells": out_cells, "seeds_new_runs": list(seeds), "delay0": eq, "status": status,
            "quick": quick, "smoke_overrides": overrides or {}, "not_computed_cost_s": total_cost,
            "command": command(corr, False), "stable_fraction": STABLE_FRACTION,
            "references": list(REFERENCES), "seeds_committed": sorted(int(s) for s in np.unique(runs["seed"]))}


def _own_runs_used(corr: Correction, card_dir: Path, paired_ok: dict, smoke: bool) -> pd.DataFrame:
    """The correction's own runs the part uses: those of arms whose runs pair with the committed ones (all of
    them under a smoke test's settings), named by the correction."""
    mine = own_runs(corr, card_dir)
    if len(mine):
        mine = mine[mine["arm"].map(lambda a: paired_ok.get(a, False) or smoke)]
        mine = mine.assign(estimator=corr.name)
    return mine


def _cell_state(c: LLMCell, x: _Part) -> str:
    """``read`` (committed runs only), ``computed`` (the correction's own runs, made now), ``not computed`` or
    ``refused`` (this machine's warm start differs from the committed runs')."""
    if c in x.todo_all and c not in x.todo:
        return "not computed"
    if c not in x.todo:
        return "read"
    arm_status = x.status.get(c.arm, {})
    if not x.new_runs or not arm_status:
        return "not computed"
    if arm_status.get("state") == "refused":
        return "refused"
    return "computed" + ("" if x.paired_ok.get(c.arm) else " (smoke settings: not paired)")


def _cell_record(c: LLMCell, x: _Part) -> dict:
    """One cell of the part: its state and, where it has runs, the correction's numbers, drift and references."""
    state = _cell_state(c, x)
    rec = {"cell": dataclasses.asdict(c), "label": c.label, "state": state}
    if state in ("not computed", "refused"):
        return {**rec, **_not_computed(c, x)}
    paired = state == "read" or x.paired_ok.get(c.arm)
    rec["self"] = me = _own_numbers(x.both if paired else x.mine, c, x)
    if c.delay > 0 and me["n"]:
        rec["drift"] = drift(me["runs"])
    rec["references"] = _references(x.both, c, x.corr.name) if c.delay > 0 and paired else {}
    return rec


def _not_computed(c: LLMCell, x: _Part) -> dict:
    """What a cell not computed would take: its runs at the full seeds, their cost here, and why not."""
    from grids.runner import estimate_seconds

    g = [gr for gr in grids(x.corr, x.todo_all, FULL_SEEDS, x.overrides) if gr[0] == c.arm]
    one = [cc for cc in g[0][1].cells() if cc.horizon == c.horizon and cc.delay == c.delay] if g else []
    return {"runs_needed": [cc.name for cc in one], "cost_s": estimate_seconds(one, x.jobs) if one else 0.0,
            "why": x.status.get(c.arm, {}).get("why", "")}


def _own_numbers(pool: pd.DataFrame, c: LLMCell, x: _Part) -> dict:
    """The correction's numbers in the cell (:func:`report_card.llm_numbers.cell_stats`) and whether the cell
    is stable; at delay 0, when the committed run stands for it, why it may."""
    me = cell_stats(pool, c, x.corr.name)
    if c.delay == 0 and c not in x.todo_all:
        me["note"] = (f"the committed delay-0 run stands for {x.corr.name}: its gradient at ratio 1 is IS's "
                      + ("exactly" if x.eq["kind"] == "same" else f"times {x.eq['scale']:.4g} (Adam divides it out)"))
    me["stable_cell"] = bool(me["n"]) and me["stable"] / me["n"] >= STABLE_FRACTION
    return me


def _references(both: pd.DataFrame, c: LLMCell, name: str) -> dict:
    """Each reference's numbers in the cell and the correction's paired difference from it (``available``:
    False where the reference has no run there)."""
    refs = {}
    for r in REFERENCES:
        if r == name:
            continue
        st = cell_stats(both, c, r)
        if not st["n"]:
            refs[r] = {"available": False}
            continue
        refs[r] = {"available": True, **st, "stable_cell": st["stable"] / st["n"] >= STABLE_FRACTION,
                   "difference": paired_difference(both, c, name, r)}
    return refs
