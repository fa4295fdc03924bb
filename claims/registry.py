"""Registry of the 30 machine-checkable claims of THEORY.md §5 (19: an addition, stated in §7; 20-22: §8;
23 and 25: published claims, CTPO's and Trust Region Masking's, checked; 24 and 26: the group-size law and the
exact model's rate for it, on the LLM's own policies, read off the committed frozen-pair measurement; 27-30: §9,
the batch's mean squared error at B prompts x G completions).

Each :class:`Claim` names its check, a function of ``quick`` returning a
:class:`~claims.result.Result`; the checks live by family:

* :mod:`claims.class_optimality`  class C_eps and the optimality of GMC (claims 1-4)
* :mod:`claims.closed_forms`      key inequalities and closed forms (5, 6, 10, 15)
* :mod:`claims.delay_terms`       delay orders, Theorem 2's terms, Corollary 3, async SGD (11, 12, 13, 17)
* :mod:`claims.enumeration`       claims checked by exact enumeration (7, 8, 9, 14, 16, 18)
* :mod:`claims.optimizers`        claim 17's ordering under Adam, AdamW, clipping and long horizons (19)
* :mod:`claims.normalised`        normalising optimisers: scale invariance, sign-error bounds, ordering (20-22)
* :mod:`claims.prefix`            CTPO's prefix-ratio claim: unbiased, lower variance than the sequence ratio (23)
* :mod:`claims.trm_bounds`        Trust Region Masking's bounds on the surrogate's error vs the exact error (25)
* :mod:`claims.llm_pairs`         the group-size law at frozen pairs of the LLM's policies (24, 26)
* :mod:`claims.budget`            §9: the batch's MSE at (B, G), the share bound, GMC against IS, the split (27-30)

Each check keeps its tolerances beside it. An exception inside a check becomes an ERROR
row, never a crash of the whole table.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import budget as bd
from . import class_optimality as co
from . import closed_forms as cf
from . import delay_terms as dt
from . import enumeration as en
from . import llm_pairs as lp
from . import normalised as nm
from . import optimizers as op
from . import prefix as px
from . import trm_bounds as trm
from .result import Result, jsonable

KINDS = ("symbolic", "exact", "monte-carlo", "numeric")  # a claim's kind joins one or more with "+"
KEYS = ("id", "title", "theory_ref", "kind", "expected", "measured", "tolerance", "status", "seconds", "evidence",
        "refuted_at")


@dataclass(frozen=True)
class Claim:
    id: int
    title: str
    theory_ref: str
    kind: str
    module: object  # the family module holding ``check_<id>`` (looked up at run time: a test may replace it)

    @property
    def check(self) -> Callable[[bool], Result]:
        return getattr(self.module, f"check_{self.id}")

    def result(self, quick: bool = False) -> Result:
        """Run the check; an exception or a malformed answer becomes an ERROR result."""
        try:
            out = self.check(quick)
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed
            return Result.error(exc)
        if not isinstance(out, Result):
            return Result(None, None, None, "ERROR", f"check returned {out!r:.200}, not a Result")
        return out

    def run(self, quick: bool = False) -> dict:
        """:meth:`result` plus the claim's metadata and its wall time: one row of claims.json."""
        t0 = time.perf_counter()
        out = self.result(quick)
        seconds = time.perf_counter() - t0
        row = {"id": self.id, "title": self.title, "theory_ref": self.theory_ref, "kind": self.kind,
               "expected": out.expected, "measured": out.measured, "tolerance": out.tolerance,
               "status": out.status, "seconds": round(seconds, 3), "evidence": out.evidence,
               "refuted_at": list(out.refuted_at)}
        return jsonable(row)


CLAIMS: tuple[Claim, ...] = (
    Claim(1, "GMC mass = min(Wbar,1+eps); c <= w; g_GMC = lambda g_IS", "§2 (d); §5 #1", "symbolic+numeric", co),
    Claim(2, "Class C_eps: mask, trunc, GMC, c=1, SNIS in; IS, TIC-PPO out", "§2 Lemma 2; §5 #2", "numeric", co),
    Claim(3, "Thm 1: min beta_inf = min beta_1 = (Wbar-1-eps)_+; argmin GMC", "§2 Theorem 1; §5 #3", "numeric", co),
    Claim(4, "Pointwise beta_1: GMC <= trunc <= mask", "§2 table; §5 #4", "numeric", co),
    Claim(5, "(y-eps)_+ <= y^2/(4 eps), equality at y = 2 eps", "§3 key inequalities; §5 #5", "symbolic+numeric", cf),
    Claim(6, "E(Wbar-1)^4 = (mu4 + 3(G-1) sigma^4)/G^3", "§3; §5 #6", "symbolic+exact", cf),
    Claim(7, "TIC bias is G-invariant (leave-one-out)", "§3 table; §5 #7", "exact", en),
    Claim(8, "GMC mass bias non-increasing in G, <= sigma^2/(4 G eps), -> 0", "§3; §5 #8; §7", "exact+monte-carlo", en),
    Claim(9, "GMC rate worst-case tight (rare jump)", "§3 tightness; §5 #9", "exact", en),
    Claim(10, "TIC-mask worst case (1+eps)s2/(s2+eps^2); slopes -2 vs -1", "§3 tightness; §6 E4; §5 #10",
          "symbolic+numeric", cf),
    Claim(11, "eps-exponent of 4th-order delay term: GMC -2, TIC-mask -4", "§4 Theorem 2; §5 #11", "symbolic", dt),
    Claim(12, "Tuned bound: G^-2/5 (GMC), G^0 (TIC); eps, d, T exponents", "§4 Corollary 3; §5 #12",
          "symbolic+numeric", dt),
    Claim(13, "Delay orders under overlap: sigma^2~D^2, mu4~D^4, b_c=1~D", "§1 A5; §5 #13", "symbolic+exact", dt),
    Claim(14, "Zero-bias regime and activation thresholds", "§3; §5 #14; §7", "exact", en),
    Claim(15, "Lognormal closed forms: sigma^2, mu4, m_mask, m_trunc", "§5 #15; §6 E3", "symbolic+monte-carlo", cf),
    Claim(16, "GMC 2nd moment <= min(E||g_IS||^2, (1+eps)^2 M^2)", "§3 second moments; §5 #16", "exact", en),
    Claim(17, "Async SGD: realised bias <= Thm 2 term; GMC <= TIC-mask", "§4; §5 #17", "monte-carlo", dt),
    Claim(18, "Trajectory-ratio variance exponential in horizon H", "§5 #18; §6 E2", "symbolic+exact", en),
    Claim(19, "Claim 17's GMC <= TIC-mask under SGD/Adam/AdamW+clip, H <= 16", "§7 claim 19; §5 #19",
          "exact+monte-carlo", op),
    Claim(20, "Scale invariance of signSGD / Adam(eps->0), bit for bit; fails where it should", "§8.1; §5 #20",
          "exact", nm),
    Claim(21, "Cantelli sign-error bound and §8.3's table vs exact per-coordinate laws", "§8.2-8.3; §5 #21",
          "exact", nm),
    Claim(22, "Sign law of GMC = IS's; TOPR, TIC-trunc sign efficiency >= IS's at chi^2 >= 1", "§8.3; §5 #22",
          "exact", nm),
    Claim(23, "CTPO's claim: prefix ratio unbiased, variance < full-sequence ratio's", "§5 #23", "exact", px),
    Claim(24, "LLM frozen pairs: GMC's bias falls to 0 in G (G = 2 -> 128), TIC-trunc's persists", "§7; §5 #24",
          "monte-carlo", lp),
    Claim(25, "TRM's bounds on |J - J_roll - L| >= the exact error (E2, H <= 16)", "§5 #25", "exact", trm),
    Claim(26, "LLM frozen pairs: G_half = a chi2^b with E3's exponent b", "§7; §5 #26", "monte-carlo", lp),
    Claim(27, "Batch MSE = ||b||^2 + V_b/B + S_w/(BG); per-sample S_w is Hoeffding's, b and V_b G-free",
          "§9 Props 9.1-9.2; §5 #27", "symbolic+exact", bd),
    Claim(28, "Within term <= kappa (c_max/(BG)) M^2 E[mass]: the share column bounds S_w/(BG)", "§9 Prop 9.4; §5 #28",
          "exact", bd),
    Claim(29, "GMC's sqrt(S_w), sqrt(V_b) within the stated distance of IS's", "§9 Prop 9.3; §5 #29", "exact", bd),
    Claim(30, "At fixed N: TOPR's MSE flat across splits, GMC's higher at the largest G (E1, E5)", "§9; §5 #30",
          "exact", bd),
)

BY_ID: dict[int, Claim] = {c.id: c for c in CLAIMS}


def valid_ids() -> str:
    """The registered ids as runs (``1..30``; a gap, were one left, shows as ``1..23, 25``)."""
    runs: list[list[int]] = []
    for i in BY_ID:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}..{b}" if b > a else str(a) for a, b in runs)


def get_claim(cid: int) -> Claim:
    try:
        return BY_ID[cid]
    except (KeyError, TypeError):
        raise ValueError(f"unknown claim id {cid!r}; valid ids: {valid_ids()}") from None


def run_claims(ids=None, quick: bool = False, on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the claims ``ids`` (all by default) in order; ``on_row`` sees each row as it completes."""
    rows = []
    for cid in (ids if ids is not None else BY_ID):
        row = get_claim(cid).run(quick)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
