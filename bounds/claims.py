"""Registry of the 18 machine-checkable claims of THEORY.md §5.

Each :class:`Claim` runs its check and returns a record with ``expected``,
``measured``, ``tolerance``, ``status`` (PASS, FAIL, ERROR or NOT-RUN) and a line of
``evidence``. Claims 1-5 and 10-12 are checked here (:mod:`bounds.checks`). Claims
7, 8, 9, 13, 14, 16, 17, 18 and the Monte Carlo / enumeration parts of 6 and 15 come
from ``simulators.checks.CHECKS`` (``{claim id: check(quick) -> dict}``, issue 4);
while that module or an entry is missing, they report NOT-RUN. An exception inside
a check becomes an ERROR row, never a crash of the whole table.
"""
from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import sympy as sp

from . import checks

STATUSES = ("PASS", "FAIL", "ERROR", "NOT-RUN")
KINDS = ("symbolic", "exact", "monte-carlo", "numeric")  # a claim's kind joins one or more with "+"
NEEDS_SIMULATORS = "needs simulators (issue 4)"
KEYS = ("id", "title", "theory_ref", "kind", "expected", "measured", "tolerance", "status", "seconds", "evidence")


@dataclass(frozen=True)
class Claim:
    id: int
    title: str
    theory_ref: str
    kind: str
    statement: str  # THEORY's expected result, in one line (shown when a part does not run)
    local: Callable[[bool], dict] | None = None  # the check run here (all of it, or its symbolic part)
    simulated: bool = False  # simulators.checks supplies (a part of) the check

    def check(self, quick: bool = False) -> dict:
        """Run the claim: ``{expected, measured, tolerance, status, evidence}``."""
        local = _guard(self.local, quick) if self.local is not None else None
        sim = _simulator_part(self.id, quick) if self.simulated else None
        if sim is None:
            return local
        if sim["status"] == "NOT-RUN":
            sim = {**sim, "expected": self.statement}
        if local is None:
            return sim
        return _combine(local, sim)

    def run(self, quick: bool = False) -> dict:
        """:meth:`check` plus the claim's metadata and its wall time: one row of claims.json."""
        t0 = time.perf_counter()
        out = self.check(quick)
        seconds = time.perf_counter() - t0
        row = {"id": self.id, "title": self.title, "theory_ref": self.theory_ref, "kind": self.kind,
               **{k: out.get(k) for k in ("expected", "measured", "tolerance", "status")},
               "seconds": round(seconds, 3), "evidence": out.get("evidence", "")}
        return jsonable(row)


def _fail_record(status: str, evidence: str) -> dict:
    return {"expected": None, "measured": None, "tolerance": None, "status": status, "evidence": evidence}


def _guard(fn: Callable[[bool], dict], quick: bool) -> dict:
    """Call a check; an exception or a malformed answer becomes an ERROR record."""
    try:
        out = fn(quick)
    except Exception as exc:  # noqa: BLE001 - reported, never swallowed
        return _fail_record("ERROR", f"{type(exc).__name__}: {exc}")
    if not isinstance(out, Mapping) or out.get("status") not in STATUSES:
        return _fail_record("ERROR", f"check returned {out!r:.200}, not a dict with a status in {STATUSES}")
    return {"expected": out.get("expected"), "measured": out.get("measured"), "tolerance": out.get("tolerance"),
            "status": out["status"], "evidence": str(out.get("evidence", ""))}


def simulator_checks() -> tuple[Mapping | None, str]:
    """``(simulators.checks.CHECKS, "")``, or ``(None, why)`` when it is not there yet.

    An import failing inside an existing module is re-raised: that is a bug, not absence.
    """
    try:
        mod = importlib.import_module("simulators.checks")
    except ModuleNotFoundError as exc:
        if exc.name in ("simulators", "simulators.checks"):
            return None, NEEDS_SIMULATORS
        raise
    found = getattr(mod, "CHECKS", None)
    if not isinstance(found, Mapping):
        return None, f"{NEEDS_SIMULATORS}: simulators.checks defines no CHECKS mapping"
    return found, ""


def _simulator_part(cid: int, quick: bool) -> dict:
    try:
        found, why = simulator_checks()
    except Exception as exc:  # noqa: BLE001
        return _fail_record("ERROR", f"importing simulators.checks failed: {type(exc).__name__}: {exc}")
    if found is None:
        return _fail_record("NOT-RUN", why)
    if cid not in found:
        return _fail_record("NOT-RUN", f"{NEEDS_SIMULATORS}: simulators.checks.CHECKS has no claim {cid}")
    return _guard(found[cid], quick)


def _combine(local: dict, sim: dict) -> dict:
    """Symbolic part (here) and simulation part (simulators.checks) of claims 6 and 15."""
    statuses = {local["status"], sim["status"]}
    if "ERROR" in statuses:
        status = "ERROR"
    elif "FAIL" in statuses:
        status = "FAIL"
    else:  # PASS, or PASS with the simulation part not run yet
        status = local["status"]
    note = (f"MC part NOT-RUN ({sim['evidence']})" if sim["status"] == "NOT-RUN"
            else f"simulation [{sim['status']}]: {sim['evidence']}")
    return {
        "expected": {"symbolic": local["expected"], "simulation": sim["expected"]},
        "measured": {"symbolic": local["measured"], "simulation": sim["measured"]},
        "tolerance": {"symbolic": local["tolerance"], "simulation": sim["tolerance"]},
        "status": status,
        "evidence": f"symbolic [{local['status']}]: {local['evidence']} | {note}",
    }


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


# ------------------------------------------------------------------------------------- registry

CLAIMS: tuple[Claim, ...] = (
    Claim(1, "GMC mass = min(Wbar,1+eps); c <= w; g_GMC = lambda g_IS", "§2 (d); §5 #1", "symbolic+numeric",
          "mass = min(Wbar,1+eps) to 1e-12, c <= w, cosine 1", checks.check_1),
    Claim(2, "Class C_eps: mask, trunc, GMC, c=1, SNIS in; IS, TIC-PPO out", "§2 Lemma 2; §5 #2", "numeric",
          "||g|| <= (1+eps) max||X_i|| for members; counterexamples for IS, TIC-PPO", checks.check_2),
    Claim(3, "Thm 1: min beta_inf = min beta_1 = (Wbar-1-eps)_+; argmin GMC", "§2 Theorem 1; §5 #3", "numeric",
          "LP value and argmin match to 1e-7; argmin unique", checks.check_3),
    Claim(4, "Pointwise beta_1: GMC <= trunc <= mask", "§2 table; §5 #4", "numeric",
          "0 violations on random w", checks.check_4),
    Claim(5, "(y-eps)_+ <= y^2/(4 eps), equality at y = 2 eps", "§3 key inequalities; §5 #5", "symbolic+numeric",
          "argmax 2*eps, value 1", checks.check_5),
    Claim(6, "E(Wbar-1)^4 = (mu4 + 3(G-1) sigma^4)/G^3", "§3; §5 #6", "symbolic+exact",
          "identity exact; E1 exact enumeration agrees", checks.check_6_symbolic, simulated=True),
    Claim(7, "TIC bias is G-invariant (leave-one-out)", "§3 table; §5 #7", "exact",
          "||b_mask||, ||b_trunc|| constant over G=2..128 (rel diff < 1e-10)", simulated=True),
    Claim(8, "GMC bias non-increasing in G, <= sigma^2/(4 G eps), -> 0", "§3; §5 #8", "exact+monte-carlo",
          "m_GMC(G) non-increasing; G m_GMC <= sigma^2/(4 eps); ||b|| <= M m; slope <= -1", simulated=True),
    Claim(9, "GMC rate worst-case tight (rare jump)", "§3 tightness; §5 #9", "exact",
          "4 G eps m / sigma^2 in [0.999, 1] for G=1..64, p=1e-6", simulated=True),
    Claim(10, "TIC-mask worst case (1+eps)s2/(s2+eps^2); slopes -2 vs -1", "§3 tightness; §6 E4; §5 #10",
          "symbolic+numeric", "slopes -2 (mask) and -1 (Scarf); squared -4 vs -2", checks.check_10),
    Claim(11, "eps-exponent of 4th-order delay term: GMC -2, TIC-mask -4", "§4 Theorem 2; §5 #11", "symbolic",
          "-2 (GMC), -4 (TIC-mask)", checks.check_11),
    Claim(12, "Tuned bound: G^-2/5 (GMC), G^0 (TIC); eps, d, T exponents", "§4 Corollary 3; §5 #12",
          "symbolic+numeric", "G -2/5 | 0; eps -2/5 | -4/5; d 4/5; T -4/5; slope -0.400", checks.check_12),
    Claim(13, "Delay orders under overlap: sigma^2~D^2, mu4~D^4, b_c=1~D", "§1 A5; §5 #13", "symbolic+exact",
          "log-log slopes 2, 4, 1 as Delta -> 0", simulated=True),
    Claim(14, "Zero-bias regime below the activation threshold", "§3; §5 #14", "exact",
          "biases exactly 0 below Delta_crit(eps), positive above", simulated=True),
    Claim(15, "Lognormal closed forms: sigma^2, mu4, m_mask, m_trunc", "§5 #15; §6 E3", "symbolic+monte-carlo",
          "closed forms exact; E3 MC (2e6 samples) agrees to 3 decimals", checks.check_15_symbolic, simulated=True),
    Claim(16, "GMC 2nd moment <= min(E||g_IS||^2, (1+eps)^2 M^2)", "§3 second moments; §5 #16", "exact",
          "holds exactly on E1/E2", simulated=True),
    Claim(17, "Async SGD: realised bias <= Thm 2 term; GMC <= TIC-mask", "§4; §5 #17", "monte-carlo",
          "mean ||b_t||^2 <= D; GMC <= TIC-mask, gap grows as eps down, d up", simulated=True),
    Claim(18, "Trajectory-ratio variance exponential in horizon H", "§5 #18; §6 E2", "symbolic+exact",
          "log(1+sigma^2) linear in H = 1..8", simulated=True),
)

BY_ID: dict[int, Claim] = {c.id: c for c in CLAIMS}


def get_claim(cid: int) -> Claim:
    try:
        return BY_ID[cid]
    except KeyError:
        raise ValueError(f"unknown claim id {cid!r}; valid ids: 1..{len(CLAIMS)}") from None


def run_claims(ids=None, quick: bool = False, on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the claims ``ids`` (all by default) in order; ``on_row`` sees each row as it completes."""
    rows = []
    for cid in (ids if ids is not None else BY_ID):
        row = get_claim(cid).run(quick)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
