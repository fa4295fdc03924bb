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

from .load import CorrectionError, card_folder, load_correction, registered_correction, validate


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

    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    cards = Path(args.out) if args.out else results_root() / "cards"
    if cards.exists() and not cards.is_dir():
        print(f"error: --out {cards} is a file, not a folder", file=sys.stderr)
        return 2
    try:
        corr = load_correction(args.module, args.estimator) if args.module else registered_correction(args.estimator)
        card_dir = card_folder(cards, corr.name)
    except CorrectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .card import write_refusal

    def refuse(error: str, when: str) -> int:
        try:
            path, replaced = write_refusal(corr.name, corr.source, error, card_dir, when=when)
        except OSError as exc:
            print(f"error: {error}\n(the card could not be written to {card_dir}: {exc})", file=sys.stderr)
            return 2
        gone = f"; the earlier card's {', '.join(replaced)} replaced by the refusal" if replaced else ""
        print(f"error: {error}\n(the card says so: {path}{gone})", file=sys.stderr)
        return 2

    try:
        validate(corr)
    except CorrectionError as exc:
        return refuse(str(exc), "before any work started")
    from schema.sources import MissingResults

    try:
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
    except MissingResults as exc:  # the toolkit's own results are not there: nothing about the correction
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (the correction's code runs here: any failure is named)
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return refuse(f"computing the card of {corr.name} failed: {reason}", "while the card was computed")
    try:
        paths = write(card, card_dir)
    except OSError as exc:
        print(f"error: the card of {corr.name} could not be written to {card_dir}: {exc}", file=sys.stderr)
        return 2
    print(f"card of {corr.name}: {paths[0]} ({time.perf_counter() - t0:.0f} s)")
    for h, t in card["verdict"]:
        print(f"  {h}: {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
