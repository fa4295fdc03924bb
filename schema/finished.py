"""Whether a finished run is whole: what a run folder with a ``summary.json`` must hold before anything counts
it complete (the grid runner's skip, packing a run or a grid). A finished run whose metrics table was cut short
would otherwise be skipped as complete and its missing updates lost without a word."""
from __future__ import annotations

from pathlib import Path

from .runs import METRICS_FILE, metrics_path, read_run, read_run_summary
from .sources import MissingResults


def finished_run_problem(run: Path) -> str | None:
    """Why the run folder ``run``, finished by its ``summary.json``, is not whole (None: it is). Whole: its
    ``summary.json`` and ``config.json`` read, both name the same horizon T (the summary's ``steps``, the config's
    ``steps``), and its metrics table (plain or packed) reads whole (:func:`schema.results.read_run`: every row
    with the header's fields and numbers, steps once each), holds every step 0..T (the updates and the final
    evaluation) and, plain, ends with its last row's newline (a file cut inside the last value still parses)."""
    run = Path(run)
    try:
        summary = read_run_summary(run)
        settings, m = read_run(run)
    except (ValueError, MissingResults) as exc:
        return str(exc)
    T = settings["steps"]
    if not isinstance(summary, dict):
        return f"{run}/summary.json holds no summary object"
    if summary.get("steps") != T:
        return f"{run}/summary.json says {summary.get('steps')!r} updates, its config.json {T!r}"
    path = metrics_path(run)
    last = int(m["step"].max()) if len(m) else None
    if last != T:
        held = f"steps 0..{last}" if last is not None else "no row"
        return f"{path} holds {held}, not 0..{T}: the rows after {last} are lost (the run's summary says it finished)"
    if path.name == METRICS_FILE and path.is_file():
        with path.open("rb") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                return f"{path}: its last row has no newline (cut short inside a value)"
    return None
