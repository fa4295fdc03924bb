"""Packing a grid of finished run folders into its three tables, and unpacking a run back into a folder
(the layout and the readers are :mod:`schema.packed`).

    python -m schema.packing results/llm/FOLDER
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .packed import (
    PACKED_LOGS,
    PACKED_METRICS,
    PACKED_RUNS,
    RUN_FILES,
    PackedGrid,
    _split_csv,
    csv_text,
    forget,
    packed_grid,
    read_logs,
)


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

    from .finished import finished_run_problem
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
        elif (why := finished_run_problem(run)) is not None:
            problems.append(f"{run.name} is finished but not whole ({why})")
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
                or not _same_json(e["config"], entries[n]["config"]) \
                or not _same_json(e["summary"], entries[n]["summary"]):
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
    forget(root)
    log(f"{root}: packed {len(folders)} run(s) ({len(names)} in all) and {len(log_files)} log(s)")
    return len(folders)


def main(argv: list[str] | None = None) -> int:
    """``python -m schema.packing FOLDER [FOLDER ...]``: pack each finished grid folder (:func:`pack_grid`);
    a grid of :mod:`grids.spec` is packed with ``python -m studies.run --grid G --pack-grid``,
    which also checks that every cell finished."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m schema.packing", description=main.__doc__.split("\n")[0])
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
