"""The simulation halves of THEORY §5's claims, for ``make verify-bounds``.

``CHECKS[claim_id](quick) -> {"expected", "measured", "tolerance", "status", "evidence"}``
for claims 7, 8, 9, 13, 14, 16, 17, 18 and the enumeration / Monte Carlo parts of 6 and 15.
``status`` is ``PASS`` or ``FAIL``; a claim that does not hold is reported FAIL with its
evidence. Every instance, grid and tolerance is fixed below, before any result is seen;
tolerances are floating-point floors (exact claims) or 4 standard errors (Monte Carlo).
``quick`` shrinks grids and sample sizes only.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_softmax as _lsm

from . import theory
from .bandit import SoftmaxBandit
from .bandit.sweeps import instance as e1_instance
from .core import exact_mass_batch, ratio_moments
from .delay import AsyncConfig, async_sgd, static_behaviour
from .delay_sweeps import async_summary
from .extremal import rare_jump
from .lognormal import GaussianPolicy
from .token_mdp import TokenTreeMDP, reward_vector
from .token_mdp.sweeps import instance as e2_instance

EPS = 0.2
REL_EXACT = 1e-10  # exact identities computed by enumeration (sums of up to ~1e6 terms)
ZERO = 1e-14  # "exactly 0" up to rounding (GMC's weights are lambda w to one ulp)

# a 3-armed instance, cheap enough to enumerate up to G = 128
K3 = {"theta": [0.6, 0.0, -0.4], "theta_b": [0.0, 0.0, 0.0], "rewards": [1.0, 0.2, 0.5]}


def _result(expected, measured, tolerance, ok: bool, evidence: str) -> dict:
    return {"expected": expected, "measured": measured, "tolerance": tolerance,
            "status": "PASS" if ok else "FAIL", "evidence": evidence}


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _e1_cases(quick: bool):
    """(name, env, theta, theta_b, G grid) for the E1 exact checks."""
    # quick keeps the range of G (the log-log slope of claim 8 depends on it), with fewer points
    Gs4 = [2, 4, 16, 64] if quick else [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    Gs3 = [2, 8, 32, 128] if quick else [2, 4, 8, 16, 32, 64, 96, 128]
    cases = []
    for name in ("mild", "rare_arm"):
        env, th, tb, _ = e1_instance(name)
        cases.append((f"E1 {name} K=4", env, th, tb, Gs4))
    cases.append(("E1 K=3", SoftmaxBandit(K3["rewards"]), np.array(K3["theta"]), np.array(K3["theta_b"]), Gs3))
    return cases


# --------------------------------------------------------------------------- claim 6


def check_6(quick: bool = False) -> dict:
    """E(Wbar-1)^4 = (mu4 + 3(G-1) sigma^4)/G^3: E1 exact enumeration against bounds' twin."""
    Gs = [1, 2, 3, 5, 8, 16] if quick else [1, 2, 3, 4, 5, 8, 16, 32, 64]
    worst, n = 0.0, 0
    for name in ("mild", "rare_arm"):
        env, th, tb, _ = e1_instance(name)
        lr, lpb, _, _ = env.arrays(th, tb)
        s2, m4 = (float(x[0]) for x in ratio_moments(lr, lpb))
        for G in Gs:
            enum = float(exact_mass_batch(lr, lpb, G, EPS, [], wbar_powers=(4,))[("wbar", 4)][0])
            formula = theory.fourth_moment_group_mean(s2, m4, G)
            worst = max(worst, abs(enum - formula) / formula)
            n += 1
    return _result("enumerated E(Wbar-1)^4 equals (mu4+3(G-1)sigma^4)/G^3", f"max rel. diff {worst:.2e}",
                   f"rel < {REL_EXACT:g}", worst < REL_EXACT,
                   f"E1 mild and rare_arm (K=4), G in {Gs}: {n} cases, count-vector enumeration")


# --------------------------------------------------------------------------- claim 7


def _e2_static(Delta: float):
    env, th, _, u = e2_instance("threshold")
    return env, th, static_behaviour(th, Delta, u)


def check_7(quick: bool = False) -> dict:
    """||b_mask||, ||b_trunc|| do not depend on G (leave-one-out): E1/E2 exact enumeration."""
    worst, ref_min, n = 0.0, math.inf, 0
    cases = _e1_cases(quick)
    env2, th2, tb2 = _e2_static(1.0)
    cases.append(("E2 threshold V=2 H=4", env2, th2, tb2, [2, 3, 4] if quick else [2, 3, 4, 5, 6]))
    for _, env, th, tb, Gs in cases:
        for scheme in ("tic_mask", "tic_trunc"):
            ref = env.per_sample_moments(th, tb, 2, EPS, scheme)["bias"]  # G-free single-outcome sum
            ref_norm = float(np.linalg.norm(ref))
            ref_min = min(ref_min, ref_norm)
            for G in Gs:
                b = env.exact_moments(th, tb, G, EPS, scheme)["bias"]
                worst = max(worst, float(np.linalg.norm(b - ref)) / ref_norm)
                n += 1
    ok = worst < REL_EXACT and ref_min > 0
    return _result("||b_mask||, ||b_trunc|| constant in G", f"max rel. diff {worst:.2e} over G",
                   f"rel < {REL_EXACT:g}", ok,
                   f"{n} (instance, scheme, G) cases, G up to {max(max(c[4]) for c in cases)}; "
                   f"smallest bias norm {ref_min:.3g} (non-trivial); eps={EPS}")


# --------------------------------------------------------------------------- claim 8


def check_8(quick: bool = False) -> dict:
    """GMC: m(G) non-increasing, m <= sigma^2/(4 G eps), ||b|| <= M m, -> 0, slope <= -1; E1 exact, E3 MC."""
    fails, lines, slopes = [], [], []
    for name, env, th, tb, Gs in _e1_cases(quick):
        ms, bs, bounds_ = [], [], []
        for G in Gs:
            r = env.exact_moments(th, tb, G, EPS, "gmc")
            ms.append(r["mass_bias"])
            bs.append(r["bias_norm"])
            bounds_.append((r["M"], r["sigma2"]))
        ms, bs = np.array(ms), np.array(bs)
        M, s2 = bounds_[0]
        rate = np.array([theory.gmc_quadratic(s2, G, EPS) for G in Gs])
        if np.any(np.diff(ms) > ZERO):
            fails.append(f"{name}: m not non-increasing")
        if np.any(ms > rate * (1 + theory.FP_SLACK) + ZERO):
            fails.append(f"{name}: m above sigma^2/(4 G eps)")
        if np.any(bs > M * ms * (1 + theory.FP_SLACK) + ZERO):
            fails.append(f"{name}: ||b|| above M m")
        pos = ms > 0
        slope = _slope(np.array(Gs)[pos], ms[pos]) if pos.sum() >= 2 else -math.inf
        slopes.append(slope)
        if slope > -1:
            fails.append(f"{name}: log-log slope {slope:.2f} > -1")
        lines.append(f"{name}: m {ms[0]:.3g}->{ms[-1]:.3g} (G {Gs[0]}->{Gs[-1]}), slope {slope:.2f}, "
                     f"max G m/(sigma^2/4eps) {np.max(ms / rate * 1.0):.3f}")
    # E3: Monte Carlo m_GMC(G) for lognormal ratios, Delta = 0.3
    pol = GaussianPolicy(0.3, 0.0, seed=8)
    cf = pol.closed_forms(EPS)
    Gs = [1, 2, 4, 8, 16] if quick else [1, 2, 4, 8, 16, 32]
    n_groups = 5_000 if quick else 20_000
    est = [pol.mc_mass_bias("gmc", G, EPS, n_groups) for G in Gs]
    for (G, (m, se)), (G2, (m2, se2)) in zip(zip(Gs, est), zip(Gs[1:], est[1:])):
        if m2 > m + 4 * math.hypot(se, se2):
            fails.append(f"E3: m({G2}) > m({G}) beyond 4 s.e.")
    for G, (m, se) in zip(Gs, est):
        if m > theory.gmc_quadratic(cf["sigma2"], G, EPS) + 4 * se:
            fails.append(f"E3: m({G}) above sigma^2/(4 G eps) beyond 4 s.e.")
    lines.append("E3 Delta=0.3 MC: " + ", ".join(f"G={G}: {m:.2e}+-{se:.1e}" for G, (m, se) in zip(Gs, est)))
    return _result("m_GMC(G) non-increasing, <= sigma^2/(4 G eps), ||b|| <= M m, log-log slope <= -1",
                   f"E1 slopes {', '.join(f'{s:.2f}' for s in slopes)}; {len(fails)} violations",
                   f"exact: rounding floor {ZERO:g}, rel {theory.FP_SLACK:g}; E3: 4 s.e.", not fails,
                   "; ".join(fails + lines))


# --------------------------------------------------------------------------- claim 9


def check_9(quick: bool = False) -> dict:
    """Rare-jump law (p = 1e-6): 4 G eps m_GMC / sigma^2 in [0.999, 1] for G = 1..64 (exact)."""
    Gs = list(range(1, 65, 7 if quick else 1))
    epss = [EPS] if quick else [0.05, EPS, 1.0]
    ratios = []
    for eps in epss:
        for G in Gs:
            law = rare_jump(G, eps, p=1e-6)
            m = law.mass_bias(["gmc"], G, eps)["gmc"]
            ratios.append(4 * G * eps * m / law.sigma2)
    lo, hi = min(ratios), max(ratios)
    return _result("4 G eps m_GMC / sigma^2 in [0.999, 1]", f"range [{lo:.6f}, {hi:.6f}]", "[0.999, 1]",
                   lo >= 0.999 and hi <= 1.0, f"rare jump p=1e-6, eps in {epss}, G in {Gs[0]}..{Gs[-1]} "
                   f"({len(ratios)} cases), binomial enumeration")


# --------------------------------------------------------------------------- claim 13


def check_13(quick: bool = False) -> dict:
    """theta_b = theta - Delta u: slopes of sigma^2, mu_4, ||b_stale|| as Delta -> 0 are 2, 4, 1 (E1 exact)."""
    env, th, _, u = e1_instance("mild")
    deltas = np.geomspace(1e-3, 1e-2, 5 if quick else 9)
    s2, m4, bs = [], [], []
    for D in deltas:
        r = env.exact_moments(th, static_behaviour(th, D, u), 4, EPS, "stale")
        s2.append(r["sigma2"])
        m4.append(r["mu4"])
        bs.append(r["bias_norm"])
    slopes = [_slope(deltas, y) for y in (s2, m4, bs)]
    tol = 0.05
    ok = all(abs(s - e) <= tol for s, e in zip(slopes, (2, 4, 1)))
    return _result("slopes 2, 4, 1", ", ".join(f"{s:.3f}" for s in slopes), f"+-{tol}", ok,
                   f"E1 mild, Delta in [1e-3, 1e-2] ({len(deltas)} points), G=4, least-squares log-log slopes "
                   f"of sigma^2, mu_4, ||b_stale||")


# --------------------------------------------------------------------------- claim 14


def _capped_informative_prob(env, th, tb, G, eps) -> float:
    """P(Wbar > 1+eps and the group's rewards are not all equal): the groups on which GMC's
    cap can move g_hat (with equal rewards every leave-one-out advantage is 0)."""
    from .core import configurations

    lr, lpb, rew, _ = env.arrays(th, tb)
    counts, _, log_coef = configurations(G, env.K)
    pmf = np.exp(log_coef + counts @ lpb[0])
    wbar = counts @ np.exp(lr[0]) / G
    present = counts > 0
    r = rew[0]
    mixed = (np.where(present, r, -np.inf).max(1) > np.where(present, r, np.inf).min(1))
    return float(pmf[(wbar > 1 + eps) & mixed].sum())


def check_14(quick: bool = False) -> dict:
    """Biases of mask, trunc, GMC are 0 below Delta_crit (max w = 1+eps), positive above (E1 exact)."""
    env, th, _, u = e1_instance("mild")
    G = 8
    fails, lines = [], []
    for eps in ([EPS] if quick else [0.1, EPS]):
        def excess(D, eps=eps):
            lr = env.arrays(th, static_behaviour(th, D, u))[0]
            return float(lr.max()) - math.log1p(eps)

        crit = brentq(excess, 1e-9, 50.0, xtol=1e-14)
        for f in (0.5, 0.9, 0.99, 1.01, 1.05, 1.1, 2.0):
            tb = static_behaviour(th, f * crit, u)
            res = env.exact_all(th, tb, G, eps, ["tic_mask", "tic_trunc", "gmc"])
            for s, r in res.items():
                b, m = r["bias_norm"], r["mass_bias"]
                if f < 1 and (b > ZERO or abs(m) > ZERO):
                    fails.append(f"eps={eps} {s} at {f} Delta_crit: ||b||={b:.2e}, m={m:.2e} (not 0)")
                if f > 1 and not (b > ZERO and m > ZERO):
                    why = ""
                    if s == "gmc":
                        why = (f" while m={m:.2e} > 0: P(capped group with unequal rewards) = "
                               f"{_capped_informative_prob(env, th, tb, G, eps):.1e} (only all-equal-reward groups "
                               f"exceed the cap, and their leave-one-out advantages are 0)")
                    fails.append(f"eps={eps} {s} at {f} Delta_crit: ||b||={b:.1e} not > 0{why}")
        lines.append(f"eps={eps}: Delta_crit={crit:.4f}")
    return _result("||b|| of mask, trunc, GMC: 0 below Delta_crit(eps), > 0 above", f"{len(fails)} violations",
                   f"0 means <= {ZERO:g} (rounding)", not fails,
                   "; ".join(fails + lines) + f"; E1 mild, G={G}, Delta/Delta_crit in "
                   "{0.5,0.9,0.99,1.01,1.05,1.1,2}")


# --------------------------------------------------------------------------- claim 15


def check_15(quick: bool = False) -> dict:
    """E3 Monte Carlo (2e6 samples) against the closed forms of sigma^2, mu_4, m_mask, m_trunc."""
    n = 200_000 if quick else 2_000_000
    worst_z, worst_abs, lines, ok = 0.0, 0.0, [], True
    three = True
    for delta in (0.2, 0.3):
        pol = GaussianPolicy(delta, 0.0, seed=15)
        cf, mc = pol.closed_forms(EPS), pol.mc_ratio_moments(n, EPS)
        for k in cf:
            m, se = mc[k]
            diff = abs(m - cf[k])
            worst_z, worst_abs = max(worst_z, diff / se), max(worst_abs, diff)
            ok &= diff <= 4 * se
            three &= diff < 5e-4
            lines.append(f"D={delta} {k}: closed {cf[k]:.5f} MC {m:.5f}+-{se:.1e}")
    return _result("MC agrees with the closed forms (to 3 decimals)",
                   f"max |diff| {worst_abs:.1e} = {worst_z:.2f} s.e.; 3 decimals: {'yes' if three else 'no'}",
                   "4 s.e.", ok, f"{n:g} samples, eps={EPS}, closed forms = bounds' twins; " + "; ".join(lines))


# --------------------------------------------------------------------------- claim 16


def check_16(quick: bool = False) -> dict:
    """E||g_GMC||^2 <= min(E||g_IS||^2, (1+eps)^2 M^2): E1/E2 exact under static delays."""
    worst, n, fails = 0.0, 0, []
    cases = []
    for name in ("mild", "rare_arm"):
        env, th, _, u = e1_instance(name)
        cases.append((f"E1 {name}", env, th, u, [2, 4, 8] if quick else [2, 4, 8, 16]))
    env2, th2, _, u2 = e2_instance("threshold")
    cases.append(("E2 threshold", env2, th2, u2, [2, 3] if quick else [2, 3, 4]))
    for name, env, th, u, Gs in cases:
        for D in (0.5, 1.0, 2.0, 4.0):
            tb = static_behaviour(th, D, u)
            for G in Gs:
                r = env.exact_all(th, tb, G, EPS, ["gmc", "is"])
                cap = float(theory.class_second_moment(EPS, r["gmc"]["M"]))
                bound = min(r["is"]["second_moment"], cap)
                ratio = r["gmc"]["second_moment"] / bound
                worst, n = max(worst, ratio), n + 1
                if ratio > 1 + theory.FP_SLACK:
                    fails.append(f"{name} Delta={D} G={G}: ratio {ratio:.6f}")
    return _result("E||g_GMC||^2 / min(E||g_IS||^2, (1+eps)^2 M^2) <= 1", f"max ratio {worst:.4f}",
                   f"<= 1 + {theory.FP_SLACK:g}", not fails,
                   "; ".join(fails) or f"{n} cases: E1 mild/rare_arm, E2 threshold, Delta in {{0.5,1,2,4}}, eps={EPS}")


# --------------------------------------------------------------------------- claim 17


def _paired(a, b):
    d = np.asarray(a) - np.asarray(b)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")


def check_17(quick: bool = False) -> dict:
    """Async SGD on E1 (and E2): the realised bias stays under Theorem 2's term (theorem);
    the orderings of ||grad J||^2 are expected behaviour, reported as measured."""
    env, _, theta0, _ = e1_instance("rare_arm")
    seeds = list(range(5 if quick else 20))
    delays = [0, 2, 8, 32]
    T, eta, G = (100 if quick else 200), 0.5, 8
    theorem_fails, notes = [], []
    grad = {}

    def run(e, th0, scheme, eps, G_, record=True, ds=delays, T_=T):
        cfg = AsyncConfig(scheme, G_, eps, eta, T_, record_bias=record)
        rec = async_sgd(e, th0, cfg, seeds, ds)
        return async_summary(cfg, rec, ds, seeds) if record else rec

    # theorem part: every scheme with a Theorem 2 term, E1 at eps = 0.2, E2 at eps = 0.2
    cases = [("E1", env, theta0, G, seeds)]
    env2, _, th2, _ = e2_instance("target")
    cases.append(("E2", env2, th2, 4, seeds[: 3 if quick else 8]))
    for label, e, th0, G_, sd in cases:
        for scheme in ("gmc", "tic_mask", "tic_trunc", "stale", "is"):
            cfg = AsyncConfig(scheme, G_, EPS, eta, T if label == "E1" else T // 2)
            rec = async_sgd(e, th0, cfg, sd, delays)
            df = async_summary(cfg, rec, delays, sd)
            grad[(label, scheme, EPS, G_)] = df
            bad = df[(df["bias_le_D"] == False) | (df["step_bound_violations"] != 0)]
            if len(bad):
                theorem_fails.append(f"{label} {scheme}: {len(bad)} runs violate (e.g. d={bad.iloc[0]['d']}, "
                                     f"avg ||b||^2={bad.iloc[0]['avg_bias_sq']:.3g} vs D={bad.iloc[0]['D_bound']:.3g}, "
                                     f"step violations {bad.iloc[0]['step_bound_violations']})")
        worst = max(float((grad[(label, s, EPS, G_)]["avg_bias_sq"] /
                           grad[(label, s, EPS, G_)]["D_bound"].where(lambda x: x > 0)).max())
                    for s in ("gmc", "tic_mask", "tic_trunc", "stale"))
        notes.append(f"{label}: max avg||b||^2/D = {worst:.2e}")

    # expected behaviour (not theorems), E1
    def avg(label, scheme, eps, G_, d):
        df = grad[(label, scheme, eps, G_)]
        return df[df["d"] == d].sort_values("seed")["avg_grad_sq"].to_numpy()

    for eps in ([0.1, 0.4] if not quick else [0.1]):
        for scheme in ("gmc", "tic_mask"):
            grad[("E1", scheme, eps, G)] = run(env, theta0, scheme, eps, G)
    order = []
    for d in delays[1:]:
        diff, se = _paired(avg("E1", "tic_mask", EPS, G, d), avg("E1", "gmc", EPS, G, d))
        wins = float(np.mean(avg("E1", "gmc", EPS, G, d) <= avg("E1", "tic_mask", EPS, G, d)))
        order.append(f"d={d}: mask-gmc {diff:.2e}+-{se:.1e} (gmc<=mask in {wins:.0%} of seeds)")
    gaps = {}
    for eps in sorted({k[2] for k in grad if k[0] == "E1" and k[1] == "gmc"}):
        gaps[eps] = [_paired(avg("E1", "tic_mask", eps, G, d), avg("E1", "gmc", eps, G, d))[0] for d in delays]
    grows_d = all(np.all(np.diff(g[1:]) >= 0) for g in gaps.values())
    epss = sorted(gaps)
    grows_eps = all(gaps[a][-1] >= gaps[b][-1] for a, b in itertools.pairwise(epss))
    gap_txt = "; ".join(f"eps={e}: " + ", ".join(f"{x:.1e}" for x in g) for e, g in gaps.items())
    # GMC approaches IS as G grows (d = 32)
    conv = []
    for G_ in ([4, 8, 32] if not quick else [4, 16]):
        r_g = run(env, theta0, "gmc", EPS, G_, record=False, ds=[32])
        r_i = run(env, theta0, "is", EPS, G_, record=False, ds=[32])
        conv.append(abs(_paired(np.nanmean(r_g["grad_sq"][0], 1), np.nanmean(r_i["grad_sq"][0], 1))[0]))
    approaches = bool(np.all(np.diff(conv) <= 0))
    # IS heavy tail of max_t ||g_t|| (d = 32) against GMC's sure bound (1+eps) M
    is_df, gmc_df = grad[("E1", "is", EPS, G)], grad[("E1", "gmc", EPS, G)]
    is32, gmc32 = is_df[is_df["d"] == 32], gmc_df[gmc_df["d"] == 32]
    tail = (f"d=32 max_t||g||/mean_t||g|| (median over seeds): "
            f"IS {float((is32['max_ghat_norm'] / is32['mean_ghat_norm']).median()):.2f}, "
            f"GMC {float((gmc32['max_ghat_norm'] / gmc32['mean_ghat_norm']).median()):.2f}; "
            f"IS runs above (1+eps)M: {int((is32['max_ghat_norm'] > is32['class_norm_bound']).sum())}/{len(is32)}, "
            f"GMC: {int((gmc32['max_ghat_norm'] > gmc32['class_norm_bound'] * (1 + 1e-12)).sum())}/{len(gmc32)}")
    finals = ", ".join(f"{s} {grad[('E1', s, EPS, G)].query('d == 32')['final_J'].mean():.3f}"
                       for s in ("is", "gmc", "tic_trunc", "tic_mask", "stale"))
    behaviour = (f"[expected behaviour, not theorems] E1 eps={EPS}: " + "; ".join(order) +
                 f". Mean final J at d=32 (J* = 1): {finals}" +
                 f". mask-gmc gap by d (0,2,8,32): {gap_txt}; grows with d: {grows_d}; grows as eps falls: {grows_eps}"
                 f". |gmc-is| at d=32 for G={[4, 8, 32] if not quick else [4, 16]}: "
                 + ", ".join(f"{c:.1e}" for c in conv) + f" (shrinking: {approaches}). {tail}")
    return _result("avg_t ||b_t||^2 <= Theorem 2's D (constants estimated on the run) and ||b_t|| <= M m-bound "
                   "every step; orderings reported", f"{len(theorem_fails)} theorem violations; " + "; ".join(notes),
                   f"rel {theory.FP_SLACK:g}", not theorem_fails,
                   "; ".join(theorem_fails) + f" E1 rare_arm K=4 G={G}, E2 target V=2 H=4 G=4, eta={eta}, "
                   f"T={T}, d in {delays}, {len(seeds)} seeds. " + behaviour)


# --------------------------------------------------------------------------- claim 18


def check_18(quick: bool = False) -> dict:
    """E2 position-factorised: E_b w^2 = prod_h E_b rho_h^2, so log(1+sigma^2) is linear in H."""
    V = 3
    Hs = list(range(1, 7 if quick else 9))
    rng = np.random.default_rng(18)
    th_all, tb_all = rng.normal(0, 0.4, (8, V)), rng.normal(0, 0.4, (8, V))
    worst_prod, logs = 0.0, []
    for H in Hs:
        for identical in (False, True):
            th = np.repeat(th_all[:1], H, 0) if identical else th_all[:H]
            tb = np.repeat(tb_all[:1], H, 0) if identical else tb_all[:H]
            env = TokenTreeMDP(V, H, "position", reward_vector("parity", V, H))
            lr, lpb, _, _ = env.arrays(th, tb)
            s2 = float(ratio_moments(lr, lpb)[0][0])  # by enumeration of the V^H sequences
            prod = float(np.prod(env.position_ratio_moments(th, tb)))
            worst_prod = max(worst_prod, abs((1 + s2) - prod) / prod)
            if identical:
                logs.append(math.log1p(s2))
    per_position = math.log(float(np.sum(np.exp(2 * _lsm(th_all[0]) - _lsm(tb_all[0])))))
    fit = np.polyfit(Hs, logs, 1)
    resid = float(np.max(np.abs(np.polyval(fit, Hs) - logs)) / max(logs))
    ok = worst_prod < REL_EXACT and resid < REL_EXACT
    return _result("E_b w^2 = prod_h E_b rho_h^2; log(1+sigma^2) linear in H",
                   f"product rel. diff {worst_prod:.1e}; linear-fit rel. residual {resid:.1e}; slope {fit[0]:.4f}",
                   f"rel < {REL_EXACT:g}", ok,
                   f"E2 V={V}, H={Hs[0]}..{Hs[-1]} ({V}^H sequences enumerated), random and identical positions; "
                   f"log E_b rho^2 of one position {per_position:.4f}")


CHECKS: dict[int, Callable[[bool], dict]] = {
    6: check_6, 7: check_7, 8: check_8, 9: check_9, 13: check_13, 14: check_14, 15: check_15, 16: check_16,
    17: check_17, 18: check_18,
}
"""claim id -> check(quick) for the simulation parts of THEORY §5."""
