"""Claim 25 (Trust Region Masking's bounds, checked): every bound the paper states on the surrogate's error
is at least the exact error.

Li et al., "Trust Region Masking for Long-Horizon LLM Reinforcement Learning" (arXiv 2512.23075; the
version read and its formulas: :mod:`bounds.trust_region`) bound
``|Error| = |J(pi_theta) - J(pi_roll) - L(pi_theta)|``, with ``L = E_roll[R sum_t (rho_t - 1)]`` (the form
every proof bounds: the paper's ``L`` with baseline ``b = J(pi_roll)``), by the classical O(T^2) bound, the
Pinsker-Marginal bounds (KL and TV, and the O(T^{3/2}) form ``(4/3) T^{3/2} delta``), the Mixed bounds (KL and
TV, and the O(T) form ``2 T sqrt(delta D_KL^seq)``), the Coupling bound, the Adaptive bound and their minimum
``B^*``, each a function of ``delta = D_KL^{tok,max}`` (``max_{t, c_t} KL(pi_roll(.|c_t) || pi_theta(.|c_t))``
over every context) and the other divergences there.

Computed exactly (:func:`simulators.token_mdp.trust_region.trust_region_terms`: sums over the V^H responses
and the tree's contexts) with pi_roll = pi_b at static delays ``theta_b = theta - Delta u``:

* ``E2``: the threshold instance (:data:`simulators.peers.CASES`; V = 2, H = 4, terminal reward);
* ``long E2 H=8``, ``long E2 H=16``: the long-horizon E2 (:class:`~simulators.token_mdp.factorised.
  FactorisedTokenMDP`, V = 2, reward 1{every token right}) at theta with the right token at probability
  :data:`P0` at every position, ``u = grad J(theta)`` (pi_roll lags pi_theta along its ascent direction).

Stated as: the paper's theorems, at every point (instance, Delta): ``B >= |Error|`` for each bound B of
:data:`bounds.trust_region.BOUNDS` (the closed forms and the classical bound included). Exact values, so
the tolerance is rounding only. ``quick`` drops points only.
"""
from __future__ import annotations

import numpy as np

from bounds.trust_region import BOUNDS, trm_bounds
from simulators.delay import static_behaviour
from simulators.delay_sweeps import make_instance
from simulators.peers import CASES
from simulators.token_mdp.factorised import FactorisedTokenMDP, start_logits
from simulators.token_mdp.trust_region import trust_region_terms

from .result import Result

DELTAS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
QUICK_DELTAS = (0.1, 4.0)
LONG_HS = (8, 16)
QUICK_LONG_HS = (8,)
P0 = 0.8
"""The long-horizon E2's right-token probability at theta (the async_optimizers sweep's ``p0``)."""
TOL = 1e-12  # exact sums of at most 2^16 terms of size <= 1: a bound below |Error| by more is not rounding


def instances(quick: bool = False) -> list[tuple[str, object, np.ndarray, np.ndarray]]:
    """``(name, env, theta, direction)`` of each instance, in the check's order."""
    c = CASES["E2"]
    env, theta, _, u = make_instance(c["env"], c["instance"])
    out = [("E2", env, theta, u)]
    for H in (QUICK_LONG_HS if quick else LONG_HS):
        long_env = FactorisedTokenMDP(2, H)
        th = start_logits(2, H, P0)
        out.append((f"long E2 H={H}", long_env, th, long_env.grad_J(th)))
    return out


def trm_points(quick: bool = False) -> list[dict]:
    """Per (instance, Delta): the exact error, the divergences and every bound."""
    out = []
    for name, env, theta, u in instances(quick):
        for D in (QUICK_DELTAS if quick else DELTAS):
            t = trust_region_terms(env, theta, static_behaviour(theta, D, u))
            b = trm_bounds(t["T"], t["delta"], t["eps"], t["kl_seq"], t["tv_seq"], t["dbar"])
            out.append({"case": name, "Delta": D, **{k: v for k, v in t.items() if k != "dbar"},
                        "abs_error": abs(t["error"]), "bounds": b})
    return out


def violations(p: dict) -> list[str]:
    """The bounds below the exact ``|Error|`` at point ``p`` (beyond rounding)."""
    return [k for k in BOUNDS if p["bounds"][k] + TOL < p["abs_error"]]


def check_25(quick: bool = False) -> Result:
    """TRM's bounds: each bound of the paper is at least the exact |J - J_roll - L| at every point."""
    pts = trm_points(quick)
    bad = [(p, violations(p)) for p in pts if violations(p)]
    least = min(pts, key=lambda p: p["bounds"]["unified"] / p["abs_error"])
    rows = "; ".join(
        f"{p['case']} (T = {p['T']}) Delta {p['Delta']:g}: delta {p['delta']:.4g}, eps {p['eps']:.4g}, "
        f"|Error| {p['abs_error']:.4g}; B/|Error|: " + ", ".join(f"{k} {p['bounds'][k] / p['abs_error']:.3g}"
                                                               for k in BOUNDS) for p in pts)
    refuted = ()
    if bad:
        p, names = bad[0]
        refuted = ({"point": f"{p['case']} Delta={p['Delta']:g}",
                    "values": {"|Error|": round(p["abs_error"], 6),
                               **{f"B_{k}": round(p["bounds"][k], 6) for k in names}}},)
    q = pts[0]  # with A = R (b = 0), L gains T J(pi_roll) (bounds.trust_region): the Remark's equivalence fails
    b0 = abs(q["error"] - q["T"] * q["J_roll"])
    return Result.of(
        not bad, f"every bound >= |Error| at every point ({len(BOUNDS)} bounds)",
        f"violated at {len(bad)} of {len(pts)} points; least B^*/|Error| "
        f"{least['bounds']['unified'] / least['abs_error']:.3g} ({least['case']} Delta {least['Delta']:g})", f"{TOL:g}",
        f"[stated as: the paper's theorems; verdict: {'refuted' if bad else 'holds'}] L = E_roll[R sum_t (rho_t - 1)] "
        f"(the paper's L at b = J(pi_roll)); with b = 0 (A = R) instead, |Error| at {q['case']} Delta {q['Delta']:g} "
        f"is {b0:.4g} against B^* {q['bounds']['unified']:.4g} (not checked: the bounds are proved for "
        f"b = J(pi_roll)). "
        + rows, refuted_at=refuted)


__all__ = ["DELTAS", "P0", "TOL", "check_25", "instances", "trm_points", "violations"]
