"""Reading a run's per-update metrics for :mod:`llm_runs.drift`: a run folder of this toolkit, a verl file-logger
export, a TRL ``trainer_state.json`` or a CSV, and the settings a toolkit run records (its delay, its group size),
each checked before a number is read from it.

A metric value is a number or missing. Missing (:data:`MISSING`): an empty value, ``n/a``, ``NaN``, ``null``
(JSON), ``None``; each is counted and reported by the reader, never read as a number. Anything else that is not a
number (a boolean, ``"abc"``, ``"0.5x"``, a list) is a ``ValueError`` naming the column, the step and the value.
A step is an integer; a run's delay an integer >= 0 and its group size an integer >= 2 (a boolean or a fraction
is refused by name, never truncated: a delay of 2.7 read as 2 would move the window the reader reads).
"""
from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

import numpy as np
import pandas as pd

MISSING = ("", "n/a", "na", "nan", "null", "none")
"""A metric value spelled so (case and surrounding spaces aside) is missing, as are ``None`` and a float NaN."""
STEP_COLUMNS = ("step", "training/global_step", "global_step")


def _number(value) -> float | None:
    """``value`` as a float; NaN when it is missing; None when it is neither a number nor missing."""
    if value is None:
        return math.nan
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in MISSING:
            return math.nan
        try:
            return float(text)
        except ValueError:
            return None
    return None


def metric_values(m: pd.DataFrame, column: str, step: str | None = None) -> pd.Series:
    """The column ``column`` of ``m`` as floats, NaN where a value is missing (:data:`MISSING`); a value that is
    neither is a ValueError naming the column, the step (or row) and the value."""
    col = m[column]
    if pd.api.types.is_float_dtype(col.dtype) or (pd.api.types.is_integer_dtype(col.dtype)
                                                  and not pd.api.types.is_bool_dtype(col.dtype)):
        return col.astype(float)
    out = []
    for i, v in enumerate(col.tolist()):
        x = _number(v)
        if x is None:
            where = f"step {m[step].iloc[i]!r}" if step is not None else f"row {i + 1}"
            raise ValueError(f"{column} at {where}: {v!r} is not a number (a missing value is empty, n/a, NaN or "
                             f"null)")
        out.append(x)
    return pd.Series(out, index=m.index, dtype=float)


def step_column(m: pd.DataFrame) -> str:
    """The metrics' step column (one of :data:`STEP_COLUMNS`), every value of it an integer: a step that is missing,
    a fraction, a boolean or text is a ValueError naming the row and the value."""
    step = next((c for c in STEP_COLUMNS if c in m), None)
    if step is None:
        raise ValueError(f"the metrics have no step column (one of {', '.join(STEP_COLUMNS)})")
    for i, v in enumerate(m[step].tolist()):
        x = _number(v)
        if x is None or not math.isfinite(x) or not float(x).is_integer():
            raise ValueError(f"the step column {step!r} at row {i + 1} holds {v!r}: a step is an integer")
    return step


def integer_setting(value, name: str, where: str, least: int) -> int:
    """A run's setting ``name`` (its delay, its group size) as an int >= ``least``: a boolean, a fraction, text or a
    smaller value is a ValueError naming ``where`` (the run) and the value, never truncated."""
    ok = (not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real)
          and math.isfinite(float(value)) and float(value).is_integer() and value >= least)
    if not ok:
        raise ValueError(f"{where}: {name} = {value!r} is not an integer >= {least}")
    return int(value)


def read_export(path: str | Path, stack: str = "toolkit") -> tuple[pd.DataFrame, int | None]:
    """The per-update metrics at ``path`` and the run's delay where the file records it: a run folder
    of this toolkit (or a run of a packed grid, :mod:`schema.packed`; its rows of updates 0..T-1, not the final
    evaluation's row T); a verl file-logger export (JSON
    lines ``{"step": n, "data": {...}}`` or flat dicts); a TRL ``trainer_state.json`` (its
    ``log_history``); or a CSV with a step column."""
    from schema.results import is_packed_run

    p = Path(path)
    packed = not p.exists() and is_packed_run(p)
    if not p.exists() and not packed:
        raise ValueError(f"{p}: no such file or folder")
    if p.is_dir() or packed:
        from schema.results import read_run, read_run_config

        try:
            _, m = read_run(p)
            cfg = read_run_config(p)
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{p}: not a run folder this reader can read (a run holds config.json and its "
                             f"metrics; {type(exc).__name__}: {str(exc)[:120]})") from None
        if "delay" not in cfg:
            raise ValueError(f"{p}: its config.json records no delay")
        delay = integer_setting(cfg["delay"], "delay", f"{p}/config.json", 0)
        steps = cfg.get("steps")
        if isinstance(steps, int) and not isinstance(steps, bool):  # the evaluation after the last update: no update
            m = m[m["step"] < steps].reset_index(drop=True)
        return m, delay
    if p.suffix == ".csv":
        try:
            return pd.read_csv(p, keep_default_na=False, dtype=str), None  # every value checked as it is read
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise ValueError(f"{p}: not a readable CSV ({str(exc).splitlines()[0][:120]})") from None
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not text (a binary file?)") from None
    if p.suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{p}: line {n} is not JSON ({exc})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{p}: line {n} is a JSON {type(rec).__name__}, not an object of metrics "
                                 f"({line.strip()[:60]})")
            if isinstance(rec.get("data"), dict):
                if "step" not in rec:
                    raise ValueError(f"{p}: line {n} has metrics under 'data' but no 'step'")
                rec = {"step": rec["step"], **rec["data"]}
            rows.append(rec)
        if not rows:
            raise ValueError(f"{p}: no metrics (the file holds no JSON lines)")
        return pd.DataFrame(rows, dtype=object), None
    try:
        j = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{p}: not JSON ({exc})") from None
    if isinstance(j, dict) and isinstance(j.get("log_history"), list):
        return pd.DataFrame([r for r in j["log_history"] if "step" in r], dtype=object), None
    raise ValueError(f"{p}: not a run folder, a .jsonl/.csv export or a TRL trainer_state.json")


def run_group_size(path: str | Path) -> int | None:
    """A toolkit run's group size from its stored config (None for an export that does not record it); a value
    that is not an integer >= 2 (0, ``'abc'``, a fraction, a boolean) is a ValueError naming the run."""
    from schema.results import is_packed_run, read_run_config

    p = Path(path)
    if not (p.is_dir() or (not p.exists() and is_packed_run(p))):
        return None
    G = read_run_config(p).get("group_size")
    return None if G is None else integer_setting(G, "group_size", f"{p}/config.json", 2)
