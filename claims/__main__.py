"""``python -m claims [--only 3,7] [--quick] [--json PATH] [--md PATH] [--ledger PATH]``: THEORY.md §5's claims.

Prints one aligned row per claim (id, claim, expected, measured, status, seconds) as it
completes, then checks each outcome against THEORY's ledger (the table's *stated as* and
*recorded* columns, :mod:`claims.ledger`) and prints "N claims: K hold, R refuted as
recorded". A full run (every claim, not ``--quick``) writes ``results/verify/claims.json``,
``claims.md`` and ``abstract.json`` (the verdicts on the abstract, :mod:`claims.abstract`) unless
``--json``/``--md`` name other files. A partial run (``--only`` or ``--quick``) writes
only the files it is given, and never replaces a full table. A file that the toolkit did
not write is never replaced. Every output is checked to be writable before any claim runs.
Exit code 0 exactly when every selected claim's outcome matches the ledger: every claim recorded
``holds`` PASSes and every claim recorded ``refuted`` FAILs again at its recorded counterexample,
within the recorded tolerance. 1 on any mismatch (a claim that fails, a refutation that no
longer reproduces, a counterexample that has moved); 2: bad arguments, outputs or ledger.

The bounds checked are THEORY.md's reconstruction ([R]), not the paper's text.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from schema.io import check_writable, write_json, write_text
from schema.provenance import provenance
from schema.results import results_root

from .ledger import THEORY, LedgerError, annotate, ledger_summary, read_ledger
from .registry import BY_ID, KEYS, run_claims, valid_ids
from .table import (
    ABSTRACT_FORMAT,
    FORMAT,
    MD_MARKER,
    format_row,
    header,
    markdown,
    summary,
)


def default_paths() -> tuple[Path, Path, Path]:
    """``claims.json``, ``claims.md`` and ``abstract.json`` under the results root's ``verify/``."""
    v = results_root() / "verify"
    return v / "claims.json", v / "claims.md", v / "abstract.json"


def parse_only(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--only takes claim ids like 3,7; got {text!r}") from None
    bad = [i for i in ids if i not in BY_ID]
    if bad or not ids:
        raise argparse.ArgumentTypeError(f"--only: unknown claim id(s) {bad or text!r}; valid: {valid_ids()}")
    return sorted(set(ids))


LEGACY_MD = "# THEORY.md §5 claims: verification"


def _existing_kind(path: Path) -> str:
    """What ``path`` holds now: "absent", "full" or "partial" (a claims table of the toolkit), or "foreign"."""
    if not path.exists():
        return "absent"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return "foreign"
    if path.suffix == ".md" or text.startswith(MD_MARKER):
        if text.startswith(LEGACY_MD):  # a table written before the marker existed
            return "full" if "(18 claims" in text and " --quick" not in text.split("\n", 3)[2] else "partial"
        if not text.startswith(MD_MARKER):
            return "foreign"
        return "full" if "<!-- complete -->" in text else "partial"
    try:
        obj = json.loads(text)
    except ValueError:
        return "foreign"
    if isinstance(obj, list) and obj and all(isinstance(r, dict) and set(KEYS) <= set(r) for r in obj):
        return "full" if sorted(r["id"] for r in obj) == sorted(BY_ID) else "partial"  # the list-only format
    if isinstance(obj, dict) and obj.get("format") == ABSTRACT_FORMAT:
        return "full"  # the abstract's verdicts: written after a full run only
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        return "foreign"
    return "full" if obj.get("complete") and not obj.get("quick") else "partial"


def check_outputs(paths: list[Path], full: bool) -> None:
    """Refuse (``ValueError``/``OSError``) before any claim runs: two outputs on one file, a file the
    toolkit did not write, a full table that a partial run would replace, an unwritable path."""
    resolved = [p.resolve() for p in paths]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"the outputs must be different files; got {', '.join(map(str, paths))}")
    for p in paths:
        kind = _existing_kind(p)
        if kind == "foreign":
            raise ValueError(f"{p} exists and was not written by `python -m claims`; not replacing it "
                             "(name another file or move it away)")
        if kind == "full" and not full:
            raise ValueError(f"{p} holds the full claims table; a partial run (--only/--quick) does not replace it "
                             "(name another file)")
        check_writable(p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", type=parse_only, default=None, help="comma-separated claim ids, e.g. 3,7")
    ap.add_argument("--quick", action="store_true", help="fewer random draws / samples (for tests and smoke runs)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here (full run default: "
                    "results/verify/claims.json)")
    ap.add_argument("--md", type=Path, default=None, help="write the Markdown table here (full run default: "
                    "results/verify/claims.md)")
    ap.add_argument("--ledger", type=Path, default=THEORY, help="the THEORY.md whose §5 table holds the recorded "
                    "verdicts (default: docs/THEORY.md)")
    args = ap.parse_args(argv)
    full = args.only is None and not args.quick
    json_path, md_path, abstract_path = args.json, args.md, None
    if full and json_path is None and md_path is None:
        json_path, md_path, abstract_path = default_paths()
    outputs = [p for p in (json_path, md_path, abstract_path) if p is not None]
    try:
        ledger = read_ledger(args.ledger)
        unknown = sorted(set(ledger) - set(BY_ID))
        if unknown:
            raise LedgerError(f"the ledger {args.ledger} records claim(s) {unknown} that are not registered")
        check_outputs(outputs, full)
    except (ValueError, OSError) as exc:
        print(f"python -m claims: {exc}", file=sys.stderr)
        return 2

    print("THEORY.md §5 claims (reconstructed bounds [R]); --quick" if args.quick
          else "THEORY.md §5 claims (reconstructed bounds [R])")
    print(header(), flush=True)
    t0 = time.perf_counter()
    rows = run_claims(args.only, quick=args.quick, on_row=lambda r: print(format_row(r), flush=True))
    seconds = time.perf_counter() - t0
    rows = annotate(rows, ledger)
    print(summary(rows, seconds))
    print(ledger_summary(rows))

    complete = [r["id"] for r in rows] == sorted(BY_ID)
    doc = {"format": FORMAT, "complete": complete, "quick": args.quick, "ids": [r["id"] for r in rows],
           "seconds": round(seconds, 1), "provenance": provenance(), "claims": rows}
    for path, write in ((json_path, lambda p: write_json(p, doc)),
                        (md_path, lambda p: write_text(p, markdown(rows, seconds, args.quick,
                                                                   complete and not args.quick)
                                                       + "\n"))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            print(f"wrote {path}")
    if abstract_path is not None:
        from .abstract import write_abstract

        write_abstract(abstract_path)
        print(f"wrote {abstract_path}")
    if not outputs:
        print("partial run (--only/--quick): nothing written; name --json/--md to keep the table")
    return 0 if all(r["matches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
