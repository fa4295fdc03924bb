"""Replay the first updates of a finished run and compare its metrics byte for byte.

    python -m llm_runs.replay results/llm/study/long-gmc-d16-s0 --steps 21 [--cache-dir results/cache]

The run's stored settings (``config.json``) are run again for ``--steps`` updates in a temporary
folder, and every row of step < ``--steps`` of the new ``metrics.csv`` is compared with the
stored one (plain or packed) as text, column by column, except the ``perf/`` columns (wall-clock times). Equal
text means equal floats (the writer prints ``repr``): the code that replays computes exactly
what the code that made the run computed. Use it before switching a running grid to changed
code. The warm start is computed into (or reused from) ``--cache-dir``; its key does not
depend on the folder.

Byte identity holds on a machine that rounds as the one that made the run did: the warm start
(and every update) depends on the CPU's instruction set (:mod:`llm_runs.warmstart`). Where this
machine's warm start is not the run's, the replay refuses and says so; ``--against-commit`` then
runs the run's settings with the code of the commit that made it and with today's code, both
here, and compares those two (for a run made from a working tree with uncommitted changes that
commit's code did not make the run: the comparison says so and exits 3, no verdict on the run;
the plain replay's is the one that counts). Where this machine loads the run's warm start (the committed
weights, :mod:`llm_runs.warmstart`) but rounds the recipe differently from the machine that made
it, the byte-for-byte check is skipped with that reason (exit status 3): runs here match the
committed ones statistically, not bit for bit. That rounding is a proxy: ``--anyway`` compares all
the same and names the columns that differ (a run made on a forced kernel path, say AVX2 on an
AVX-512 machine, can replay byte for byte on another machine's native path). A run made on a forced
path (``machine.kernel_env`` in its ``config.json``) is replayed only with the same variables set, and a
process that forces a path the run was not made on skips it the same way, saying which to set.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

TIMING_PREFIX = "perf/"
"""Columns that hold wall-clock measurements: never compared."""
EVAL_PREFIX = "eval/"
"""Columns of an evaluation (before the update of its row; the last row is the evaluation alone)."""


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
    for n, fields in enumerate(body, 2):
        if not fields:
            continue
        try:
            step = int(fields[0])
        except ValueError:
            raise ValueError(f"{path}: line {n} has step {fields[0][:40]!r}, not an integer (a torn or edited "
                             f"row)") from None
        if len(fields) != len(header):
            raise ValueError(f"{path}: line {n} (step {step}) has {len(fields)} fields, the header {len(header)} "
                             f"(a row cut short by a crash, or edited)")
        if step in out:
            raise ValueError(f"{path}: step {step} has two rows")
        out[step] = fields
    return header, out


def compare_metrics(reference: str | Path, replayed: str | Path, steps: int) -> list[str]:
    """Differences between rows ``0 .. steps-1`` of two ``metrics.csv`` files in every column of
    the reference, ``perf/`` columns excepted, one line per differing field (empty:
    byte-identical), and between the evaluations after update ``steps`` (row ``steps``'s ``eval/``
    columns: the final evaluation, where the primary metric sits) where the reference evaluated
    there. A missing row, or a reference column the replay lacks, is a difference;
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
    evals = [(i, j) for i, j in cols if ref_header[i].startswith(EVAL_PREFIX)]
    if steps in ref and any(ref[steps][i] for i, _ in evals):  # the reference evaluated after update steps
        if steps not in new:
            return [*diffs, f"step {steps}: the evaluation is missing from the replay"]
        diffs += [f"step {steps} {ref_header[i]}: {ref[steps][i]!r} vs {new[steps][j]!r}"
                  for i, j in evals if ref[steps][i] != new[steps][j]]
    return diffs


def differing_columns(diffs: list[str]) -> list[str]:
    """The columns named by :func:`compare_metrics`'s lines, in first-seen order (a line about a
    missing row or column names none)."""
    cols = [d.split(" ", 3)[2].rstrip(":") for d in diffs if d.startswith("step ") and d.split(" ")[2].endswith(":")]
    return list(dict.fromkeys(cols))


def _stored_config(run: Path, steps: int):
    """The run's stored settings, refusing ``steps`` outside 1 .. its updates."""
    from .config import load_run_config

    cfg = load_run_config(run)
    if steps < 1 or steps > cfg.steps:
        raise ValueError(f"--steps {steps}: the run has {cfg.steps} updates (need 1 <= steps <= {cfg.steps})")
    return cfg


def replay(run: str | Path, steps: int, cache_dir: str | Path | None = None, out: str | Path | None = None,
           *, anyway: bool = False, **overrides) -> list[str]:
    """Run the stored settings of ``run`` for ``steps`` updates (into ``out``, default a temporary
    folder) and return :func:`compare_metrics` against its ``metrics.csv``. ``anyway``: compare even
    where this machine rounds the warm-start recipe differently from the machine that made the run
    (no :class:`ReplaySkipped`; the differences, if any, are returned): the recipe's rounding is a
    proxy, and a run made on a forced kernel path may still replay here."""
    from schema.results import METRICS_FILE

    from .trainer import Trainer

    run = Path(run)
    reference = _reference(run)
    cfg = _stored_config(run, steps)
    metric_rows(reference)  # a torn or short stored row is refused before any work
    changes = {"steps": steps, **overrides}
    if cache_dir is not None:
        changes["cache_dir"] = str(cache_dir)
    cfg = dataclasses.replace(cfg, **changes)
    _check_kernel_env(run)
    _check_warm_start(run, cfg, rounding=not anyway)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(out) if out is not None else Path(tmp) / run.name
        Trainer(cfg, target, progress=False, log=lambda m: None).run()
        return compare_metrics(reference, target / METRICS_FILE, steps)


def replay_against_commit(run: str | Path, steps: int, commit: str | None = None,
                          out: str | Path | None = None) -> list[str]:
    """Run the stored settings of ``run`` for ``steps`` updates twice on this machine, with the code
    of ``commit`` (default: the commit the run records) and with today's code, and return
    :func:`compare_metrics` between the two: whether today's code computes what that commit's code
    computes, on a machine whose float rounding differs from the one that made the run (where
    :func:`replay` refuses). ``commit``'s code is taken with ``git archive`` and run in a
    subprocess (``python -m llm_runs.train`` in its own folder). Both start from the same warm start:
    today's code sees the committed warm starts of ``commit``'s tree (none, for a commit that had
    none) and reuses the warm start ``commit``'s code cached, so on a machine that rounds the recipe
    differently from the committing one neither side loads weights the other computed otherwise."""
    import subprocess

    from schema.results import METRICS_FILE, read_run_doc

    from .committed_warmstarts import COMMITTED_ENV
    from .train import cli_flags
    from .trainer import Trainer

    run = Path(run)
    stored = read_run_doc(run)
    commit = commit or stored.get("git_commit")
    if not commit:
        raise ValueError(f"{run}/config.json records no git commit: name one with --against-commit")
    cfg = _stored_config(run, steps)
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], check=False,
                                 capture_output=True)
        if archive.returncode != 0:
            raise ValueError(f"git archive {commit}: {archive.stderr.decode().strip()} (a clone with that commit "
                             f"in its history is needed)")
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
        then = {**stored["config"], "steps": steps, "cache_dir": str(tmp / "cache-then")}
        env = {**os.environ, "PYTHONPATH": str(src)}
        made = subprocess.run([sys.executable, "-m", "llm_runs.train", "--out", str(tmp / "then"), "--no-progress",
                               *cli_flags(then)],  # flags the trainer of any commit parses
                              check=False, cwd=src, env=env, capture_output=True, text=True)
        if made.returncode != 0:
            raise ValueError(f"the code of {commit} did not run the settings of {run}: {made.stderr.strip()[-800:]}")
        target = Path(out) if out is not None else tmp / "now"
        now = dataclasses.replace(cfg, steps=steps, cache_dir=str(tmp / "cache-then"))
        with _environ(COMMITTED_ENV, str(src / "llm_runs" / "warmstarts")):
            Trainer(now, target, progress=False, log=lambda m: None).run()
        return compare_metrics(tmp / "then" / METRICS_FILE, target / METRICS_FILE, steps)


@contextmanager
def _environ(name: str, value: str):
    """``os.environ[name] = value`` inside the block, as it was after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


class ReplaySkipped(ValueError):
    """No replay on this machine can be byte-identical, for a stated reason (not a failure of the code)."""


def _check_kernel_env(run: Path) -> None:
    """Skip (:class:`ReplaySkipped`, the command's exit status 3) the replay of a run in a process whose
    environment forces another CPU kernel path than the run's (``machine.kernel_env`` in its ``config.json``;
    none forced on either side is the same path): the variables are read when torch loads, so the replay would
    silently take another path and could not be byte-identical. The message names the setting to replay with."""
    from schema.results import read_run_doc

    from .warmstart import KERNEL_ENV

    made = (read_run_doc(run).get("machine") or {}).get("kernel_env") or {}
    here = {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)}
    if made != here:
        setting = " ".join(f"{k}={v}" for k, v in made.items()) or "none of " + ", ".join(KERNEL_ENV)
        raise ReplaySkipped(f"{run} was made on the kernel path {made or 'of the machine (none forced)'}, this process "
                            f"forces {here or 'none'}, so the byte-for-byte check is skipped: replay it with {setting} "
                            "in the environment")


def _check_warm_start(run: Path, cfg, rounding: bool = True) -> None:
    """Refuse a replay that cannot be byte-identical: this machine's warm start for the run's
    settings is not the one the run started from, or (``rounding``) it is (the committed weights)
    but this machine rounds the recipe differently from the one that made it and the run was made on another
    machine than this one (:class:`ReplaySkipped`)."""
    from schema.results import read_run_doc

    from .tasks import build_task
    from .warmstart import differs, get_warm_start, machine, rounds_as_committed, torch_threads

    stored = read_run_doc(run)
    used = stored.get("warm_start")
    if not used or "key" not in used:
        return
    with torch_threads(cfg.threads):  # as the trainer computes it
        task = build_task(cfg)
        here = get_warm_start(cfg, task, log=lambda m: None).info
    why = differs(used, here)
    made_on = stored.get("machine", "not recorded")
    if why:
        raise ValueError(f"{run} started from another warm start than this machine computes for its settings "
                         f"({why}): the numerics depend on the CPU (this one: {machine()}; the run's: {made_on}), "
                         f"so no replay here can be byte-identical. Replay it on a machine whose warm start "
                         f"matches, or give --cache-dir a cache holding the run's own warm start")
    same_machine = isinstance(made_on, dict) and all(made_on.get(k) == v for k, v in machine().items())
    # a run made on this very machine replays here to every byte whatever the warm start's machine rounded
    if rounding and not same_machine and here.get("source") == "committed" and \
            rounds_as_committed(cfg, task, here) is False:
        raise ReplaySkipped(f"{run} starts from the committed warm start, which this machine loads, but this machine "
                            f"rounds the recipe differently from the one that made the run (this one: {machine()}; "
                            f"the run's: {made_on}; `python -m llm_runs.warmstart --check`), so its updates can "
                            "match the run statistically, not byte for byte: the byte-for-byte check is skipped "
                            "(--anyway compares all the same)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a finished (or partly finished) run folder")
    p.add_argument("--steps", type=int, required=True, help="updates to replay (rows 0 .. steps-1 are compared)")
    p.add_argument("--cache-dir", default=None, help="warm-start cache (default: the run's own setting)")
    p.add_argument("--against-commit", nargs="?", const="", default=None, metavar="COMMIT",
                   help="compare today's code with COMMIT's code (default: the run's own commit), both run here, "
                        "instead of with the stored metrics: for a machine that rounds differently from the one "
                        "that made the run")
    p.add_argument("--anyway", action="store_true",
                   help="compare even where this machine rounds the warm-start recipe differently from the one "
                        "that made the run (reports the differing columns instead of skipping)")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the outcome here: the run, the updates compared, this machine, the differing "
                        "columns and fields (a file the toolkit did not write is never replaced)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    dirty = None
    try:
        if args.json:
            from schema.io import check_output

            check_output(args.json)
        if args.against_commit is not None:
            dirty = _made_from_a_dirty_tree(Path(args.run), args.against_commit or None)
            diffs = replay_against_commit(args.run, args.steps, args.against_commit or None)
            what = f"today's code and the code of {args.against_commit or 'the run commit'}, both on this machine,"
        else:
            diffs = replay(args.run, args.steps, args.cache_dir, anyway=args.anyway)
            what = "the replay and the stored run"
    except ReplaySkipped as exc:
        print(f"skipped: {exc}")
        return 3
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        _write_outcome(Path(args.json), Path(args.run), args, diffs)
    if diffs:
        print(f"{args.run}: {len(diffs)} fields differ between {what} in the first {args.steps} updates")
        print("  in the columns: " + ", ".join(differing_columns(diffs)))
        for d in diffs[:50]:
            print("  " + d)
        if dirty:
            print(dirty)
        return 1
    print(f"{args.run}: the first {args.steps} updates of {what} are byte-identical (perf/ columns excepted)")
    if dirty:
        print(dirty)
        return 3  # no verdict on the run itself
    return 0


REPLAY_FORMAT = "gmc-grpo-replay/1"


def _write_outcome(path: Path, run: Path, args, diffs: list[str]) -> None:
    """A replay's outcome as a JSON document (:data:`REPLAY_FORMAT`)."""
    from schema.io import write_json
    from schema.results import read_run_doc

    from .warmstart import machine

    header, _ = metric_rows(_reference(run))
    compared = [c for c in header[1:] if not c.startswith(TIMING_PREFIX)]
    cols = differing_columns(diffs)
    write_json(path, {"format": REPLAY_FORMAT, "run": run.as_posix(), "steps": args.steps,
                      "mode": "against-commit" if args.against_commit is not None else "stored",
                      "anyway": bool(args.anyway), "machine": machine(),
                      "run_machine": read_run_doc(run).get("machine"), "columns_compared": len(compared),
                      "columns_differing": cols, "fields_differing": len(diffs),
                      "identical_columns": [c for c in compared if c not in cols]})


def _reference(run: Path) -> Path:
    from schema.results import metrics_path

    found = metrics_path(run)
    if found is None:
        raise ValueError(f"{run} has no metrics.csv (or metrics.csv.gz) to compare with")
    return found


def _made_from_a_dirty_tree(run: Path, commit: str | None) -> str | None:
    """The note ``--against-commit`` prints for a run made from a working tree with uncommitted
    changes (``config.json`` ``git_dirty``) when compared with its own commit: that commit's code is not
    the code that made the run, so the comparison vouches for nothing about it (None: a clean run)."""
    from schema.results import read_run_doc

    stored = read_run_doc(run)
    if not stored.get("git_dirty") or (commit and commit != stored.get("git_commit")):
        return None
    return (f"note: {run} was made from a working tree with uncommitted changes (config.json git_dirty): the code "
            f"that made it is not the code of {stored.get('git_commit')}, so this comparison says nothing about the "
            f"run. Only the plain replay (python -m llm_runs.replay {run} --steps N, on a machine whose warm start "
            f"matches) can vouch for it")


if __name__ == "__main__":
    sys.exit(main())
