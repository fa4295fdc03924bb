"""The committed files the README's findings and the narrative's numbers are read from (:data:`SOURCES`: the
claims table, the studies' verdict files and their grids' ``summary.csv``), and the counting of a grid's
summary rows they share (:mod:`studies.report.findings`, :mod:`studies.report.narrative`)."""
from __future__ import annotations

import csv
from pathlib import Path

from schema.io import loads_json
from studies.grids import GRIDS

RESULTS = Path(__file__).resolve().parents[2] / "results"
"""The committed results: the README and the narrative describe these, whatever ``GMC_RESULTS`` says."""
SOURCES = {
    "claims": (None, "verify/claims.json"),
    "study": ("primary", "verdicts.json"),
    "study_runs": ("primary", "summary.csv"),
    "peers_2025_runs": ("peers_2025", "summary.csv"),
    "mechanism": ("mechanism", "verdicts.json"),
    "drift": ("drift", "verdicts.json"),
    "replicate": ("replicate_avx2", "comparison.json"),
    "group_size": ("group_size", "verdicts.json"),
}
"""Each source: (grid of :data:`studies.grids.GRIDS`, whose folder the grid table names; file in it),
or (None, path under the results root)."""


def source_path(key: str, root: Path = RESULTS) -> Path:
    grid, name = SOURCES[key]
    return root / name if grid is None else GRIDS[grid].default_out(root) / name


def load(root: Path = RESULTS) -> dict:
    """Every source of the bullets, read from ``root`` (JSON through :func:`schema.io.loads_json`; a
    ``summary.csv`` row's older setting names as today's, :func:`schema.runs.renamed`)."""
    from schema.runs import renamed

    out = {}
    for key in SOURCES:
        path = source_path(key, root)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: a source of the README's findings is missing")
        if path.suffix == ".csv":
            with path.open() as fh:
                out[key] = [renamed(row) for row in csv.DictReader(fh)]
        else:
            try:
                out[key] = loads_json(path.read_text())
            except (ValueError, UnicodeDecodeError) as exc:  # a torn or foreign file, named
                raise ValueError(f"{path}: a source of the README's findings is not readable JSON ({exc})") from None
    return out


def cell_rows(rows: list[dict], horizon: str, delay: int, estimator: str | None = None) -> list[dict]:
    """The rows of a grid's ``summary.csv`` in one cell (horizon, delay; one estimator's, if named)."""
    return [r for r in rows if r["horizon"] == horizon and int(r["delay"]) == delay
            and (estimator is None or r["estimator"] == estimator)]


def stable_count(rows: list[dict]) -> tuple[int, int]:
    """(stable runs, runs) of summary rows."""
    return sum(r["stable"] == "True" for r in rows), len(rows)
