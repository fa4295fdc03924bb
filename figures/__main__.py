"""``python -m figures [--only f1,f7] [--out DIR]``: draw the toolkit's figures (``figures.registry.FIGURES``)
from the results present; ``python -m studies.figures`` (``make figures``) draws them and every study's.

Figures only read results (full sweeps preferred over quick ones); they start no program.
A figure whose results are missing is not drawn, and the message names the command that
makes them (``make sim-sweeps``, ``make llm-sweep`` and ``make verify-bounds`` run them all).
PNG and PDF go to ``figures/out/``. Exit code 1 if a figure could not be drawn, after
drawing all the others.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from schema.results import MissingResults

from . import style
from .registry import FIGURES, fig_module, fig_name


def picks(want: str, name: str) -> bool:
    """Whether ``--only``'s entry ``want`` names the figure ``name``: its number (``f1`` is ``f1_*``, not
    ``f10_*``) or its name or a start of it (``f1_bias``)."""
    return name == want or name.startswith(want if "_" in want else f"{want}_")


ELSEWHERE = "a study's figures are drawn by python -m studies.figures"
"""What ``python -m figures`` adds when ``--only`` names no figure of its list."""


def main(argv=None, figures: list[str] = FIGURES, prog: str = "python -m figures", doc: str | None = None,
         elsewhere: str | None = ELSEWHERE) -> int:
    """Draw ``figures`` (names or module paths, :func:`figures.registry.fig_module`), or those ``--only`` picks;
    ``doc``: the command's description (default this module's); ``elsewhere``: where figures not in ``figures``
    are drawn, said beside an unknown ``--only`` entry (``None``: nothing to say)."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or __doc__).split("\n")[0])
    p.add_argument("--only", default=None, help="comma-separated figure numbers or names, e.g. f1,f7 (default: all)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default figures/out/)")
    a = p.parse_args(argv)
    names = list(figures)
    if a.only:
        want = [w.strip() for w in a.only.split(",") if w.strip()]
        bad = [w for w in want if not any(picks(w, fig_name(n)) for n in figures)]
        if bad:
            p.error(f"--only: unknown figure(s) {bad}; valid: {', '.join(fig_name(n) for n in figures)}"
                    + (f" ({elsewhere})" if elsewhere else ""))
        names = [n for n in figures if any(picks(w, fig_name(n)) for w in want)]
    t_all = time.perf_counter()
    failed = []
    for ref in names:
        n = fig_name(ref)
        t0 = time.perf_counter()
        try:
            m = fig_module(ref)
            paths = style.save(m.plot(m.load()), n, a.out)
        except MissingResults as e:
            failed.append(n)
            print(f"{n}: NOT drawn: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001  (a broken figure must not stop the others)
            failed.append(n)
            print(f"{n}: NOT drawn: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"{n}: {paths[0]} and .pdf ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"{len(names) - len(failed)} of {len(names)} figures drawn in {time.perf_counter() - t_all:.1f} s"
          + (f"; not drawn: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
