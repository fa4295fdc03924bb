"""A finished LLM grid packed: a few tables in the grid folder instead of a folder per run.

Layout of a packed grid ``results/llm/<grid>/``::

    runs.jsonl.gz        one JSON line per run: {"run": name, "config": its config.json (the whole
                         document), "summary": its summary.json, "columns": its metrics header}
    metrics.parquet      every run's per-update metrics, one row per (run, update): a ``run`` column
                         and every metrics column, each value the exact text of the run's metrics.csv
                         (null where the run has no such column); over 4 MB it is row-range parts
                         metrics.part00.parquet, ... (:func:`schema.io.write_parquet_parts`)
    logs.jsonl.gz        one JSON line per log file of logs/: {"name": file name, "text": its text}

beside the grid's own files (``sweep.json``, ``summary.csv``, verdicts). A packed run reads exactly as
its folder did: :func:`schema.results.read_run` (``root / name``) gives the same settings and the
same table, :func:`schema.results.metrics_text` the same bytes of ``metrics.csv``; a run folder and a
packed run may sit side by side (a folder's own files are read first). :func:`schema.packing.pack_grid` packs the
finished runs of a folder and removes their files only after reading the packed tables back and
finding every run's config, summary, metrics text and log identical.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

PACKED_RUNS = "runs.jsonl.gz"
PACKED_METRICS = "metrics.parquet"
PACKED_LOGS = "logs.jsonl.gz"
RUN_FILES = ("config.json", "summary.json", "metrics.csv", "metrics.csv.gz")
"""The files a finished run folder holds; a folder holding anything else is not packed."""


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return path.name, st.st_mtime_ns, st.st_size


def _metrics_files(root: Path) -> list[Path]:
    from .io import parquet_parts

    return parquet_parts(Path(root) / PACKED_METRICS)


def csv_text(columns: list[str], rows: list[list[str]]) -> str:
    """A metrics table's text as ``llm_runs.metrics.MetricsWriter`` writes it: the header joined by
    commas, then one ``csv`` row per update, each line ending in ``\\n``."""
    buf = io.StringIO()
    buf.write(",".join(columns) + "\n")
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def _split_csv(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    return (rows[0] if rows else []), rows[1:]


class PackedGrid:
    """The packed tables of one grid folder, read once (the metrics table on first use)."""

    def __init__(self, root: Path):
        from .io import loads_json

        self.root = Path(root)
        self.stamp = self.signature(self.root)
        self.entries: dict[str, dict] = {}
        with gzip.open(self.root / PACKED_RUNS, "rb") as fh:
            for i, line in enumerate(fh.read().decode("utf-8").split("\n"), start=1):
                if not line.strip():
                    continue
                try:
                    e = loads_json(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{self.root / PACKED_RUNS}, line {i}: not valid JSON ({exc.msg})") from None
                if e["run"] in self.entries:
                    raise ValueError(f"{self.root / PACKED_RUNS}: run {e['run']} appears twice")
                self.entries[e["run"]] = e
        self._rows: dict[str, list[list[str]]] | None = None

    @staticmethod
    def signature(root: Path) -> tuple:
        return tuple(_stamp(p) for p in [Path(root) / PACKED_RUNS, *_metrics_files(root)])

    def rows(self, name: str) -> list[list[str]]:
        """The run's metrics rows as text fields, in its own column order."""
        if self._rows is None:
            from .io import read_parquet_parts

            files = _metrics_files(self.root)
            table = read_parquet_parts(self.root / PACKED_METRICS) if files else None
            rows: dict[str, list[list[str]]] = {n: [] for n in self.entries}
            if table is not None and len(table):
                runs = table["run"].tolist()
                cols = {c: table[c].tolist() for c in table.columns if c != "run"}
                for n in dict.fromkeys(runs):
                    if n not in self.entries:
                        raise ValueError(f"{self.root}: the packed metrics hold run {n}, which {PACKED_RUNS} lacks")
                for i, n in enumerate(runs):
                    rows[n].append([cols[c][i] for c in self.entries[n]["columns"]])
            self._rows = rows
        return self._rows[name]

    def metrics_text(self, name: str) -> str:
        e = self.entries[name]
        rows = self.rows(name)
        bad = [r for r in rows if not all(isinstance(v, str) for v in r)]
        if bad:
            raise ValueError(f"{self.root}: packed run {name} lacks a value of one of its columns in {len(bad)} row(s)")
        return csv_text(e["columns"], rows)


_PACKS: dict[str, PackedGrid] = {}


def packed_grid(root) -> PackedGrid | None:
    """The packed tables of the grid folder ``root`` (None: it holds none); read again when they change."""
    root = Path(root)
    if not (root / PACKED_RUNS).is_file():
        return None
    key = str(root.resolve())
    hit = _PACKS.get(key)
    if hit is None or hit.stamp != PackedGrid.signature(root):
        hit = _PACKS[key] = PackedGrid(root)
    return hit


def packed_entry(run) -> dict | None:
    """The packed record of run ``root/name`` (None: ``root`` packs no such run)."""
    run = Path(run)
    pack = packed_grid(run.parent)
    return None if pack is None else pack.entries.get(run.name)


def packed_names(root) -> list[str]:
    pack = packed_grid(root)
    return sorted(pack.entries) if pack is not None else []


def read_logs(root) -> dict[str, str]:
    """``{file name: text}`` of the grid's packed logs (empty: none packed)."""
    path = Path(root) / PACKED_LOGS
    if not path.is_file():
        return {}
    with gzip.open(path, "rb") as fh:
        lines = fh.read().decode("utf-8").split("\n")
    return {(d := json.loads(line))["name"]: d["text"] for line in lines if line.strip()}


def read_log(root, name: str) -> str | None:
    """The text of log ``name`` (``<run>.log``) of the grid ``root``: ``logs/<name>`` or the packed one."""
    path = Path(root) / "logs" / name
    if path.is_file():
        return path.read_bytes().decode("utf-8")
    return read_logs(root).get(name)


def forget(root) -> None:
    """Drop the cached tables of the grid at ``root`` (after it was packed or repacked)."""
    _PACKS.pop(str(Path(root).resolve()), None)
