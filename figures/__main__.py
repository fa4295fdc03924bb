"""``python -m figures [--only f1,f7] [--no-produce] [--out DIR]`` (``make figures``): draw F1-F8.

Every figure is drawn from the results present (full sweeps preferred over quick ones). For
results that are missing, the quick version of their producer runs first, as a subprocess,
and says so, so that a fresh clone gets every figure:

* ``python -m simulators.sweep NAME --quick``  (F1, F2, F4, F5)
* ``python -m bounds.tuned_sweep``             (F3)
* ``python -m llm_runs.sweep --quick``         (F6, F7, F8)
* ``python -m bounds.verify --quick``          (the claims table of the report)

The full-scale sweeps stay separate targets (``make sim-sweeps``, ``make llm-sweep``,
``make verify-bounds``). PNG and PDF go to ``figures/out/``. Exit code 1 if a figure could not
be drawn (its producer failed or is missing), after drawing all the others.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from . import style
from .data import ROOT, VERIFY, MissingResults, Source
from .report import FIGURES, fig_module


def _producer_exists(command: str) -> bool:
    """Whether the module a command runs is in the tree (checked by file: importing could load torch)."""
    module = shlex.split(command)[2]
    base = ROOT.joinpath(*module.split("."))
    return base.with_suffix(".py").exists() or (base / "__main__.py").exists()


def produce(source: Source) -> bool:
    """Run ``source``'s quick command; True if its results exist afterwards."""
    if not _producer_exists(source.command):
        print(f"  cannot run `{source.command}`: {shlex.split(source.command)[2]} is not in this tree", flush=True)
        return False
    argv = [sys.executable] + shlex.split(source.command)[1:]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    rc = subprocess.run(argv, check=False, cwd=ROOT, env=env).returncode
    found = source.find() is not None
    print(f"  `{source.command}` finished in {time.perf_counter() - t0:.1f} s (exit {rc})"
          + ("" if found else f"; still no results for {source.name}"), flush=True)
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures", description=__doc__.split("\n")[0])
    p.add_argument("--only", default=None, help="comma-separated figure prefixes, e.g. f1,f7 (default: all)")
    p.add_argument("--no-produce", action="store_true", help="never run a producer; skip figures without results")
    p.add_argument("--out", type=Path, default=None, help="output folder (default figures/out/)")
    a = p.parse_args(argv)
    names = FIGURES
    if a.only:
        want = [w.strip() for w in a.only.split(",") if w.strip()]
        bad = [w for w in want if not any(n.startswith(w) for n in FIGURES)]
        if bad:
            p.error(f"--only: unknown figure(s) {bad}; valid: {', '.join(FIGURES)}")
        names = [n for n in FIGURES if any(n.startswith(w) for w in want)]
    t_all = time.perf_counter()
    modules = {n: fig_module(n) for n in names}
    sources: dict[str, Source] = {}
    for m in modules.values():
        sources.update({s.name: s for s in m.SOURCES})
    if a.only is None:
        sources[VERIFY.name] = VERIFY  # the report's claims table
    failed_sources = set()
    for s in sources.values():
        if s.find() is not None:
            continue
        if a.no_produce:
            print(f"results missing for {s.name}; not produced (--no-produce)", flush=True)
            failed_sources.add(s.name)
            continue
        print(f"results missing for {s.name}: running the quick version `{s.command}`", flush=True)
        if not produce(s):
            failed_sources.add(s.name)
    failed = []
    for n, m in modules.items():
        t0 = time.perf_counter()
        try:
            df = m.load()
            paths = style.save(m.plot(df), n, a.out)
        except MissingResults as e:
            failed.append(n)
            print(f"{n}: NOT drawn: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001  (a broken figure must not stop the others)
            failed.append(n)
            print(f"{n}: NOT drawn: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"{n}: {paths[0]} and .pdf ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"{len(modules) - len(failed)} of {len(modules)} figures drawn in {time.perf_counter() - t_all:.1f} s"
          + (f"; not drawn: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed or failed_sources & {VERIFY.name} else 0


if __name__ == "__main__":
    raise SystemExit(main())
