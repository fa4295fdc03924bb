"""The group-size study's predictions from the exact models, computed before any LLM measurement
(docs/PREREGISTRATION-GROUP-SIZE.md quotes them; ``studies/group_size/predictions.json`` holds them).

    python -m studies.group_size.predictions --write       # about a minute on one core

Three computations, each seeded:

1. **E3 (lognormal ratios), the mass-bias law.** For a sequence chi^2 ``s2`` the log-ratio is
   N(-D^2/2, D^2) with D^2 = log(1 + s2). TIC-trunc's mass bias is claim 15's closed form; GMC's,
   ``m_GMC(G) = E(mean w - 1 - eps)_+`` (THEORY §3), by Monte Carlo. ``G_half(s2)`` is the group size
   where ``(m_GMC / m_trunc)^2`` falls to 1/2, interpolated in log G; the law's form is the slope of
   log G_half on log chi^2 (G2's predicted exponent).
2. **E5 (the shared-parameter softmax model), the frozen-pair vector law.** Pairs (theta, theta_b) at
   a spread of chi^2; per estimator and G, the squared relative bias ``|E g_G - grad J|^2 / |grad J|^2``
   by the estimator the LLM pairs use (cross-products of independent replicates, jackknife s.e.),
   against the exact grad J; and G_half on the same chi^2 axis.
3. **E5, the iso-samples G sweep.** Asynchronous runs with B = 128 / G groups of G per step under Adam
   at three step sizes and at d = 0: the stable share per (estimator, G, step) (G3), the boundary on the
   early-chi^2 axis per G (G4) and the d = 0 control (G5); and the power of G3's test under a stated
   alternative.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from .analysis import cross_bias, fit_law, g_half

HERE = Path(__file__).resolve().parent
OUT = HERE / "predictions.json"
FORMAT = "gmc-grpo-group-size-predictions/1"
EPS = 0.2
PAIR_G = (2, 4, 8, 16, 32, 64, 128, 512)


# --------------------------------------------------------------------------- 1. E3


def lognormal_law(chi2s=(0.05, 0.2, 1.0, 5.0, 20.0, 100.0, 300.0), Gs=tuple(2**k for k in range(1, 15)),
                  n=2**21, seed=0) -> dict:
    from simulators.theory import lognormal_closed_forms

    rows, pts = [], []
    rng = np.random.default_rng([seed, 3])
    for s2 in chi2s:
        D = math.sqrt(math.log1p(s2))
        m_trunc = float(lognormal_closed_forms(D, EPS)["m_trunc"])
        ratio = []
        for G in Gs:
            groups = max(n // G, 64)
            w = np.exp(rng.normal(-D * D / 2, D, size=(groups, G)))
            m = float(np.maximum(w.mean(1) - 1 - EPS, 0).mean())
            ratio.append((m / m_trunc) ** 2)
        Gh, cens = g_half(Gs, ratio)
        rows.append({"chi2": s2, "m_trunc": m_trunc, "ratio_sq": dict(zip(map(str, Gs), ratio)), "G_half": Gh,
                     "censored": cens})
        if cens is None:
            pts.append((s2, Gh))
    law = fit_law(*zip(*pts)) if len(pts) >= 3 else fit_law([], [])
    return {"rows": rows, "law": law}


# --------------------------------------------------------------------------- 2. E5 frozen pairs

ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is", "snis", "vespo")


def shared_pairs(deltas=(0.3, 0.6, 1.0, 1.5, 2.2, 3.0, 4.5, 6.0, 8.0), Gs=PAIR_G, samples=2**17, reps=8,
                 seed=0) -> dict:
    """Frozen pairs in E5 (H = 8, V = 4, r = 4; the cell where the LLM's pattern appears): theta the warm
    start, theta_b = theta - delta u (u a fixed random unit direction)."""
    from simulators.shared_softmax import SharedSoftmaxMDP

    env = SharedSoftmaxMDP(4, 8, 4)
    theta = env.start(0.25)
    u = np.random.default_rng([seed, 11]).normal(size=theta.shape)
    u /= np.linalg.norm(u)
    gJ = env.grad_J_batch(theta[None])[0].ravel()
    out = []
    for k, delta in enumerate(deltas):
        tb = theta - delta * u
        chi2 = float(env.chi2_batch(theta[None], tb[None])[0])
        res = {e: {} for e in ESTIMATORS}
        for G in Gs:
            groups = max(samples // G // reps, 4)
            rng = np.random.default_rng([seed, k, G])
            means = {e: [] for e in ESTIMATORS}
            caps = []
            for _ in range(reps):
                tok = env.sample(rng, tb, groups * G).reshape(groups, G, env.H)
                T1 = np.repeat(theta[None], groups, 0)
                Tb = np.repeat(tb[None], groups, 0)
                for e in ESTIMATORS:
                    g, lr = env.group_estimate(tok, T1, Tb, e, EPS)
                    means[e].append(g.reshape(groups, -1).mean(0))
                caps.append(float((np.exp(lr).mean(1) > 1 + EPS).mean()))
            for e in ESTIMATORS:
                b2, se = cross_bias(np.array(means[e]), gJ)
                res[e][str(G)] = {"rel_bias_sq": b2, "se": se}
            res["gmc"][str(G)]["cap_share"] = float(np.mean(caps))
        trunc = np.mean([res["tic_trunc"][str(G)]["rel_bias_sq"] for G in Gs])
        ratio = [res["gmc"][str(G)]["rel_bias_sq"] / trunc if trunc > 0 else math.inf for G in Gs]
        Gh, cens = g_half(Gs, ratio)
        out.append({"delta": delta, "chi2": chi2, "ess_fraction": 1 / (1 + chi2), "bias": res,
                    "trunc_mean": float(trunc), "G_half": Gh, "censored": cens})
    pts = [(p["chi2"], p["G_half"]) for p in out if p["censored"] is None]
    return {"env": {"V": 4, "H": 8, "rank": 4, "J_start": 0.25, "eps": EPS}, "pairs": out,
            "law": fit_law(*zip(*pts)) if len(pts) >= 3 else fit_law([], [])}


# --------------------------------------------------------------------------- 3. E5 iso-samples sweep

ISO_G = (4, 8, 16, 32)
ISO_SAMPLES = 128
ISO_LRS = (0.1, 0.3, 1.0)
ISO_ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is")


def iso_sweep(seeds=tuple(range(20)), d=32, T=150, early=20) -> dict:
    from simulators.optim import OptimizerConfig
    from simulators.shared_softmax import SharedSoftmaxMDP, collapsed, run_async

    env = SharedSoftmaxMDP(4, 8, 4)
    theta0 = env.start(0.25)
    J0 = float(env.J_batch(theta0[None])[0])
    rows = []
    for lr in ISO_LRS:
        cfg = OptimizerConfig("adam", lr=float(lr))
        for G in ISO_G:
            for est in ISO_ESTIMATORS + ("d0",):
                e, dd = ("gmc", 0) if est == "d0" else (est, d)
                rec = run_async(env, theta0, e, cfg, G, EPS, dd, T, list(seeds), setting_seed=G,
                                prompts_per_step=ISO_SAMPLES // G)
                col = collapsed(rec["J"], J0, 0.5, 0.25)
                chi = np.median(rec["chi2"][:, dd:dd + early], 1)
                rows.append({"lr": lr, "G": G, "estimator": est, "stable_share": float(1 - col.mean()),
                             "chi2_early": float(np.median(chi)), "final_J": float(rec["J"][:, -1].mean()),
                             "n": len(seeds)})
    bounds = {}
    for est in ISO_ESTIMATORS:
        for G in ISO_G:
            lv = [(r["chi2_early"], r["stable_share"]) for r in rows if r["estimator"] == est and r["G"] == G]
            from studies.common.drift_map import boundary

            b, cens = boundary(lv)
            bounds[f"{est}/G{G}"] = {"boundary_chi2": b, "censored": cens}
    return {"env": {"V": 4, "H": 8, "rank": 4, "d": d, "T": T, "optimizer": "adam", "J0": J0,
                    "samples_per_step": ISO_SAMPLES}, "rows": rows, "boundaries": bounds}


# --------------------------------------------------------------------------- power of G3


def g3_power(alt_gmc=(0.1, 0.2, 0.5, 0.8), alt_trunc=(0.7, 0.7, 0.7, 0.7), seeds=10, sims=400, n_boot=1000,
             seed=0) -> dict:
    """The share of simulated grids (Bernoulli outcomes at the alternative's stable shares, ``seeds`` seeds per
    (estimator, G)) in which G3's test (:func:`studies.group_size.analysis.slope_test`) CONFIRMS."""
    from studies.group_size.analysis import slope_test

    rng = np.random.default_rng([seed, 7])
    hits = 0
    for _ in range(sims):
        gm = (rng.random((seeds, len(ISO_G))) < np.array(alt_gmc)).astype(float)
        tr = (rng.random((seeds, len(ISO_G))) < np.array(alt_trunc)).astype(float)
        hits += slope_test(gm, tr, ISO_G, n_boot=n_boot, seed=int(rng.integers(1 << 30)))["verdict"] == "CONFIRMED"
    return {"alternative_gmc": list(alt_gmc), "alternative_tic_trunc": list(alt_trunc), "seeds": seeds,
            "simulations": sims, "power": hits / sims}


def compute() -> dict:
    return {"format": FORMAT, "eps": EPS, "lognormal": lognormal_law(), "shared_pairs": shared_pairs(),
            "iso_sweep": iso_sweep(), "g3_power": g3_power()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.group_size.predictions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(HERE.parents[1])}")
    args = ap.parse_args(argv)
    from schema.io import write_json

    pred = compute()
    if args.write:
        write_json(OUT, pred)
        print(f"wrote {OUT}")
    print(summary_text(pred))
    return 0


def summary_text(pred: dict) -> str:
    ln = pred["lognormal"]["law"]
    sh = pred["shared_pairs"]["law"]
    lines = [f"E3 G_half law: b = {ln['b']} [{ln['low']}, {ln['high']}] (n = {ln['n']})",
             f"E5 G_half law: b = {sh['b']} [{sh['low']}, {sh['high']}] (n = {sh['n']})"]
    for p in pred["shared_pairs"]["pairs"]:
        g = p["bias"]["gmc"]
        lines.append(f"  E5 pair chi2 {p['chi2']:.3g}: gmc b^2 " + " ".join(f"{G}:{g[G]['rel_bias_sq']:.3g}" for G in g)
                     + f" | trunc {p['trunc_mean']:.3g} | G_half {p['G_half']:.3g} {p['censored'] or ''}")
    for r in pred["iso_sweep"]["rows"]:
        lines.append(f"  iso lr {r['lr']} G {r['G']} {r['estimator']}: stable {r['stable_share']:.2f} "
                     f"chi2 {r['chi2_early']:.3g} J {r['final_J']:.3f}")
    lines.append(f"G3 power: {pred['g3_power']['power']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
