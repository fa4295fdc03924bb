"""The budget study's predictions from the exact model, computed before any run of the budget grid and before any
pair-MSE measurement (docs/PREREGISTRATION-BUDGET.md quotes them; ``studies/budget/predictions.json`` holds them).

    python -m studies.budget.predictions --write       # a few minutes on one core

Three computations, each seeded:

1. **E5, the grid's cells.** Asynchronous runs of the shared-parameter softmax model (H = 8, V = 4, r = 4: the
   cell where the LLM's collapse pattern appears, THEORY §8.5) with B groups of G per update at every (B, G) of the
   design, as ``studies.group_size.predictions.iso_sweep`` ran its iso-samples cells (Adam lr 1, d = 32, 150
   updates, 20 seeds, ``setting_seed = G``): per cell and arm the stable share (no collapse: J not below half its
   start over the last quarter), the learned share (stable and final J above the start by the studies' margin
   0.03) and the mean final J; gmc_cap (kappa 2, 4) and gmc, topr under SGD (lr 2, where GMC held in §8.5) at the
   mechanism cells; the d = 0 control per cell. E5 has one prompt: its groups differ only by their draws.
2. **§9 on E5, the MSE ordering of the splits.** At three frozen pairs (theta_b = theta_0 - delta u), THEORY §9's
   terms per correction and G: exact for the per-sample schemes (Proposition 9.2, :func:`claims.budget_terms.hoeffding`;
   TOPR is one here, the reward being binary), by Monte Carlo for GMC (8 replicates; b^2 from cross-products of
   replicate means, W from within-replicate variances, jackknife errors); the relative MSE at every cell
   (Proposition 9.1 with V_b = 0: one prompt) and, per N, the splits ranked by it.
3. **Power at 5 seeds** of each hypothesis' test (:mod:`studies.budget.rules`) under stated alternatives and under
   E5's own shares.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from . import rules
from .grids import CAP_KAPPAS, MECHANISM_CELLS, splits

HERE = Path(__file__).resolve().parent
OUT = HERE / "predictions.json"
FORMAT = "gmc-grpo-budget-predictions/1"
EPS = 0.2
ESTIMATORS = ("gmc", "tic_trunc", "topr", "is")
ADAM_LR, SGD_LR, D, T, SEEDS = 1.0, 2.0, 32, 150, tuple(range(20))
LEARN_MARGIN = 0.03


def _env():
    from simulators.shared_softmax import SharedSoftmaxMDP

    env = SharedSoftmaxMDP(4, 8, 4)
    return env, env.start(0.25)


# --------------------------------------------------------------------------- 1. E5 at the grid's cells


def e5_cells(seeds=SEEDS, T=T, progress=print) -> dict:
    from simulators.optim import OptimizerConfig
    from simulators.shared_softmax import collapsed, run_async

    env, theta0 = _env()
    J0 = float(env.J_batch(theta0[None])[0])
    adam, sgd = OptimizerConfig("adam", lr=ADAM_LR), OptimizerConfig("sgd", lr=SGD_LR)
    runs = [(B, G, e, "adam", {}) for B, G in splits() for e in (*ESTIMATORS, "d0")]
    runs += [(B, G, "gmc_cap", "adam", {"kappa": k}) for B, G in MECHANISM_CELLS for k in CAP_KAPPAS]
    runs += [(B, G, e, "sgd", {}) for B, G in MECHANISM_CELLS for e in ("gmc", "topr")]
    rows = []
    for i, (B, G, est, opt, params) in enumerate(runs):
        e, d = ("gmc", 0) if est == "d0" else (est, D)
        rec = run_async(env, theta0, e, adam if opt == "adam" else sgd, G, EPS, d, T, list(seeds), setting_seed=G,
                        prompts_per_step=B, params=params or None)
        stable = ~collapsed(rec["J"], J0, 0.5, 0.25)
        learned = stable & (rec["J"][:, -1] - J0 > LEARN_MARGIN)
        rows.append({"B": B, "G": G, "N": B * G, "estimator": est, "optimizer": opt, **params,
                     "stable_share": float(stable.mean()), "learned_share": float(learned.mean()),
                     "final_J": float(rec["J"][:, -1].mean()), "learned": learned.astype(int).tolist(),
                     "final_J_seeds": rec["J"][:, -1].round(6).tolist(), "n": len(seeds)})
        if progress and (i + 1) % 10 == 0:
            progress(f"E5 cells: {i + 1} of {len(runs)}")
    return {"env": {"V": 4, "H": 8, "rank": 4, "d": D, "T": T, "adam_lr": ADAM_LR, "sgd_lr": SGD_LR, "J0": J0,
                    "eps": EPS, "learned_margin": LEARN_MARGIN}, "rows": rows}


# --------------------------------------------------------------------------- 2. §9 on E5 frozen pairs

PAIR_DELTAS = (0.6, 1.5, 3.0)
PAIR_G = (4, 8, 16, 32)


def _gmc_mc(env, theta, tb, gJ, G, samples, reps, seed) -> dict:
    from stats import cross_bias, jackknife

    rng = np.random.default_rng([seed, G])
    groups = max(samples // G // reps, 8)
    means, wins = [], []
    for _ in range(reps):
        tok = env.sample(rng, tb, groups * G).reshape(groups, G, env.H)
        g, _ = env.group_estimate(tok, np.repeat(theta[None], groups, 0), np.repeat(tb[None], groups, 0), "gmc", EPS)
        g = g.reshape(groups, -1)
        means.append(g.mean(0))
        wins.append(float(((g - g.mean(0)) ** 2).sum(-1).sum() / (groups - 1)))
    n2 = float(gJ @ gJ)
    b2, b2_se = cross_bias(np.array(means), gJ)
    W, W_se = jackknife(lambda keep: float(np.mean([wins[i] for i in keep])), reps)
    return {"b_sq": b2 * n2, "b_sq_se": b2_se * n2, "W": W, "W_se": W_se}


def e5_mse(deltas=PAIR_DELTAS, Gs=PAIR_G, samples=2**17, reps=8, seed=0) -> dict:
    from claims.budget_terms import e5_arrays, exact_budget_per_sample

    env, theta = _env()
    u = np.random.default_rng([seed, 11]).normal(size=theta.shape)
    u /= np.linalg.norm(u)
    pairs = []
    for delta in deltas:
        tb = theta - delta * u
        lr, lpb, rew, S, gJ = e5_arrays(env, theta, tb)
        n2 = float(gJ @ gJ)
        terms = {e: {} for e in ESTIMATORS}
        for G in Gs:
            for e in ("is", "tic_trunc", "topr"):
                t = exact_budget_per_sample(lr, lpb, rew, S, gJ, G, EPS, e)
                terms[e][str(G)] = {"b_sq": t["b_sq"], "V_b": 0.0, "S_w": t["S_w"], "se": 0.0}
            m = _gmc_mc(env, theta, tb, gJ, G, samples, reps, seed)
            terms["gmc"][str(G)] = {"b_sq": m["b_sq"], "V_b": 0.0, "S_w": G * m["W"],
                                    "se": math.hypot(m["b_sq_se"], G * m["W_se"])}
        rel = {e: {f"{B}x{G}": (terms[e][str(G)]["b_sq"] + terms[e][str(G)]["S_w"] / (B * G)) / n2
                   for B, G in splits()} for e in ESTIMATORS}
        order = {e: {str(N): sorted([k for k in rel[e] if _n(k) == N], key=rel[e].get)
                     for N in sorted({_n(k) for k in rel[e]})} for e in ESTIMATORS}
        pairs.append({"delta": delta, "chi2": float(env.chi2_batch(theta[None], tb[None])[0]), "grad_J_sq": n2,
                      "terms": terms, "rel_mse": rel, "order_by_N": order})
    return {"env": {"V": 4, "H": 8, "rank": 4, "eps": EPS, "samples": samples, "reps": reps,
                    "note": "one prompt: V_b = 0; per-sample schemes exact, GMC by Monte Carlo"}, "pairs": pairs}


def _n(key: str) -> int:
    B, G = key.split("x")
    return int(B) * int(G)


# --------------------------------------------------------------------------- 3. power at 5 seeds


def _draw(rng, shares: dict, seeds: int) -> dict:
    return {c: (rng.random(seeds) < p).astype(float) for c, p in shares.items()}


def power(e5: dict, seeds=5, sims=200, n_boot=1000, n_perm=300, seed=0) -> dict:
    rng = np.random.default_rng([seed, 60])
    cells = splits()
    lg = {c: math.log2(c[1]) - 2 for c in cells}  # 0 at G = 4
    lb = {c: math.log2(c[0]) - 2 for c in cells}
    alt_b1 = {c: min(0.9, 0.2 + 0.2 * lg[c]) for c in cells}  # GMC: +0.2 per doubling of G at fixed B
    alt_b2 = {c: min(0.9, 0.2 + 0.2 * lb[c]) for c in cells}  # GMC: +0.2 per doubling of B; TOPR flat at 0.95
    topr = {c: 0.95 for c in cells}
    e5_gmc = {(r["B"], r["G"]): r["learned_share"] for r in e5["rows"] if r["estimator"] == "gmc"
              and r["optimizer"] == "adam"}
    e5_topr = {(r["B"], r["G"]): r["learned_share"] for r in e5["rows"] if r["estimator"] == "topr"
               and r["optimizer"] == "adam"}
    mech = list(MECHANISM_CELLS)
    sd = 0.025  # seed sd of the final held-out pc of the group-size grid's d = 0 runs (0.008-0.032 by G)
    out = {}

    def rate(fn, n=sims):
        return sum(fn() for _ in range(n)) / n

    def bs():
        return int(rng.integers(1 << 30))

    out["B1"] = {"alternative": "GMC's learned share 0.2 at G = 4, +0.2 per doubling of G, at every B",
                 "power": rate(lambda: rules.b1(_draw(rng, alt_b1, seeds), n_boot, bs())["p"] <= rules.ALPHA / 5),
                 "power_at_E5": rate(lambda: rules.b1(_draw(rng, e5_gmc, seeds), n_boot, bs())["extra_ok"])}
    out["B2"] = {"alternative": "GMC's learned share 0.2 at B = 4, +0.2 per doubling of B at every N; TOPR 0.95",
                 "power": rate(lambda: rules.b2(_draw(rng, alt_b2, seeds), _draw(rng, topr, seeds), n_boot,
                                                bs())["extra_ok"]),
                 "power_at_E5": rate(lambda: rules.b2(_draw(rng, e5_gmc, seeds), _draw(rng, e5_topr, seeds),
                                                      n_boot, bs())["extra_ok"])}
    out["B3"] = {"alternative": "gmc learns in 0.2, gmc_cap in 0.8 at both cells (either kappa)",
                 "power": rate(lambda: rules.b3({k: _draw(rng, {c: 0.8 for c in mech}, seeds) for k in CAP_KAPPAS},
                                                _draw(rng, {c: 0.2 for c in mech}, seeds), n_boot, bs())["extra_ok"])}

    def pc(slope):
        return {c: 0.65 + slope * lg[c] + rng.normal(0, sd, seeds) for c in cells}

    out["B4"] = {"alternative": f"final pc at d = 0 with seed sd {sd}: slope 0 per doubling of G at fixed N "
                                "(power to confirm 'N only') and -0.038 (the group-size grid's N = 128 cells; power "
                                "to refute)",
                 "power_confirm": rate(lambda: rules.b4(pc(0.0), n_boot, bs())["extra_ok"]),
                 "power_refute": rate(lambda: rules.b4(pc(-0.038), n_boot, bs())["refuted"])}

    def b5_draw():
        mse, outc = {}, {}
        for e in ESTIMATORS:
            for N in (64, 128, 512):
                sp = [c for c in cells if c[0] * c[1] == N]
                mse[(e, N)] = {c: float(i) for i, c in enumerate(sp)}  # the pairs rank the splits in this order
                shares = np.linspace(0.8, 0.2, len(sp))  # the grid's shares fall along the pairs' MSE rank
                outc[(e, N)] = {c: float((rng.random(seeds) < s).mean()) for c, s in zip(sp, shares)}
        return rules.b5(mse, outc, None, n_perm, bs())["p"] <= rules.ALPHA / 5

    out["B5"] = {"alternative": "within every (correction, N in {64, 128, 512}) the grid's learned shares fall "
                                "linearly from 0.8 to 0.2 along the pairs' MSE ranking",
                 "power": rate(b5_draw, max(20, sims // 4))}
    out["settings"] = {"seeds": seeds, "simulations": sims, "n_boot": n_boot, "n_perm": n_perm,
                       "level": "Holm's strictest step, alpha / 5, where the power says so"}
    return out


def compute(progress=print) -> dict:
    cells = e5_cells(progress=progress)
    return {"format": FORMAT, "eps": EPS, "e5_cells": cells, "e5_mse": e5_mse(), "power": power(cells)}


def summary_text(pred: dict) -> str:
    lines = []
    for r in pred["e5_cells"]["rows"]:
        k = f" kappa {r['kappa']:g}" if "kappa" in r else ""
        lines.append(f"E5 {r['B']:>2}x{r['G']:<2} {r['estimator']:9s}{k} {r['optimizer']}: learned "
                     f"{r['learned_share']:.2f} stable {r['stable_share']:.2f} J {r['final_J']:.3f}")
    for p in pred["e5_mse"]["pairs"]:
        lines.append(f"§9 on E5, chi2 {p['chi2']:.3g}: " + "; ".join(
            f"{e} best per N " + ",".join(v[0] for v in p["order_by_N"][e].values()) for e in ESTIMATORS))
    for h, v in pred["power"].items():
        if h != "settings":
            lines.append(f"power {h}: " + ", ".join(f"{k} {x}" for k, x in v.items() if k != "alternative"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.budget.predictions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(HERE.parents[1])}")
    args = ap.parse_args(argv)
    from schema.io import write_json

    pred = compute()
    if args.write:
        write_json(OUT, pred)
        print(f"wrote {OUT}")
    print(summary_text(pred))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def markdown(pred: dict) -> str:
    """The tables the pre-registration quotes, from ``predictions.json``."""
    rows = pred["e5_cells"]["rows"]
    out = ["| correction | learned share (stable share) at B x G = " + ", ".join(f"{B}x{G}" for B, G in splits())
           + " |", "|---|" + "---|"]
    for est in (*ESTIMATORS, "d0"):
        cells = {(r["B"], r["G"]): r for r in rows if r["estimator"] == est and r["optimizer"] == "adam"}
        out.append(f"| {'d = 0 control' if est == 'd0' else est} | " + ", ".join(
            f"{cells[c]['learned_share']:.2f} ({cells[c]['stable_share']:.2f})" for c in splits()) + " |")
    out.append("")
    out.append("| mechanism arm | 4x32 | 4x16 |")
    out.append("|---|---|---|")
    mech = [r for r in rows if r["estimator"] == "gmc_cap" or r["optimizer"] == "sgd"]
    for key in dict.fromkeys((r["estimator"], r.get("kappa"), r["optimizer"]) for r in mech):
        cells = {(r["B"], r["G"]): r for r in mech if (r["estimator"], r.get("kappa"), r["optimizer"]) == key}
        name = f"{key[0]}{f' kappa {key[1]:g}' if key[1] else ''} ({key[2]})"
        out.append(f"| {name} | " + " | ".join(f"{cells[c]['learned_share']:.2f} ({cells[c]['stable_share']:.2f})"
                                                for c in MECHANISM_CELLS) + " |")
    out.append("")
    out.append("| chi^2 | correction | rel. b^2 at G = 4 / 8 / 16 / 32 | S_w / ||grad J||^2 at G = 4 / 8 / 16 / 32 "
               "| splits by §9's MSE, best first, N = 64; 128; 512 |")
    out.append("|---|---|---|---|---|")
    for p in pred["e5_mse"]["pairs"]:
        n2 = p["grad_J_sq"]
        for e in ESTIMATORS:
            t = p["terms"][e]
            out.append(f"| {p['chi2']:.3g} | {e} | " + " / ".join(f"{t[g]['b_sq'] / n2:.3g}" for g in t) + " | "
                       + " / ".join(f"{t[g]['S_w'] / n2:.3g}" for g in t) + " | "
                       + "; ".join(" > ".join(p["order_by_N"][e][n]) for n in ("64", "128", "512")) + " |")
    return "\n".join(out)
