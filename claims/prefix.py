"""Claim 23 (CTPO's claim, checked): the cumulative prefix ratio is an unbiased correction with
strictly lower variance than the full-sequence ratio.

The prefix correction weights token t's score by the ratio of the prefix up to t,
``g_prefix = (1/G) sum_i A_i sum_t (prod_{s <= t} r_{i,s}) grad log pi(o_{i,t})`` (CTPO without its
clip: :func:`estimators.losses.ctpo_loss` at ``delta`` = :data:`UNCLIPPED`, where no prefix
log-ratio reaches the bound); the full-sequence ratio is IS, ``(1/G) sum_i w_i A_i grad log pi(o_i)``.
Both are measured exactly, by enumeration of the groups, with leave-one-out advantages
(:func:`simulators.peers.exact_moments`, the F9 frontier's measurement) on E1 (one token) and E2
(the token tree, H = 4, reward at the end) under a static delay.

Stated as: two parts, each checked at every point with Delta > 0 (on-policy every ratio is 1 and
the two estimators coincide):

* unbiased: ``||E g_prefix - grad J(theta)|| <= BIAS_TOL``;
* strictly lower variance: ``tr Cov(g_prefix) < tr Cov(g_IS)``.

What the toolkit expects before computing (and why the check can fail): with a reward paid at the
end, ``E_b[w_{1:T} R grad log pi_t] = E_b[w_{1:t} E_pi[R | o_{<=t}] grad log pi_t]``, so dropping the
suffix ratio replaces ``E_pi[R | prefix]`` by ``E_b[R | prefix]``: per-decision weights are unbiased
for a reward that decomposes over tokens (or with H = 1, where prefix and sequence coincide), not
for a terminal reward on H > 1. Every point and tolerance is fixed here; ``quick`` drops points only.
"""
from __future__ import annotations

import numpy as np

from simulators.delay import static_behaviour
from simulators.delay_sweeps import make_instance
from simulators.peers import CASES, exact_moments, token_view

from .common import EPS
from .result import Result

UNCLIPPED = 1e6
"""CTPO's log-space bound coefficient at which no prefix log-ratio of E1 / E2 is clipped (|L_t| < 1e6)."""
BIAS_TOL = 1e-10  # exact enumeration: an unbiased estimator's bias is rounding only (pmf sums of ~4e3 terms)
DELTAS = (0.5, 1.0, 2.0, 3.0, 4.0)
QUICK_DELTAS = (0.5, 4.0)  # the smallest delay kept: the ledger's counterexample lies there


def _variance(r: dict, grad_J: np.ndarray) -> float:
    mean = np.asarray(r["bias_vec"]) + grad_J
    return float(r["second_moment"] - mean @ mean)


def prefix_points(quick: bool = False) -> list[dict]:
    """Per (case, Delta): the exact bias and variance of the prefix correction, of IS, and of CTPO at its
    default clip."""
    out = []
    for case in ("E1", "E2"):
        c = CASES[case]
        env, theta, _, u = make_instance(c["env"], c["instance"])
        for D in (QUICK_DELTAS if quick else DELTAS):
            view = token_view(env, theta, static_behaviour(theta, D, u))
            g = view["grad_J"]
            pre = exact_moments(view, c["G"], EPS, "ctpo", {"delta": UNCLIPPED})
            full = exact_moments(view, c["G"], EPS, "is")
            ctpo = exact_moments(view, c["G"], EPS, "ctpo")
            out.append({"case": case, "H": int(view["lp"].shape[1]), "Delta": D,
                        "prefix_bias": pre["bias_norm"], "prefix_var": _variance(pre, g),
                        "is_bias": full["bias_norm"], "is_var": _variance(full, g),
                        "ctpo_bias": ctpo["bias_norm"], "ctpo_var": _variance(ctpo, g),
                        "grad_J_norm": float(np.linalg.norm(g))})
    return out


def check_23(quick: bool = False) -> Result:
    """CTPO's claim: the prefix correction is unbiased, with strictly lower variance than the sequence ratio."""
    pts = prefix_points(quick)
    biased = [p for p in pts if p["prefix_bias"] > BIAS_TOL]
    not_lower = [p for p in pts if not p["prefix_var"] < p["is_var"]]
    rows = "; ".join(f"{p['case']} (H = {p['H']}) Delta {p['Delta']:g}: prefix bias {p['prefix_bias']:.4g} "
                     f"(||grad J|| {p['grad_J_norm']:.4g}), var prefix {p['prefix_var']:.4g} vs IS "
                     f"{p['is_var']:.4g}; CTPO (delta 0.2) bias {p['ctpo_bias']:.4g}, var {p['ctpo_var']:.4g}"
                     for p in pts)
    holds_bias = sorted({f"{p['case']}" for p in pts if p["prefix_bias"] <= BIAS_TOL})
    holds_var = sorted({f"{p['case']}" for p in pts if p["prefix_var"] < p["is_var"]})
    verdict = ("refuted" if biased or not_lower else "holds")
    return Result.of(
        not biased and not not_lower,
        f"prefix bias <= {BIAS_TOL:g} and prefix variance < IS variance at every point with Delta > 0",
        f"biased at {len(biased)} of {len(pts)} points, variance not strictly lower at {len(not_lower)} of {len(pts)}",
        f"{BIAS_TOL:g}",
        f"[stated as: CTPO's claim; verdict: {verdict}] unbiased where: {', '.join(holds_bias) or 'nowhere'} "
        f"(H = 1: prefix = sequence); strictly lower variance where: {', '.join(holds_var) or 'nowhere'} "
        f"(E1's prefix is the whole sequence, so the two are equal there, not lower). Counterexamples: "
        + ("; ".join(f"{p['case']} Delta {p['Delta']:g} (bias {p['prefix_bias']:.4g})" for p in biased[:3]) or "none")
        + ". " + rows, refuted_at=counterexample(not_lower, biased))


def counterexample(not_lower: list[dict], biased: list[dict]) -> tuple:
    """The one point the ledger records for a refutation (:mod:`claims.ledger`): the first point, in the
    check's fixed order (E1 before E2, Delta ascending), where each part fails (the variance not strictly
    lower; the bias above rounding), named together, with the values found there."""
    if not not_lower and not biased:
        return ()
    name, values = [], {}
    if not_lower:
        p = not_lower[0]
        name.append(f"{p['case']} Delta={p['Delta']:g} (variance)")
        values.update({f"{p['case']} prefix variance": round(p["prefix_var"], 6),
                       f"{p['case']} IS variance": round(p["is_var"], 6)})
    if biased:
        p = biased[0]
        name.append(f"{p['case']} Delta={p['Delta']:g} (bias)")
        values[f"{p['case']} prefix bias"] = round(p["prefix_bias"], 6)
    return ({"point": "; ".join(name), "values": values},)


__all__ = ["BIAS_TOL", "UNCLIPPED", "check_23", "prefix_points"]
