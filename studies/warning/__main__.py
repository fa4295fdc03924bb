"""The early-warning study (docs/PREREGISTRATION-WARNING.md).

    python -m studies.warning --select          # choose the rule on the committed training grids (once):
                                                #   studies/warning/frozen.json and selection.json
    python -m studies.warning --verdict budget  # apply the frozen rule to a grid's runs -> its verdicts file
    python -m studies.warning --pairs           # the candidates on the frozen pairs' pools at G = 4 .. 128:
                                                #   results/llm/budget/pair_warning_candidates.{csv,json}

``--select`` refuses to overwrite ``frozen.json``: the rule is frozen before the runs that confirm it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FROZEN = HERE / "frozen.json"
SELECTION = HERE / "selection.json"
FORMAT = "gmc-grpo-warning-rule/1"


def frozen_record(sel: dict) -> dict:
    """The machine-readable frozen rule from :func:`studies.warning.analysis.select`'s record."""
    from .analysis import FA_BUDGET, HIT_TARGET, MIN_LEAD, STATISTICS, TRAINING_GRIDS

    r = sel["rule"]
    return {"format": FORMAT, "statistic": r["statistic"], "definition": STATISTICS[r["statistic"]],
            "summary": r["summary"], "window": r["window"], "threshold": r["threshold"], "fires": "high",
            "from_update": 0, "training_grids": list(TRAINING_GRIDS),
            "training_runs": sum(x["collapsed"] + x["held"] for x in r["table"] if x["G"] == "all"),
            "decision": {"hit_rate_min": HIT_TARGET, "false_alarm_max": FA_BUDGET, "lead_median_min": MIN_LEAD},
            "training_table": r["table"]}


def select_main() -> int:
    from schema.io import write_text

    from .analysis import read_records, select
    from .invariance import law

    if FROZEN.exists():
        print(f"error: {FROZEN} exists: the rule is frozen; it is never chosen again", file=sys.stderr)
        return 2
    recs = read_records(progress=lambda s: print(s, file=sys.stderr, flush=True))
    sel = select(recs, progress=lambda s: print(s, file=sys.stderr, flush=True))
    per_grid = {g: sum(r["grid"] == g for r in recs) for g in sorted({r["grid"] for r in recs})}
    doc = {"format": FORMAT + "-selection", "training_runs_per_grid": per_grid, "rule": sel["rule"],
           "ranking": sel["ranking"], "law": law()}
    import json

    write_text(SELECTION, json.dumps(doc, indent=1, default=_plain) + "\n")
    write_text(FROZEN, json.dumps(frozen_record(sel), indent=1, default=_plain) + "\n")
    for row in sel["rule"]["table"]:
        print(row)
    return 0


def _plain(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x).__name__}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.warning", description=__doc__.split("\n\n")[0])
    p.add_argument("--select", action="store_true", help="choose and freeze the rule (refused once frozen)")
    p.add_argument("--verdict", metavar="GRID", default=None, help="apply the frozen rule to grid GRID's runs")
    p.add_argument("--out", default=None, help="with --verdict: the verdicts file (default: the grid folder's "
                                               "warning_verdicts.json)")
    p.add_argument("--pairs", action="store_true", help="the candidates on the frozen pairs' pools at G = 4 .. 128 "
                                                        "(studies.warning.pairs)")
    p.add_argument("--only", nargs="+", default=None, metavar="PAIR", help="with --pairs: these pairs only")
    p.add_argument("--redo", action="store_true", help="with --pairs: measure pairs already measured again")
    args = p.parse_args(argv)
    if args.pairs:
        from .pairs import main as pairs_main

        return pairs_main(args.only, args.redo)
    if args.select:
        return select_main()
    if args.verdict:
        from .verdict import _main_verdict

        return _main_verdict(args.verdict, Path(args.out) if args.out else None)
    p.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
