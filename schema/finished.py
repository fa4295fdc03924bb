"""Whether a finished run is whole: what a run folder with a ``summary.json`` must hold before anything counts
it complete (the grid runner's skip, packing a run or a grid). A finished run whose metrics table was cut short
would otherwise be skipped as complete and its missing updates lost without a word."""
from __future__ import annotations

from pathlib import Path

from .runs import METRICS_FILE, PACKED_METRICS_FILE, metrics_path, read_run, read_run_summary
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


def pack_metrics(run: Path) -> Path:
    """Replace a finished run's ``metrics.csv`` by ``metrics.csv.gz`` holding the same bytes
    (deterministic: no name or time in the gzip header, so packing twice gives one file).

    Only a finished run (its ``summary.json`` written) is packed, and the packed file is
    decompressed and compared with the original before the original is removed. A run that is
    already packed is left as it is. Returns the packed file."""
    import gzip

    from .io import write_bytes

    run = Path(run)
    path = metrics_path(run)
    if path is None:
        raise MissingResults(f"{run}: no {METRICS_FILE} to pack")
    if path.name == PACKED_METRICS_FILE:
        return path
    if not (run / "summary.json").is_file():
        raise ValueError(f"{run}: not finished (no summary.json): only a finished run's {METRICS_FILE} is packed")
    why = finished_run_problem(run)  # a corrupt or cut-short table is refused, not packed
    if why is not None:
        raise ValueError(f"{run}: finished but not whole, not packed: {why}")
    data = path.read_bytes()
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if gzip.decompress(packed) != data:  # pragma: no cover (zlib round trip)
        raise ValueError(f"{path}: the packed bytes do not decompress to the original")
    out = write_bytes(run / PACKED_METRICS_FILE, packed)
    path.unlink()
    return out
