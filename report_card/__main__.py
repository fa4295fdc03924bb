"""``python -m report_card``: a report card for one stale-rollout correction.

    python -m report_card --module path/to/my_correction.py      # a correction from outside the package
    python -m report_card --estimator topr                       # a registered one
    python -m report_card --module my_correction.py --quick      # exact + simulator, 2-seed LLM smoke
    python -m report_card --estimator vespo --dry-run            # what the full card costs
    python -m report_card --estimator vespo --no-new-runs        # read committed runs only

Writes ``results/cards/<name>/CARD.md``, ``CARD.html``, ``card.json`` and the figures beside them.
A bad correction file is refused before any work starts, with one error naming what is wrong.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .load import CorrectionError, load_correction, registered_correction, validate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m report_card", description=__doc__.split("\n\n")[0])
    p.add_argument("--module", default=None, help="a Python file that registers one correction")
    p.add_argument("--estimator", default=None, help="the correction's estimator name (a registered one, or one of "
                   "the file's)")
    p.add_argument("--name", dest="estimator", help=argparse.SUPPRESS)  # the older flag of --estimator
    p.add_argument("--quick", action="store_true", help="the LLM part's own runs: 2 seeds, short horizon d = 64")
    p.add_argument("--dry-run", action="store_true", help="say what the card computes and what it costs; run nothing")
    p.add_argument("--no-new-runs", action="store_true", help="read committed LLM runs only; say what is not computed")
    p.add_argument("--jobs", type=int, default=2, help="LLM runs at a time (one torch thread each)")
    p.add_argument("--out", default=None, help="cards folder (default: cards/ under the results root)")
    args = p.parse_args(argv)
    if not args.module and not args.estimator:
        p.error("give --module FILE or --estimator NAME")
    from schema.results import results_root

    cards = Path(args.out) if args.out else results_root() / "cards"
    try:
        corr = load_correction(args.module, args.estimator) if args.module else registered_correction(args.estimator)
    except CorrectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    card_dir = cards / corr.name
    try:
        validate(corr)
    except CorrectionError as exc:
        from .card import write_refusal

        path = write_refusal(corr.name, corr.source, str(exc), card_dir)
        print(f"error: {exc}\n(the card says so: {path})", file=sys.stderr)
        return 2
    if args.dry_run:
        from .plan import describe

        print(describe(corr, card_dir, quick=args.quick, jobs=args.jobs, new_runs=not args.no_new_runs))
        return 0
    from .card import compute, write

    t0 = time.perf_counter()
    what = f"--module {args.module}" if args.module else f"--estimator {corr.name}"
    flags = " --quick" * args.quick + " --no-new-runs" * args.no_new_runs
    card = compute(corr, card_dir, quick=args.quick, jobs=args.jobs, new_runs=not args.no_new_runs,
                   command=f"python -m report_card {what}{flags}")
    paths = write(card, card_dir)
    print(f"card of {corr.name}: {paths[0]} ({time.perf_counter() - t0:.0f} s)")
    for h, t in card["verdict"]:
        print(f"  {h}: {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
