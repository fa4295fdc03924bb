"""Replay the first updates of a finished run and compare its metrics byte for byte.

    python -m llm_runs.replay results/llm/study/long-gmc-d16-s0 --steps 21 [--cache-dir results/cache]

The run's stored settings (``config.json``) are run again for ``--steps`` updates in a temporary
folder, and every row of step < ``--steps`` of the new ``metrics.csv`` is compared with the
stored one (plain or packed) as text, column by column, except the ``perf/`` columns (wall-clock times). Equal
text means equal floats (the writer prints ``repr``): the code that replays computes exactly
what the code that made the run computed. Use it before switching a running grid to changed
code. The warm start is computed into (or reused from) ``--cache-dir``; its key does not
depend on the folder.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import sys
import tempfile
from pathlib import Path

TIMING_PREFIX = "perf/"
"""Columns that hold wall-clock measurements: never compared."""


def metric_rows(path: str | Path) -> tuple[list[str], dict[int, list[str]]]:
    """``(header, {step: fields})`` of a ``metrics.csv`` (or its packed ``metrics.csv.gz``) read as
    text (the eval-only final row too)."""
    from schema.results import metrics_text

    rows = list(csv.reader(io.StringIO(metrics_text(Path(path)), newline="")))
    if not rows:
        raise ValueError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    if not header or header[0] != "step":
        raise ValueError(f"{path}: the first column is {header[:1]}, not 'step'")
    out: dict[int, list[str]] = {}
    for fields in body:
        step = int(fields[0])
        if step in out:
            raise ValueError(f"{path}: step {step} has two rows")
        out[step] = fields
    return header, out


def compare_metrics(reference: str | Path, replayed: str | Path, steps: int) -> list[str]:
    """Differences between rows ``0 .. steps-1`` of two ``metrics.csv`` files in every column of
    the reference, ``perf/`` columns excepted, one line per differing field (empty:
    byte-identical). A missing row, or a reference column the replay lacks, is a difference;
    columns only the replay has (opt-in diagnostics such as ``mech/``, which never change the
    update) are not compared."""
    ref_header, ref = metric_rows(reference)
    new_header, new = metric_rows(replayed)
    missing = [c for c in ref_header if c not in new_header]
    if missing:
        return [f"columns missing from the replay: {missing}"]
    cols = [(i, new_header.index(c)) for i, c in enumerate(ref_header) if not c.startswith(TIMING_PREFIX)]
    diffs = []
    for step in range(steps):
        if step not in ref or step not in new:
            diffs.append(f"step {step}: missing from {'the reference' if step not in ref else 'the replay'}")
            continue
        for i, j in cols:
            if ref[step][i] != new[step][j]:
                diffs.append(f"step {step} {ref_header[i]}: {ref[step][i]!r} vs {new[step][j]!r}")
    return diffs


def replay(run: str | Path, steps: int, cache_dir: str | Path | None = None, out: str | Path | None = None,
           **overrides) -> list[str]:
    """Run the stored settings of ``run`` for ``steps`` updates (into ``out``, default a temporary
    folder) and return :func:`compare_metrics` against its ``metrics.csv``."""
    from schema.results import METRICS_FILE, metrics_path

    from .config import load_run_config
    from .train import Trainer

    run = Path(run)
    reference = metrics_path(run)
    if reference is None:
        raise ValueError(f"{run} has no metrics.csv (or metrics.csv.gz) to compare with")
    cfg = load_run_config(run)
    if steps < 1 or steps > cfg.steps:
        raise ValueError(f"--steps {steps}: the run has {cfg.steps} updates (need 1 <= steps <= {cfg.steps})")
    changes = {"steps": steps, **overrides}
    if cache_dir is not None:
        changes["cache_dir"] = str(cache_dir)
    cfg = dataclasses.replace(cfg, **changes)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(out) if out is not None else Path(tmp) / run.name
        Trainer(cfg, target, progress=False, log=lambda m: None).run()
        return compare_metrics(reference, target / METRICS_FILE, steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a finished (or partly finished) run folder")
    p.add_argument("--steps", type=int, required=True, help="updates to replay (rows 0 .. steps-1 are compared)")
    p.add_argument("--cache-dir", default=None, help="warm-start cache (default: the run's own setting)")
    args = p.parse_args(argv)
    try:
        diffs = replay(args.run, args.steps, args.cache_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if diffs:
        print(f"{args.run}: {len(diffs)} fields differ in the first {args.steps} updates")
        for d in diffs[:50]:
            print("  " + d)
        return 1
    print(f"{args.run}: the first {args.steps} updates are byte-identical (perf/ columns excepted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
