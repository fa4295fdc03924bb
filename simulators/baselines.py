"""Three baselines of the IS-corrected policy gradient on E2, exactly: the group mean (leave-one-out), VCPO's
OPOB and verl's Optimal Token Baseline (OTB).

One group of G outcomes ``o_i ~ pi_b`` gives

    g = (1/G) sum_i w_i sum_t A_{i,t} grad log pi_theta(o_{i,t}),    w_i = pi_theta(o_i) / pi_b(o_i),

with the advantages

* ``loo``: ``A_{i,t} = R_i - mean_{j != i} R_j`` (:func:`estimators.advantages`, the toolkit's default: IS
  with it is exactly unbiased, THEORY §1);
* ``opob``: ``A_{i,t} = R_i - b*``, ``b* = sum_j W_j R_j / (sum_j W_j + 1e-8)``,
  ``W_j = w_j^2 ||grad log pi_theta(o_j)||^2`` (:func:`estimators.baselines.opob_advantages`, VCPO's formula:
  no std division, a flat group left at ``R (1 - sum W / (sum W + 1e-8))``);
* ``otb``: ``A_{i,t} = G_{i,t} - B_t`` (:func:`estimators.baselines.otb_advantages`, verl's rule), with the
  reward on the last token (``G_{i,t} = R_i``), ``pi_t`` and ``sum_v pi_v^2`` of ``pi_theta`` (verl's
  ``old_log_probs`` and ``sum_pi_squared``: the policy whose gradient is taken) and the sequence ratio ``w_i``
  as the IS weight of every token (verl's sequence-level ``rollout_is_weights``, untruncated).

The group is one of the ``C(K + G - 1, G)`` count vectors over E2's K outcomes (:func:`simulators.core.configurations`,
as :func:`simulators.peers.exact_moments` enumerates them), so ``E g`` and ``E ||g||^2`` are exact sums.
Every E2 completion has H tokens, so OTB's zero tail (a unique longest trajectory) never applies here; and
the position-factorised policy puts each token's score in its own row, so ``||grad log pi(o)||^2 = sum_t
||grad log pi(o_t)||^2`` and OTB's last-token baseline is OPOB's ``b*``: the two differ at the earlier tokens.

``python -m simulators.baselines`` writes the E2 threshold case at Delta in :data:`DELTAS`
(``results/sim/baselines/e2.json``) and prints the table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.special import softmax

import estimators
from estimators.baselines import opob_advantages, otb_advantages
from schema.io import write_json
from schema.sources import results_root

from .core import configurations
from .delay import static_behaviour
from .delay_sweeps import make_instance
from .peers import CASES, token_view

BASELINES = ("loo", "opob", "otb")
DELTAS = (0.0, 0.5, 1.0, 2.0, 4.0)
DIGITS = 6
"""Significant digits of the written table (the JSON and the docs' copy of it)."""


def token_sum_pi_squared(env, theta) -> np.ndarray:
    """``(K, H)``: ``sum_v pi_theta(v | node_h)^2`` at every token of every E2 outcome."""
    if not hasattr(env, "nodes"):
        raise ValueError(f"token_sum_pi_squared needs an E2 environment (a token tree), got {type(env).__name__}")
    pi = softmax(env.check_theta(theta), axis=-1)
    return (pi**2).sum(-1)[env.nodes]


def group_gradients(view: dict, sum_pi_sq: np.ndarray, tuples: np.ndarray) -> dict[str, np.ndarray]:
    """``g`` of every group ``tuples (n, G)`` (outcome indices) under each of :data:`BASELINES`, each ``(n, P)``.

    ``view``: :func:`simulators.peers.token_view` at ``(theta, theta_b)``; ``sum_pi_sq``:
    :func:`token_sum_pi_squared` at ``theta``."""
    tuples = np.asarray(tuples)
    if tuples.ndim != 2 or tuples.shape[1] < 2:
        raise ValueError(f"tuples must have shape (n, G) with G >= 2, got {tuples.shape}")
    K, H = view["lp"].shape
    if sum_pi_sq.shape != (K, H):
        raise ValueError(f"sum_pi_sq must have shape {(K, H)}, got {sum_pi_sq.shape}")
    n, G = tuples.shape
    R = view["rewards"][tuples]
    log_w = (view["lp"] - view["lpb"]).sum(-1)[tuples]
    w = np.exp(log_w)
    S = view["tok_scores"][tuples]  # (n, G, H, P)
    t = torch.from_numpy
    adv = {"loo": np.repeat(estimators.advantages(R, "loo")[..., None], H, -1)}
    norms = (view["scores"][tuples] ** 2).sum(-1)
    opob = opob_advantages(t(R), t(log_w), t(norms), norm_by_std=False, flat_zero=False).numpy()
    adv["opob"] = np.repeat(opob[..., None], H, -1)
    token_r = np.zeros((n, G, H))
    token_r[..., -1] = R
    adv["otb"] = otb_advantages(t(token_r), torch.ones(n, G, H, dtype=torch.float64), t(view["lp"][tuples]),
                                t(sum_pi_sq[tuples]), t(np.repeat(w[..., None], H, -1))).numpy()
    return {k: np.einsum("ng,ngh,nghp->np", w, a, S) / G for k, a in adv.items()}


def exact_baseline_moments(env, theta, theta_b, G: int) -> dict[str, dict]:
    """Per baseline: the exact bias vector ``E g - grad J(theta)``, its norm, ``E ||g||^2``, the variance
    ``E ||g||^2 - ||E g||^2`` and ``along``, ``E g``'s coefficient along ``grad J`` (``E g . grad J / ||grad J||^2``:
    1 for an unbiased estimate), by enumeration of the groups of ``G`` outcomes drawn from ``pi_b``."""
    view = token_view(env, theta, theta_b)
    K = view["lp"].shape[0]
    counts, tuples, log_coef = configurations(G, K)
    pmf = np.exp(log_coef + counts @ view["log_p_b"])
    grads = group_gradients(view, token_sum_pi_squared(env, theta), np.asarray(tuples))
    out = {}
    for name, g in grads.items():
        mean = pmf @ g
        second = float(pmf @ (g**2).sum(-1))
        gJ = view["grad_J"]
        bias = mean - gJ
        out[name] = {"bias_vec": bias, "bias_norm": float(np.linalg.norm(bias)), "second_moment": second,
                     "variance": second - float(mean @ mean), "along": float(mean @ gJ / (gJ @ gJ))}
    return out


def _round(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def e2_table(deltas=DELTAS) -> list[dict]:
    """The E2 threshold case (:data:`simulators.peers.CASES`) at each static delay ``Delta``
    (``theta_b = theta - Delta u``): one row per (Delta, baseline), values to :data:`DIGITS` significant digits."""
    c = CASES["E2"]
    env, theta, _, u = make_instance(c["env"], c["instance"])
    grad_J_norm = float(np.linalg.norm(env.grad_J(theta)))
    rows = []
    for D in deltas:
        res = exact_baseline_moments(env, theta, static_behaviour(theta, D, u), c["G"])
        for name in BASELINES:
            r = res[name]
            rows.append({"Delta": float(D), "baseline": name, "bias_norm": _round(r["bias_norm"]),
                         "second_moment": _round(r["second_moment"]), "variance": _round(r["variance"]),
                         "along": _round(r["along"]), "grad_J_norm": _round(grad_J_norm)})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table as the docs show it."""
    lines = ["| Delta | baseline | bias ‖E g − ∇J‖ | E‖g‖² | variance | E g along ∇J |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['Delta']:g} | {r['baseline']} | {r['bias_norm']!r} | {r['second_moment']!r} | {r['variance']!r} "
              f"| {r['along']!r} |" for r in rows]
    return "\n".join(lines)


def default_out() -> Path:
    return results_root() / "sim" / "baselines" / "e2.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulators.baselines", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="output file (default results/sim/baselines/e2.json)")
    a = p.parse_args(argv)
    rows = e2_table()
    out = a.out if a.out is not None else default_out()
    c = CASES["E2"]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"case": "E2", "env": c["env"], "instance": c["instance"], "G": c["G"],
                     "deltas": list(DELTAS), "baselines": list(BASELINES), "digits": DIGITS, "rows": rows})
    print(markdown(rows))
    print(f"baselines: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
