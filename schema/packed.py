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
packed run may sit side by side (a folder's own files are read first). :func:`pack_grid` packs the
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


def unpack_run(run, dest) -> Path:
    """Write the run ``run`` (a run folder or a run of a packed grid) as a run folder ``dest``: its
    ``config.json`` and ``summary.json`` (the same documents, as strict JSON) and ``metrics.csv`` (the
    exact text of its table). For a tool that needs a folder; the readers need none."""
    from .io import write_json, write_text
    from .runs import metrics_path, metrics_text, read_run_doc, read_run_summary

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    write_json(dest / "config.json", read_run_doc(run))
    summary = read_run_summary(run)
    if summary is not None:
        write_json(dest / "summary.json", summary)
    path = metrics_path(run)
    if path is not None:
        write_text(dest / "metrics.csv", metrics_text(path))
    return dest


def _gzip_lines(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), compresslevel=9, mtime=0)


def _same_json(a, b) -> bool:
    from .io import dumps_json

    return dumps_json(a, indent=None) == dumps_json(b, indent=None)


def pack_grid(root, log=print) -> int:
    """Pack every finished run folder under the grid folder ``root`` into its tables (see the module
    docstring), merged with the runs it already packs, and its ``logs/`` into ``logs.jsonl.gz``.

    Refused (``ValueError``, nothing changed) when a run folder is not finished (no
    ``summary.json``), holds files other than :data:`RUN_FILES`, is held by a live process, has a
    metrics table whose text does not come back byte for byte from its fields, or is already packed.
    The per-run files are removed only after the packed tables, read back from disk, give every
    run's config, summary and metrics text and every log exactly. Returns the number of runs packed."""
    import pandas as pd

    from .io import dumps_json, loads_json, write_bytes, write_parquet_parts
    from .runlock import check_free
    from .runs import metrics_path, metrics_text

    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no such grid folder")
    folders = [p for p in sorted(root.iterdir()) if p.is_dir() and (p / "config.json").is_file()]
    old = packed_grid(root)
    entries = {n: dict(e) for n, e in (old.entries.items() if old else [])}
    texts = {n: old.metrics_text(n) for n in entries} if old else {}
    problems = []
    for run in folders:
        check_free(run)
        extra = sorted(p.name for p in run.iterdir() if p.name not in RUN_FILES)
        if extra:
            problems.append(f"{run.name} holds {', '.join(extra[:4])} (only {', '.join(RUN_FILES)} are packed)")
        elif not (run / "summary.json").is_file():
            problems.append(f"{run.name} is not finished (no summary.json)")
        elif metrics_path(run) is None:
            problems.append(f"{run.name} has no metrics table")
        elif run.name in entries:
            problems.append(f"{run.name} is packed already and is a folder too")
    if problems:
        raise ValueError(f"{root}: not packed: " + "; ".join(problems[:6])
                         + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""))
    for run in folders:
        text = metrics_text(metrics_path(run))
        columns, rows = _split_csv(text)
        if csv_text(columns, rows) != text:
            raise ValueError(f"{metrics_path(run)}: its text does not come back byte for byte from its fields; "
                             f"not packed")
        entries[run.name] = {"run": run.name, "config": loads_json((run / "config.json").read_text()),
                             "summary": loads_json((run / "summary.json").read_text()), "columns": columns}
        texts[run.name] = text
    if not folders:
        log(f"{root}: no run folder to pack")
        return 0
    logs_dir = root / "logs"
    log_files = sorted(p for p in logs_dir.iterdir() if p.is_file()) if logs_dir.is_dir() else []
    logs = {**read_logs(root), **{p.name: p.read_bytes().decode("utf-8") for p in log_files}}

    names = sorted(entries)
    union = list(dict.fromkeys(c for n in names for c in entries[n]["columns"]))
    records = []
    for n in names:
        cols, (_, rows) = entries[n]["columns"], _split_csv(texts[n])
        for r in rows:
            rec = dict.fromkeys(union)
            rec.update(zip(cols, r))
            records.append({"run": n, **rec})
    table = pd.DataFrame(records, columns=["run", *union], dtype=object)
    run_lines = [dumps_json({"run": n, "config": entries[n]["config"], "summary": entries[n]["summary"],
                             "columns": entries[n]["columns"]}, indent=None) for n in names]
    log_lines = [json.dumps({"name": k, "text": v}, ensure_ascii=False) for k, v in sorted(logs.items())]

    import pyarrow as pa

    write_parquet_parts(root / PACKED_METRICS, table, compression="zstd",
                        schema=pa.schema([(c, pa.string()) for c in table.columns]))
    if logs:
        write_bytes(root / PACKED_LOGS, _gzip_lines(log_lines))
    write_bytes(root / PACKED_RUNS, _gzip_lines(run_lines))  # last: a reader sees the pack once it is whole

    back = PackedGrid(root)  # from disk, not from the cache
    for n in names:
        e = back.entries.get(n)
        if e is None or back.metrics_text(n) != texts[n] or e["columns"] != entries[n]["columns"] \
                or not _same_json(e["config"], entries[n]["config"]) or not _same_json(e["summary"], entries[n]["summary"]):
            raise ValueError(f"{root}: packed run {n} does not read back the same; no run folder was removed")
    if read_logs(root) != logs:
        raise ValueError(f"{root}: the packed logs do not read back the same; no log was removed")
    for run in folders:  # the originals, once more against what they were when packed
        if metrics_text(metrics_path(run)) != texts[run.name] \
                or not _same_json(loads_json((run / "config.json").read_text()), entries[run.name]["config"]):
            raise ValueError(f"{run} changed while it was packed; no run folder was removed")
    for run in folders:
        for name in RUN_FILES:
            if (run / name).exists():
                (run / name).unlink()
        run.rmdir()
    for p in log_files:
        p.unlink()
    if logs_dir.is_dir() and not any(logs_dir.iterdir()):
        logs_dir.rmdir()
    _PACKS.pop(str(root.resolve()), None)
    log(f"{root}: packed {len(folders)} run(s) ({len(names)} in all) and {len(log_files)} log(s)")
    return len(folders)


def main(argv: list[str] | None = None) -> int:
    """``python -m schema.packed FOLDER [FOLDER ...]``: pack each finished grid folder (:func:`pack_grid`);
    a grid of :mod:`llm_runs.grids` is packed with ``python -m llm_runs.study --grid G --pack-grid``,
    which also checks that every cell finished."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m schema.packed", description=main.__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path)
    args = p.parse_args(argv)
    for folder in args.folders:
        try:
            pack_grid(folder)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
