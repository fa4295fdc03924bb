"""A run's drift: how far its policy moved from the behaviour policy that sampled its rollouts, and
its place on the drift map.

    python -m llm_runs.drift RUN_DIR                      # a run of this toolkit
    python -m llm_runs.drift metrics.jsonl --stack verl   # a verl metrics export (file logger)
    python -m llm_runs.drift trainer_state.json --stack trl --delay 4   # steps_per_generation = 5

The drift of a run (:func:`summary`) is the median over updates t in [d, d + 20) (``early``, the
map's axis: read before a collapse makes the ratios explode) and over every t >= d (``all``) of:

==================  ==========================================  ==============================================
axis                this toolkit (and its TRL adapter)          verl
==================  ==========================================  ==============================================
kl                  ``drift/kl``, ``mech/kl``                    ``rollout_corr/k3_kl`` (the same k3 estimate,
                                                                 ``rollout_corr_helper.compute_offpolicy_metrics``)
chi2                ``stale/chi2``                               ``rollout_corr/chi2_seq`` (its ratios clamped at
                                                                 exp(+-20)); ``actor/stale/chi2`` (this plugin)
ess_ratio           ``drift/ess_ratio``                          ``staleness/ess/minibatch_ess_ratio`` (VCPO's fork)
abs_log_w_median    ``drift/abs_log_w_median``                   (none)
==================  ==========================================  ==============================================

TRL logs no KL, chi^2 or ESS of its own; with this toolkit's adapter (:mod:`llm_runs.integrations.trl`)
its ``log_history`` carries the toolkit's names. The map itself (per estimator and optimiser, the
stable share at each measured drift and the fitted failure boundary) is written by the drift study's
analysis (``python -m studies.drift`` -> ``results/llm/drift/map.json``); :func:`place` reads it.
"""
from __future__ import annotations

import argparse
import math
import numbers
import sys
from pathlib import Path

import pandas as pd

from .drift_export import (  # noqa: F401 (the reader's entry points, defined beside the checks they make)
    MISSING,
    STEP_COLUMNS,
    integer_setting,
    metric_values,
    read_export,
    run_group_size,
    step_column,
)

AXES = ("kl", "chi2", "ess_ratio", "abs_log_w_median")
EARLY_UPDATES = 20
"""The early window: updates d .. d + EARLY_UPDATES - 1."""
COLUMNS = {
    "toolkit": {"kl": ("drift/kl", "mech/kl"), "chi2": ("stale/chi2",), "ess_ratio": ("drift/ess_ratio",),
                "abs_log_w_median": ("drift/abs_log_w_median",)},
    "verl": {"kl": ("rollout_corr/k3_kl", "actor/mech/kl"), "chi2": ("rollout_corr/chi2_seq", "actor/stale/chi2"),
             "ess_ratio": ("staleness/ess/minibatch_ess_ratio", "actor/drift/ess_ratio"), "abs_log_w_median": ()},
    "trl": {"kl": ("mech/kl", "drift/kl"), "chi2": ("stale/chi2",),
            "ess_ratio": ("drift/ess_ratio", "step/ess_ratio", "stale/ess"),
            "abs_log_w_median": ("drift/abs_log_w_median",)},
}
"""Stack -> axis -> the metric names that carry it, preferred first. TRL's adapter logs the batch ESS
ratio as ``step/ess_ratio`` when a step-size control runs, and always the mean per-group ESS/G as
``stale/ess`` (a per-group quantity: the column read is printed beside the value)."""
FIRST_STEP = {"trl": 1}
"""The step number a stack gives its first update (TRL's ``log_history`` counts from 1; the others from 0)."""
MIN_EARLY_VALUES = 5
MIN_EARLY_SHARE = 0.5
"""A run is placed on the map only when its early window holds at least :data:`MIN_EARLY_VALUES` KL
values and at most ``1 - MIN_EARLY_SHARE`` of the window's rows lack one (missing: empty, ``n/a``,
``NaN``, null: :data:`llm_runs.drift_export.MISSING`); the missing ones are counted and reported either way, and a
value that is neither a number nor missing is refused by name (:func:`llm_runs.drift_export.metric_values`)."""


def summary(m: pd.DataFrame, delay: int, stack: str = "toolkit") -> dict:
    """``{"<axis>_early": ..., "<axis>_all": ..., "<axis>_column": name}`` of a metrics table ``m`` (one row
    per update, a step column) for a run of delay ``delay``; NaN where the stack logs no such column."""
    if stack not in COLUMNS:
        raise ValueError(f"unknown stack {stack!r}; valid: {', '.join(COLUMNS)}")
    if isinstance(delay, bool) or not isinstance(delay, numbers.Integral) or delay < 0:
        raise ValueError(f"delay must be an integer >= 0, got {delay!r}")
    step = step_column(m)
    t = metric_values(m, step) - FIRST_STEP.get(stack, 0)  # update index, from 0
    out: dict = {}
    windows = {"early": (t >= delay) & (t < delay + EARLY_UPDATES), "all": t >= delay}
    if stack == "trl":
        # TRL's delay cycles: with steps_per_generation = d + 1 (num_iterations = 1, no gradient accumulation)
        # update u is d_u = u mod (d + 1) steps stale. The map was measured at a fixed delay d, so only the
        # updates at staleness d are read: the early window is the first EARLY_UPDATES of them.
        at_d = (t >= delay) & (t % (delay + 1) == delay)
        first = t[at_d].sort_values().iloc[:EARLY_UPDATES]
        windows = {"early": at_d & t.isin(first), "all": at_d}
        out["fixed_delay_updates"] = int(at_d.sum())
    for axis in AXES:
        present = [c for c in COLUMNS[stack][axis] if c in m]
        read = {c: metric_values(m, c, step) for c in present}  # a value neither a number nor missing: refused
        col = next((c for c in present if read[c].notna().any()), present[0] if present else None)
        out[f"{axis}_column"] = col
        out[f"{axis}_empty_columns"] = [c for c in present if read[c].isna().all()]  # present, every value missing
        values = read[col] if col else pd.Series(math.nan, index=m.index)
        for part, sel in windows.items():
            x = values[sel].dropna()
            out[f"{axis}_{part}"] = float(x.median()) if len(x) else math.nan
            out[f"{axis}_{part}_rows"] = int(sel.sum())
            out[f"{axis}_{part}_missing"] = int(values[sel].isna().sum()) if col else int(sel.sum())
        logged = t[values.notna()].dropna()
        out[f"{axis}_steps"] = (int(logged.min()), int(logged.max())) if len(logged) else None
    return out


def placement_problem(s: dict, delay: int, axis: str = "kl") -> str | None:
    """Why the run summarised by ``s`` (:func:`summary`) cannot be placed on the map (None: it can): the
    axis not logged, logged only outside the early window, or too many missing values in it."""
    rows, missing, steps = s[f"{axis}_early_rows"], s[f"{axis}_early_missing"], s[f"{axis}_steps"]
    name = axis.upper() if axis == "kl" else axis
    if s[f"{axis}_column"] is None:
        return f"this run logs no {name} per token"
    if steps is None:
        return (f"its {name} column {s[f'{axis}_column']} holds no value at all (every one missing: empty, n/a, NaN "
                f"or null)")
    if rows == 0 or rows == missing:
        return (f"{axis.upper() if axis == 'kl' else axis} logged at steps {steps[0]}\u2013{steps[1]}; the window "
                f"starts at {delay} (steps {delay}\u2013{delay + EARLY_UPDATES - 1}): no value in it")
    present = rows - missing
    if present < MIN_EARLY_VALUES or present < MIN_EARLY_SHARE * rows:
        return (f"{missing} of the early window's {rows} {axis} values are missing (empty, n/a, NaN); at least "
                f"{MIN_EARLY_VALUES} and {MIN_EARLY_SHARE:.0%} of them are needed to place the run")
    return None


DRIFT_GRID, GROUP_SIZE_GRID = "drift", "group_size"
"""The grids whose files the command reads: the drift map (``map.json``, written by ``python -m studies.drift``)
and the group-size verdicts (``verdicts.json``, ``python -m studies.group_size``). Their folders follow the grids'
convention, ``llm/<grid name>`` under the results root (:func:`schema.results.llm_relpath`; neither predates it,
:data:`grids.folders.FOLDERS_BEFORE_THE_CONVENTION`): this floor lies below :mod:`grids`, and a test holds these
paths to :func:`grids.grid_folder`'s."""


def map_path() -> Path:
    from schema.results import llm_relpath, results_root

    return results_root() / llm_relpath(DRIFT_GRID) / "map.json"


def group_size_verdicts_path() -> Path:
    from schema.results import llm_relpath, results_root

    return results_root() / llm_relpath(GROUP_SIZE_GRID) / "verdicts.json"


def measured_range(table: dict) -> tuple[float, float] | None:
    """The smallest and largest drift any row of the map was measured at (None: no level)."""
    levels = [lv["drift"] for row in table.get("boundaries", []) for lv in row.get("levels", [])
              if lv.get("drift") is not None and math.isfinite(lv["drift"]) and lv["drift"] > 0]
    return (min(levels), max(levels)) if levels else None


def place(drift: float, axis: str = "kl", table: dict | None = None) -> list[dict]:
    """Per (estimator, optimiser) of the drift map, what it did at drift ``drift`` on ``axis``: the
    nearest measured level's stable share and whether ``drift`` lies below its fitted boundary. A drift
    outside the map's measured range (:func:`measured_range`) is a ValueError saying so: no correction
    was measured there, and the nearest level's share says nothing about it. So is a drift that no map holds
    (:func:`unplaceable`: 0, infinite, NaN or negative), with the reason."""
    why = unplaceable(drift)
    if why is not None:
        raise ValueError(why)
    if table is None:
        path = map_path()
        if not path.is_file():
            raise ValueError(f"no drift map at {path}: run the drift grid and `python -m studies.drift` first")
        from schema.results import read_json

        table = read_json(path)
    if table.get("axis") != axis:
        raise ValueError(f"the map's axis is {table.get('axis')!r}, not {axis!r}")
    span = measured_range(table)
    if span is not None:
        if drift > span[1]:
            raise ValueError(f"an early KL per token of {drift:.4g} is beyond the largest drift measured "
                             f"({span[1]:.4g}): no correction was measured there")
        if drift < span[0]:
            raise ValueError(f"an early KL per token of {drift:.4g} is below the smallest drift measured "
                             f"({span[0]:.4g}): no correction was measured there")
    out = []
    for row in table["boundaries"]:
        levels = [lv for lv in row["levels"] if lv["drift"] is not None and math.isfinite(lv["drift"])
                  and lv["drift"] > 0]
        if not levels:
            continue
        near = min(levels, key=lambda lv: abs(math.log(lv["drift"]) - math.log(drift)))
        b = row["boundary"]
        below = None if b is None else drift < b
        lo, hi = min(lv["drift"] for lv in levels), max(lv["drift"] for lv in levels)
        outside = ("beyond" if drift > hi else "below" if drift < lo else None)
        out.append({"estimator": row["estimator"], "optimizer": row["optimizer"], "nearest_drift": near["drift"],
                    "stable_share": near["stable_share"], "n": near["n"], "boundary": b,
                    "censored": row.get("censored"), "below_boundary": below, "outside": outside,
                    "measured_range": (lo, hi)})
    return out


def unplaceable(drift: float, axis: str = "kl") -> str | None:
    """Why an early drift has no place on any map (None: it may have one): 0 is no drift measured (the ratios
    compare a policy with itself: on-policy), +inf a KL that overflowed (a ratio beyond the float range), NaN no
    number, and a negative value no KL (the k3 estimate is >= 0)."""
    what = f"an early {axis.upper() if axis == 'kl' else axis} per token of {drift:.4g}"
    if math.isnan(drift):
        return f"{what}: not a number, so no place on the map"
    if drift == 0:
        return (f"{what}: no drift was measured (the policy equals the one that sampled: on-policy); the map holds "
                f"stale runs only, so no correction was measured there")
    if drift == math.inf:
        return (f"{what}: the KL overflowed (a log-ratio beyond the float range, not a measured drift), so no place "
                f"on the map and no correction is said to have held there")
    if drift < 0:
        return f"{what}: negative, so not a KL per token (its k3 estimate is >= 0): the column holds something else"
    return None


def map_group_size() -> int:
    """The group size of every run of the drift map: the study's setting (``llm_runs.reference.STUDY_BASE``), which
    the drift grids run under."""
    from .reference import STUDY_BASE

    return int(STUDY_BASE["group_size"])


def group_size_cells() -> list[dict]:
    """The group-size grid's cells at d = 64 (``results/llm/group_size/verdicts.json``, written by
    ``python -m studies.group_size``; none before it exists): per level, G and correction, the stable share."""
    from schema.results import read_json

    path = group_size_verdicts_path()
    if not path.is_file():
        return []
    return [c for c in read_json(path).get("cells", []) if c.get("B", 0) * c.get("G", 0) == 128]


def measured_group_sizes(G: int, cells: list[dict]) -> tuple[list[int], int, bool]:
    """(the group sizes measured: the drift map's and the group-size grid's ``cells``', the nearest to ``G``,
    whether ``G`` lies outside their range)."""
    measured = sorted({map_group_size()} | {int(c["G"]) for c in cells})
    near = min(measured, key=lambda g: (abs(math.log(g) - math.log(G)), g))
    return measured, near, not measured[0] <= G <= measured[-1]


def group_size_lines(G: int | None, cells: list[dict] | None = None) -> list[str]:
    """What the maps measured say about a run of group size ``G``: the drift map's G, the group sizes the
    group-size grid measured, the nearest one to ``G`` and its cells, and when ``G`` lies outside them."""
    cells = group_size_cells() if cells is None else cells
    map_G = map_group_size()
    if G is None:
        return [f"group size: unknown (give --group-size); the drift map was measured at G = {map_G}"]
    measured, near, outside = measured_group_sizes(G, cells)
    out = [f"group size: G = {G}; the drift map was measured at G = {map_G}"
           + (f", the group-size grid at G = {', '.join(map(str, measured))}" if cells else "")
           + f"; nearest measured G = {near}"]
    if outside:
        out.append(f"group size: G = {G} lies outside the measured range ({measured[0]}-{measured[-1]}): no run was "
                   f"made at it, and the map's boundaries may not transfer")
    for c in sorted((c for c in cells if int(c["G"]) == near), key=lambda c: (c["level"], c["estimator"])):
        out.append(f"  G = {near} {c['level']:16s} {c['estimator']:10s} stable {c['stable_share']:.0%} of {c['n']}, "
                   f"early KL {c['kl_early_pre_collapse']:.4g}")
    return out


def axis_note(s: dict, axis: str) -> str:
    """The column an axis was read from and what of it was missing (:func:`summary`'s counts), for the printout."""
    col = s[f"{axis}_column"]
    if col is None:
        return "(not logged)"
    notes = [f"{s[f'{axis}_{part}_missing']} of {s[f'{axis}_{part}_rows']} {part} values missing"
             for part in ("early", "all") if s[f"{axis}_{part}_missing"]]
    notes += [f"{c} present, every value missing" for c in s[f"{axis}_empty_columns"] if c != col]
    return col + "".join(f"; {n}" for n in notes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.drift", description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="a run folder, a verl .jsonl export or a TRL trainer_state.json")
    p.add_argument("--stack", default="toolkit", choices=sorted(COLUMNS))
    p.add_argument("--delay", type=int, default=None, help="the run's delay d (read from a toolkit run's config)")
    p.add_argument("--group-size", type=int, default=None,
                   help="the run's group size G (read from a toolkit run's config)")
    args = p.parse_args(argv)
    if args.group_size is not None and args.group_size < 2:
        print(f"error: --group-size must be an integer >= 2, got {args.group_size}", file=sys.stderr)
        return 2
    try:
        m, delay = read_export(args.path, args.stack)
        delay = args.delay if args.delay is not None else delay
        if delay is None:
            raise ValueError("give --delay: the export does not record the run's delay")
        s = summary(m, delay, args.stack)
        G = args.group_size if args.group_size is not None else run_group_size(args.path)
        cells = group_size_cells()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TypeError, KeyError, AttributeError, IndexError, OSError) as exc:  # a file of another shape
        print(f"error: {args.path}: not a metrics export this reader knows ({type(exc).__name__}: "
              f"{str(exc).splitlines()[0][:120] if str(exc) else ''})", file=sys.stderr)
        return 2
    for line in group_size_lines(G, cells):
        print(line)
    if args.stack == "trl":
        print(f"TRL: steps_per_generation = {delay + 1} cycles the delay through 0..{delay}; read at the "
              f"{s['fixed_delay_updates']} updates {delay} steps stale (the map's fixed delay d = {delay})")
    for axis in AXES:
        print(f"{axis:17s} early {s[axis + '_early']:.4g}  all {s[axis + '_all']:.4g}   [{axis_note(s, axis)}]")
    from .warning import warning_line

    step = next(c for c in STEP_COLUMNS if c in m)  # summary() found one
    print(warning_line(m, args.stack, pd.to_numeric(m[step], errors="coerce") - FIRST_STEP.get(args.stack, 0)))
    kl = s["kl_early"]
    why = placement_problem(s, delay)
    if why is not None:
        print(f"map: {why}; its place on the map (whose axis is the early KL) is unknown")
        return 0
    if G is not None and (found := measured_group_sizes(G, cells))[2]:
        measured, near = found[0], found[1]
        print(f"map: not placed: G = {G} lies outside the group sizes measured ({measured[0]}-{measured[-1]}; "
              f"nearest measured G = {near}): no correction is said to have held at it")
        return 0
    try:
        rows = place(kl)
    except ValueError as exc:
        print(f"map: {exc}")
        return 0
    if not rows:
        print(f"map: an early KL per token of {kl:.4g} cannot be placed (the map holds no level to compare)")
        return 0
    held = sorted({f"{r['estimator']} ({r['optimizer']})" for r in rows
                   if r["outside"] is None and r["stable_share"] >= 0.8})
    print(f"map: at early KL per token {kl:.4g}, the drift study's nearest levels held (stable share >= 0.8) for: "
          f"{', '.join(held) or 'none'}")
    for side, edge, at in (("beyond", "largest", 1), ("below", "smallest", 0)):
        out = [r for r in rows if r["outside"] == side]
        if out:
            far = (max if at else min)(r["measured_range"][at] for r in out)
            print(f"map: for {len(out)} of {len(rows)} corrections {kl:.4g} is {side} the {edge} drift measured "
                  f"({far:.4g}): no correction was measured there")
    for r in rows:
        if r["outside"] is not None:
            edge = "largest" if r["outside"] == "beyond" else "smallest"
            print(f"  {r['estimator']:10s} {r['optimizer']:9s} {r['outside']} the {edge} drift measured for it "
                  f"({r['measured_range'][1 if edge == 'largest' else 0]:.4g}): not measured there")
            continue
        print(f"  {r['estimator']:10s} {r['optimizer']:9s} nearest level KL {r['nearest_drift']:.4g}: stable "
              f"{r['stable_share']:.0%} of {r['n']}; boundary "
              f"{r['boundary'] if r['boundary'] is None else round(r['boundary'], 4)}"
              f"{' (' + r['censored'] + ')' if r.get('censored') else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
