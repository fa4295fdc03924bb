"""The ledger: what THEORY.md §5 records for each claim, and whether a run's outcome matches it.

THEORY's claims table ends with two columns, *stated as* (``theorem``, ``proposition`` or
``conjecture``, joined by `` + `` for a claim with parts) and *recorded*: ``holds``, or

    refuted at `POINT`: NAME VALUE, NAME VALUE (tolerance TOL)

the point where the check fails, the values found there and the absolute tolerance within which
a rerun must find them again. A claim's outcome matches its entry when

* ``holds``: its status is PASS;
* ``refuted``: its status is FAIL, the check names the recorded point as its only failing point
  (:attr:`claims.result.Result.refuted_at`) and every recorded value is found there within the
  tolerance. An ERROR, a PASS, another failing point or a moved value is a mismatch.

``python -m claims`` exits 0 exactly when every claim it ran matches (:func:`annotate`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STATED = ("theorem", "proposition", "conjecture")
RECORDED = ("holds", "refuted")
THEORY = Path(__file__).resolve().parents[1] / "docs" / "THEORY.md"
HEADER = "| # | claim | sympy / computation | simulation and expected result | stated as | recorded |"
_REFUTED = re.compile(r"^refuted at `(?P<point>[^`]+)`: (?P<values>.+) \(tolerance (?P<tol>[^()]*)\)$")
_VALUE = re.compile(r"^(?P<name>.+?) (?P<value>[+-]?(?:[0-9.][0-9.eE+-]*|inf|infinity|nan))$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


class LedgerError(ValueError):
    """THEORY's claims table cannot be read as a ledger."""


@dataclass(frozen=True)
class Entry:
    id: int
    stated_as: str
    recorded: str  # "holds" or "refuted"
    counterexample: dict | None = None  # {"point": str, "values": {name: float}, "tolerance": float}


def parse_recorded(cid: int, text: str) -> tuple[str, dict | None]:
    """("holds", None) or ("refuted", counterexample) from a *recorded* cell."""
    text = " ".join(text.split())
    if text == "holds":
        return "holds", None
    m = _REFUTED.match(text)
    if not m:
        raise LedgerError(f"claim {cid}: recorded verdict {text!r} is neither 'holds' nor "
                          "'refuted at `POINT`: NAME VALUE, ... (tolerance TOL)'")
    values = {}
    for part in m["values"].split(", "):
        v = _VALUE.match(part.strip())
        if not v:
            raise LedgerError(f"claim {cid}: counterexample value {part!r} is not 'NAME VALUE'")
        if v["name"] in values:
            raise LedgerError(f"claim {cid}, column 'recorded': the counterexample names {v['name']!r} twice")
        values[v["name"]] = _number(cid, f"the counterexample value of {v['name']!r}", v["value"])
    tol = _number(cid, "tolerance", m["tol"])
    if tol < 0:
        raise LedgerError(f"claim {cid}, column 'recorded': tolerance {m['tol']!r} is negative: a tolerance is a "
                          f"finite number >= 0 (how far a rerun may find each value from the recorded one)")
    return "refuted", {"point": m["point"], "values": values, "tolerance": tol}


def _number(cid: int, what: str, text: str) -> float:
    """``text`` as a finite decimal number, or a :class:`LedgerError` naming the claim, the column and the value."""
    import math

    value = float(text) if _NUMBER.match(text.strip()) else math.nan
    if not math.isfinite(value):
        raise LedgerError(f"claim {cid}, column 'recorded': {what} {text!r} is not a finite decimal number")
    return value


def read_ledger(path: Path | str = THEORY) -> dict[int, Entry]:
    """The ledger of THEORY's §5 table at ``path``, by claim id (``LedgerError`` if unreadable)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(f"cannot read the ledger {path}: {exc}") from None
    try:
        start = lines.index(HEADER) + 2
    except ValueError:
        raise LedgerError(f"{path} has no claims table headed {HEADER!r}") from None
    out: dict[int, Entry] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) < 6 or not re.fullmatch(r"[0-9]+", cells[0]):
            raise LedgerError(f"{path}: claims table row {line[:60]!r}... has no id or no ledger columns")
        cid = int(cells[0])
        stated = cells[-2]
        parts = [s.strip() for s in stated.split("+")]
        if not parts or any(s not in STATED for s in parts):
            raise LedgerError(f"claim {cid}: 'stated as' {stated!r} is not one of {'/'.join(STATED)} (joined by +)")
        recorded, counterexample = parse_recorded(cid, cells[-1])
        if cid in out:
            raise LedgerError(f"claim {cid} appears twice in the ledger")
        out[cid] = Entry(cid, " + ".join(parts), recorded, counterexample)
    return out


def match(row: dict, entry: Entry) -> tuple[bool, str]:
    """Whether a claims row's outcome matches its ledger entry, and why not (or what matched)."""
    status = row["status"]
    if entry.recorded == "holds":
        return (True, "holds") if status == "PASS" else (False, f"recorded holds, but the check gave {status}")
    ce = entry.counterexample
    if status != "FAIL":
        return False, (f"recorded refuted at {ce['point']}, but the check gave {status}: "
                       "the refutation no longer reproduces")
    found = {f["point"]: f["values"] for f in row.get("refuted_at") or []}
    if set(found) != {ce["point"]}:
        return False, (f"recorded refuted at {ce['point']} only, but the check fails at "
                       f"{', '.join(sorted(found)) or 'no named point'}: the counterexample has moved")
    at = found[ce["point"]]
    moved = [f"{k} {v:.4g} recorded, {at[k]:.4g} found" if k in at else f"{k} not measured"
             for k, v in ce["values"].items() if k not in at or not abs(at[k] - v) <= ce["tolerance"]]  # NaN moved
    if moved:
        return False, (f"refuted at {ce['point']} as recorded, but the values moved beyond "
                       f"{ce['tolerance']:g}: " + "; ".join(moved))
    return True, (f"refuted at {ce['point']} as recorded ("
                  + ", ".join(f"{k} {at[k]:.4f}" for k in ce["values"]) + ")")


def annotate(rows: list[dict], ledger: dict[int, Entry]) -> list[dict]:
    """Each row with ``stated_as``, ``recorded``, ``counterexample`` (a refutation's, else None),
    ``matches`` and ``ledger_note``; a claim absent from the ledger does not match."""
    out = []
    for r in rows:
        e = ledger.get(r["id"])
        if e is None:
            ok, note = False, "absent from THEORY's ledger"
            extra = {"stated_as": None, "recorded": None, "counterexample": None}
        else:
            ok, note = match(r, e)
            extra = {"stated_as": e.stated_as, "recorded": e.recorded, "counterexample": e.counterexample}
        out.append({**r, **extra, "matches": ok, "ledger_note": note})
    return out


def ledger_summary(rows: list[dict]) -> str:
    """"N claims: K hold, R refuted as recorded (claim 22: ...)" plus any mismatches, named."""
    held = [r for r in rows if r["matches"] and r["recorded"] == "holds"]
    refuted = [r for r in rows if r["matches"] and r["recorded"] == "refuted"]
    bad = [r for r in rows if not r["matches"]]
    text = f"{len(rows)} claims: {len(held)} hold, {len(refuted)} refuted as recorded"
    if refuted:
        text += " (" + "; ".join(f"claim {r['id']}: {r['ledger_note']}" for r in refuted) + ")"
    if bad:
        text += (f"; {len(bad)} do{'es' if len(bad) == 1 else ''} not match the ledger ("
                 + "; ".join(f"claim {r['id']}: {r['ledger_note']}" for r in bad) + ")")
    return text


__all__ = ["THEORY", "Entry", "LedgerError", "annotate", "ledger_summary", "match", "parse_recorded", "read_ledger"]
