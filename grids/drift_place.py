"""Where a run sits on the drift map: its drift, its place on the drift grid's map and its group size beside the
group sizes the drift and group-size grids measured.

    python -m grids.drift_place RUN_DIR                      # a run of this toolkit
    python -m grids.drift_place metrics.jsonl --stack verl   # a verl metrics export (file logger)
    python -m grids.drift_place trainer_state.json --stack trl --delay 4   # steps_per_generation = 5

The reading of a run (:func:`llm_runs.drift.summary`: the axes, the early window, the columns each stack logs, why
a run cannot be placed) is the training library's, :mod:`llm_runs.drift`; what is grid-specific is here: which
grids' files the command reads (the map, ``map.json`` in the drift grid's folder, written by the drift study's
analysis, ``python -m studies.drift``; the group-size grid's ``verdicts.json``, ``python -m studies.group_size``)
and the group size the map was measured at. ``python -m llm_runs.drift`` runs this command for one release and
says so.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from llm_runs.drift import (
    AXES,
    COLUMNS,
    FIRST_STEP,
    STEP_COLUMNS,
    axis_note,
    place,
    placement_problem,
    read_export,
    run_group_size,
    summary,
    unplaceable,
)

from .folders import grid_folder

DRIFT_GRID, GROUP_SIZE_GRID = "drift", "group_size"
"""The grids whose files the command reads: the drift map (``map.json``, written by ``python -m studies.drift``)
and the group-size verdicts (``verdicts.json``, ``python -m studies.group_size``), each in its grid's folder
(:func:`grids.grid_folder`)."""


def map_path() -> Path:
    return grid_folder(DRIFT_GRID) / "map.json"


def group_size_verdicts_path() -> Path:
    return grid_folder(GROUP_SIZE_GRID) / "verdicts.json"


def read_map() -> dict:
    """The drift grid's map (:func:`map_path`); a ValueError saying how to make it when there is none."""
    from schema.results import read_json

    path = map_path()
    if not path.is_file():
        raise ValueError(f"no drift map at {path}: run the drift grid and `python -m studies.drift` first")
    return read_json(path)


def map_group_size() -> int:
    """The group size of every run of the drift map: the study's setting (``llm_runs.reference.STUDY_BASE``), which
    the drift grids run under."""
    from llm_runs.reference import STUDY_BASE

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grids.drift_place", description=__doc__.split("\n\n")[0])
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
    from llm_runs.warning import warning_line

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
        why = unplaceable(kl)  # before any map is read: a drift no map holds is said so whether or not one exists
        if why is not None:
            raise ValueError(why)
        rows = place(kl, "kl", read_map())
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
