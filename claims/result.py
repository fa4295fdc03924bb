"""The one record every claim check returns."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import sympy as sp

STATUSES = ("PASS", "FAIL", "ERROR")


@dataclass(frozen=True)
class Result:
    """What a check found: THEORY's ``expected`` value, the ``measured`` one, the ``tolerance``
    the comparison used, PASS/FAIL (ERROR: the check raised), and one line of ``evidence``.
    ``refuted_at`` names the points where a FAIL was found, each ``{"point": str, "values":
    {name: float}}``: what THEORY's ledger (:mod:`claims.ledger`) compares a recorded refutation with."""

    expected: object
    measured: object
    tolerance: object
    status: str
    evidence: str
    refuted_at: tuple = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @classmethod
    def of(cls, ok: bool, expected, measured, tolerance, evidence: str, refuted_at=()) -> Result:
        return cls(expected, measured, tolerance, "PASS" if ok else "FAIL", str(evidence), tuple(refuted_at))

    @classmethod
    def error(cls, exc: BaseException) -> Result:
        return cls(None, None, None, "ERROR", f"{type(exc).__name__}: {exc}")

    @property
    def ok(self) -> bool:
        return self.status == "PASS"


def combine(parts: Mapping[str, Result]) -> Result:
    """One result from named parts (e.g. ``symbolic`` and ``enumeration``): ERROR if any part
    erred, else FAIL if any failed, else PASS; values keyed by part."""
    statuses = {r.status for r in parts.values()}
    status = "ERROR" if "ERROR" in statuses else "FAIL" if "FAIL" in statuses else "PASS"
    return Result({k: r.expected for k, r in parts.items()}, {k: r.measured for k, r in parts.items()},
                  {k: r.tolerance for k, r in parts.items()}, status,
                  " | ".join(f"{k} [{r.status}]: {r.evidence}" for k, r in parts.items()))


def jsonable(x):
    """Plain JSON types: sympy numbers and expressions become strings, numpy scalars python numbers."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in (sorted(x, key=str) if isinstance(x, (set, frozenset)) else x)]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else str(float(x))
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, sp.Basic):
        return str(x)
    return str(x)
