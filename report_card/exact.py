"""The exact parts of the card: membership in C_eps, and bias and second moment on E1 and E2.

Membership (trajectory schemes): the registration's declared supremum of a group's mass
(:meth:`estimators.Scheme.group_mass_sup`) against the toolkit's own counterexample search
(:func:`simulators.peers.grid_max_mass`, claim 2's grid of ratio vectors, G = 3). A search that
finds a larger mass than declared proves the declaration wrong; one that finds a smaller mass
does not contradict it (a grid need not reach a supremum).

Bias and second moment: :func:`simulators.peers.exact_moments` (enumeration; Monte Carlo,
:func:`simulators.peers.mc_moments`, for a batch-coupled correction with B > 1 groups) on the
E1 and E2 instances of F9 (:data:`simulators.peers.CASES`) at the frontier's deltas
(:data:`simulators.peers.DELTAS`), exactly as ``python -m simulators.sweep peers`` computes each
row. A correction the committed sweep holds is read from ``results/sim/peers`` (through
:func:`claims.measures.load_peers`), not recomputed. Its place on F9's frontier:
:func:`claims.measures.frontier` and :func:`claims.measures.dominators` among the committed rows
of the same (environment, delay).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

import estimators
from estimators.losses import is_batch_coupled

from .load import EPS, Correction

SUP_TOL = 1e-9
"""Relative slack of the membership check: the search's mass may exceed the declared supremum by
float rounding only."""


def membership(corr: Correction, eps: float = EPS, prompts_per_step=(1, 8)) -> dict:
    """Declared supremum and class membership against the toolkit's search, per batch size."""
    from simulators.peers import grid_max_mass

    if corr.level != "trajectory":
        return {"applies": False, "why": "a token-level loss has no trajectory weights c_i, so no group mass: "
                                         "C_eps (THEORY §2) is a class of trajectory weightings"}
    spec = estimators.get_scheme(corr.name)
    rows = []
    for B in prompts_per_step if spec.batch_coupled else (1,):
        sup = spec.group_mass_sup(eps, B)
        found, arg = grid_max_mass(corr.name, eps, 3, B)
        wrong = found > sup * (1 + SUP_TOL) + SUP_TOL
        rows.append({"batch_groups": B, "declared_sup": float(sup), "search_max": float(found), "argmax": arg,
                     "declaration_wrong": bool(wrong), "member_declared_sup": bool(sup <= 1 + eps),
                     "member_by_search": bool(found <= 1 + eps + SUP_TOL)})
    in_class_wrong = bool(spec.in_class) != rows[0]["member_declared_sup"]
    return {"applies": True, "eps": eps, "rows": rows, "in_class_declared": bool(spec.in_class),
            "in_class_flag_wrong": in_class_wrong, "declaration_wrong": any(r["declaration_wrong"] for r in rows)}


def committed_peers() -> pd.DataFrame:
    from claims.measures import load_peers

    return load_peers()


def moments(corr: Correction, committed: pd.DataFrame | None = None) -> pd.DataFrame:
    """The correction's rows of the peers table (F9): read when the committed sweep holds it,
    computed with the sweep's own functions and settings otherwise."""
    committed = committed_peers() if committed is None else committed
    have = committed[committed["scheme"] == corr.name]
    if len(have) and not corr.is_new:
        return have.assign(source="results/sim/peers (committed)")
    return _compute(corr, committed).assign(source="computed for this card (simulators.peers)")


def _compute(corr: Correction, committed: pd.DataFrame) -> pd.DataFrame:
    from simulators.delay import static_behaviour
    from simulators.delay_sweeps import make_instance
    from simulators.peers import (
        CASES,
        DELTAS,
        SETTINGS,
        exact_moments,
        grid_max_mass,
        mc_moments,
        options_for,
        token_view,
    )
    from simulators.sweep_spec import derive_seed

    fixed = SETTINGS["peers"]["full"]["fixed"]
    seeds = SETTINGS["peers"]["full"]["seeds"]
    name, rows = corr.name, []
    spec = estimators.SCHEMES.get(name)
    for case_name, case in CASES.items():
        if corr.level == "token" and case["env"] != "token_mdp":
            continue  # as the sweep: token-level losses on E2 only
        env, theta, _, u = make_instance(case["env"], case["instance"])
        for D in DELTAS:
            setting = {"case": case_name, "Delta": D, "eps": EPS, **fixed}
            view = token_view(env, theta, static_behaviour(theta, D, u))
            H = view["lp"].shape[1]
            opts = options_for(name, H)
            runs = [(1, None)] + ([(fixed["batch_groups"], s) for s in seeds] if is_batch_coupled(name) else [])
            for B, seed in runs:
                if B == 1:
                    r = exact_moments(view, case["G"], EPS, name, opts)
                else:
                    rng = np.random.default_rng(derive_seed(seed, setting, B, sum(map(ord, name))))
                    r = mc_moments(view, case["G"], EPS, name, B, fixed["n_batches"], rng, opts)
                rows.append({"case": case_name, "Delta": D, "eps": EPS, "scheme": name, "level": corr.level,
                             "env": case["env"], "instance": case["instance"], "G": case["G"], "batch_groups": B,
                             "seed": -1 if seed is None else seed, **r,
                             "sup_mass": spec.group_mass_sup(EPS, B, **(opts or {})) if spec else math.nan,
                             "grid_max_mass": grid_max_mass(name, EPS, 3, B)[0] if spec else math.nan,
                             "in_class": bool(spec.member(EPS, B, **(opts or {}))) if spec else None})
    df = pd.DataFrame(rows)
    df["key"] = np.where(df["batch_groups"] > 1, df["scheme"] + " (B=" + df["batch_groups"].astype(str) + ")",
                         df["scheme"])
    return df


def frontier_place(mine: pd.DataFrame, committed: pd.DataFrame) -> list[dict]:
    """Per (environment, delay > 0): on the frontier of every estimator or not, and who dominates it
    (:func:`claims.measures.frontier`, :func:`claims.measures.dominators`), among the committed rows
    of the same panel (its own committed rows replaced by ``mine``)."""
    from claims.measures import dominators, frontier

    out = []
    for (env, D), m in mine.groupby(["env", "Delta"]):
        if D == 0:
            continue  # on-policy every scheme is IS
        others = committed[(committed["env"] == env) & (committed["Delta"] == D)
                           & (committed["scheme"] != m["scheme"].iloc[0])]
        panel = pd.concat([others, m[others.columns.intersection(m.columns)]], ignore_index=True)
        f = set(frontier(panel)["key"])
        for key in m["key"]:
            r = m[m["key"] == key].iloc[0]
            out.append({"env": env, "Delta": float(D), "key": key, "bias_norm": float(r["bias_norm"]),
                        "bias_norm_se": float(r["bias_norm_se"]), "second_moment": float(r["second_moment"]),
                        "second_moment_se": float(r["second_moment_se"]), "on_frontier": key in f,
                        "dominated_by": dominators(panel, key), "max_norm_ratio": float(r["max_norm_ratio"])})
    return out


def frontier_figure(mine: pd.DataFrame, committed: pd.DataFrame, out_dir, name: str) -> str | None:
    """F9's panels (:func:`figures.f9_peers_frontier.plot`) with this correction among the committed
    estimators; returns the PNG's file name."""
    from figures import f9_peers_frontier, style

    others = committed[committed["scheme"] != mine["scheme"].iloc[0]]
    df = pd.concat([others, mine[others.columns.intersection(mine.columns)]], ignore_index=True)
    fig = f9_peers_frontier.plot(df)
    envs = [e for e in f9_peers_frontier.ENV_TITLE if e in set(df["env"])]
    deltas = f9_peers_frontier._deltas(df)
    for j, env in enumerate(envs):  # the card's correction ringed in every panel
        for k, D in enumerate(deltas):
            m = mine[(mine["env"] == env) & (mine["Delta"] == D)]
            fig.axes[j * len(deltas) + k].plot(m["second_moment"], m["bias_norm"], linestyle="none", marker="o",
                                               markersize=15, markerfacecolor="none", markeredgecolor="black",
                                               markeredgewidth=1.4, zorder=6)
    fig.suptitle(f"F9 with {name} ringed in black", y=1.02)
    paths = style.save(fig, "frontier", out_dir)
    for p in paths[1:]:  # the card shows the PNG; the PDF twin is not kept
        p.unlink(missing_ok=True)
    return paths[0].name
