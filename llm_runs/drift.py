"""A run's drift: how far its policy moved from the behaviour policy that sampled its rollouts, and
its place on a drift map. The command that reads a run and places it on the drift grid's map is
``python -m grids.drift_place RUN`` (:mod:`grids.drift_place`: which grids' files it reads is the grids' floor's
to know); ``python -m llm_runs.drift`` runs it for one release and says so.

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
its ``log_history`` carries the toolkit's names. A map (per estimator and optimiser, the stable share at each
measured drift and the fitted failure boundary: a ``map.json``) is given to :func:`place`; this library reads
none of its own.
"""
from __future__ import annotations

import math
import numbers
import sys

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
FIRST_STEP = {"trl": 1, "verl": 1}
"""The step number a stack gives its first update: TRL's ``log_history`` counts from 1, and so does verl
(``RayPPOTrainer.fit`` sets ``global_steps = 0``, logs the validation before training at step 0, then adds 1 before
the first update and logs each update's metrics at ``global_steps``: verl 0.9.1, ``verl/trainer/ppo/ray_trainer.py``);
this toolkit's runs count from 0."""
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
        return (f"{axis.upper() if axis == 'kl' else axis} logged at updates {steps[0]}\u2013{steps[1]} (counted from "
                f"0); the early window is updates {delay}\u2013{delay + EARLY_UPDATES - 1}: no value in it")
    present = rows - missing
    if present < MIN_EARLY_VALUES or present < MIN_EARLY_SHARE * rows:
        return (f"{missing} of the early window's {rows} {axis} values are missing (empty, n/a, NaN); at least "
                f"{MIN_EARLY_VALUES} and {MIN_EARLY_SHARE:.0%} of them are needed to place the run")
    return None


def measured_range(table: dict) -> tuple[float, float] | None:
    """The smallest and largest drift any row of the map was measured at (None: no level)."""
    levels = [lv["drift"] for row in table.get("boundaries", []) for lv in row.get("levels", [])
              if lv.get("drift") is not None and math.isfinite(lv["drift"]) and lv["drift"] > 0]
    return (min(levels), max(levels)) if levels else None


def place(drift: float, axis: str, table: dict) -> list[dict]:
    """Per (estimator, optimiser) of the drift map ``table`` (a ``map.json``; the drift grid's is read by
    :func:`grids.drift_place.read_map`), what it did at drift ``drift`` on ``axis``: the
    nearest measured level's stable share and whether ``drift`` lies below its fitted boundary. A drift
    outside the map's measured range (:func:`measured_range`) is a ValueError saying so: no correction
    was measured there, and the nearest level's share says nothing about it. So is a drift that no map holds
    (:func:`unplaceable`: 0, infinite, NaN or negative), with the reason."""
    why = unplaceable(drift)
    if why is not None:
        raise ValueError(why)
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


def axis_note(s: dict, axis: str) -> str:
    """The column an axis was read from and what of it was missing (:func:`summary`'s counts), for the printout."""
    col = s[f"{axis}_column"]
    if col is None:
        return "(not logged)"
    notes = [f"{s[f'{axis}_{part}_missing']} of {s[f'{axis}_{part}_rows']} {part} values missing"
             for part in ("early", "all") if s[f"{axis}_{part}_missing"]]
    notes += [f"{c} present, every value missing" for c in s[f"{axis}_empty_columns"] if c != col]
    return col + "".join(f"; {n}" for n in notes)


if __name__ == "__main__":
    # Kept for one release: the command is `python -m grids.drift_place` (a run's place on the drift map needs the
    # grids' files, which this library does not know). The alias runs that command and says so.
    import runpy

    print("note: `python -m llm_runs.drift` is now `python -m grids.drift_place`; this alias goes in the next release",
          file=sys.stderr)
    runpy.run_module("grids.drift_place", run_name="__main__", alter_sys=True)
