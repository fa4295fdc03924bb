"""Claims 5, 6, 10, 15: the key inequality and the closed forms (THEORY §3, §6 E3-E4).

Symbolic parts by sympy (read from :mod:`bounds.bias` at call time); claim 6 also by exact
enumeration on E1, claim 15 also by Monte Carlo on E3 (4 standard errors).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from bounds import bias
from bounds.exponents import exponent, loglog_slope
from bounds.numeric import twin
from bounds.symbols import (
    Delta,
    G,
    delta,
    eps,
    k,
    mu,
    mu4,
    s2,
    sigma2,
    y,
    z,
)
from simulators import theory
from simulators.bandit.sweeps import instance as e1_instance
from simulators.core import exact_mass_batch, ratio_moments
from simulators.lognormal import GaussianPolicy

from .common import EPS, REL_EXACT, fmt, is_zero
from .enumeration import _result
from .result import Result, combine

# ------------------------------------------------------------------------------- claim 5


def check_5(quick: bool) -> Result:
    """(y - eps)_+ <= y^2/(4 eps), equality at y = 2 eps (§3 key inequality)."""
    ratio = (y - eps) / bias.key_quadratic_bound(y, eps)  # (y-eps)_+ / bound on y > eps
    crit = sp.solve(sp.diff(ratio, y), y)
    crit = [c for c in crit if sp.simplify(c - eps).is_positive]
    top = [sp.simplify(ratio.subs(y, c)) for c in crit]
    # certificate: bound - (y - eps) is a perfect square, so >= 0
    cert = sp.factor(sp.simplify(bias.key_quadratic_bound(y, eps) - (y - eps)))
    cert_ok = sp.simplify(cert * 4 * eps - (y - 2 * eps) ** 2) == 0
    # numeric twins on a grid
    h, q = twin("hinge"), twin("key_quadratic_bound")
    yy = np.linspace(0, 50 * EPS, 5001 if quick else 50001)
    gap = float(np.min(q(y=yy, eps=EPS) - h(y=yy, eps=EPS)))
    y_at = float(yy[1:][np.argmax(h(y=yy[1:], eps=EPS) / q(y=yy[1:], eps=EPS))])
    ok = crit == [2 * eps] and top == [1] and cert_ok and gap >= -1e-15
    return Result.of(
        ok,
        expected={"argmax": "2*epsilon", "max": "1"},
        measured={"argmax": ", ".join(map(str, crit)), "max": ", ".join(map(str, top)),
                  "bound-(y-eps)": str(cert), "numeric min gap": gap, "numeric argmax": y_at},
        tolerance=0,
        evidence=(f"sympy solve(diff(4 eps (y-eps)/y^2, y)) = {crit}, value {top}; y^2/(4eps)-(y-eps) = {cert} >= 0; "
                  f"lambdified grid: min(bound - hinge) = {fmt(gap)}, ratio peaks at y = {y_at:.4f} "
                  f"(2 eps = {2 * EPS})"),
    )


# ------------------------------------------------------------------------------- claim 6 (symbolic part)


def _expanded_fourth_moment(G_: int) -> sp.Expr:
    """E(Wbar-1)^4 for G_ iid terms by brute-force expansion of (sum Y_i)^4."""
    Y = sp.symbols(f"Y1:{G_ + 1}")
    moments = {0: 1, 1: 0, 2: sigma2, 3: sp.Symbol("mu3"), 4: mu4}
    poly = sp.Poly(sp.expand(sp.Add(*Y) ** 4), *Y)
    total = sum(coef * sp.Mul(*[moments[e] for e in mon]) for mon, coef in poly.terms())
    return sp.expand(total / sp.Integer(G_) ** 4)


def check_6_symbolic(quick: bool) -> Result:
    """E(Wbar - 1)^4 = (mu_4 + 3(G-1) sigma^4)/G^3: derived for general G, and expanded for G = 1..5."""
    stated = bias.fourth_moment_group_mean(sigma2, mu4, G)
    general = bias.central_moment_of_mean(4, G)
    general_ok = is_zero(general - stated)
    Gs = range(1, 4 if quick else 6)
    small = {g: is_zero(_expanded_fourth_moment(g) - stated.subs(G, g)) for g in Gs}
    ok = general_ok and all(small.values())
    return Result.of(
        ok,
        expected={"E(Wbar-1)^4": str(stated)},
        measured={"E(Wbar-1)^4": str(general), f"expansion G=1..{max(Gs)}": all(small.values())},
        tolerance=0,
        evidence=(f"partition count of (sum Y_i)^4 gives {general} (difference from THEORY 0: {general_ok}); "
                  f"brute-force expansion agrees for G={list(Gs)}: {small}"),
    )


# ------------------------------------------------------------------------------- claim 10


def check_10(quick: bool) -> Result:
    """TIC-mask worst case (1+eps) sigma^2/(sigma^2+eps^2) (slope -2); Scarf (GMC/trunc) slope -1."""
    law = bias.mask_two_point_law(sigma2, eps, delta)
    mean, var = bias.law_moments(law)
    law_ok = is_zero(mean - 1) and is_zero(var - sigma2)
    # m_mask = P_theta(w > 1+eps) = E_b[w 1{w > 1+eps}] = p * hi (only hi exceeds 1+eps); delta -> 0+
    m_law = sp.limit(law["p"] * law["hi"], delta, 0, "+")
    stated = bias.m_mask_two_point(sigma2, eps)
    m_ok = is_zero(m_law - stated)
    lo0 = sp.simplify(law["lo"].subs(delta, 0))
    # Scarf: its two-point law attains the bound used for trunc
    sl = bias.scarf_two_point_law(s2, k, mu)
    s_mean, s_var = bias.law_moments(sl)
    attain = sp.simplify(sl["p"] * (sl["hi"] - k) - bias.scarf_bound(s2, k, mu))
    scarf_ok = is_zero(s_mean - mu) and is_zero(s_var - s2) and attain == 0
    # exponents of the sigma -> 0 leading coefficients, as eps -> 0
    lead = {
        "mask": sp.limit(stated / sigma2, sigma2, 0, "+"),
        "trunc (Scarf)": sp.limit(bias.m_trunc_scarf(sigma2, eps) / sigma2, sigma2, 0, "+"),
        "gmc (Scarf)": sp.limit(bias.m_gmc_scarf(sigma2, G, eps) / sigma2, sigma2, 0, "+"),
    }
    slopes = {name: exponent(c, eps, 0) for name, c in lead.items()}
    sq_slopes = {name: exponent(c**2, eps, 0) for name, c in lead.items()}
    # E4 numerically (lambdified closed forms, sigma << eps << 1): log-log slopes of the squared bias
    fm, ft = twin("m_mask_two_point"), twin("m_trunc_scarf")
    e = np.geomspace(1e-4, 1e-3, 9)
    sig2 = 1e-14
    num = {"mask": loglog_slope(e, fm(sigma2=sig2, eps=e) ** 2),
           "trunc (Scarf)": loglog_slope(e, ft(sigma2=sig2, eps=e) ** 2)}
    tol_num = 0.01  # the slope's drift from the asymptote is eps/(1+eps) + O(sigma^2/eps^2) < 1e-3 here
    expected = {"slope": {"mask": "-2", "trunc": "-1", "gmc": "-1"}, "squared": {"mask": "-4", "trunc": "-2"},
                "m_mask": str(stated), "numeric squared": {"mask": -4.0, "trunc": -2.0}}
    ok = (law_ok and m_ok and scarf_ok and slopes["mask"] == -2 and slopes["trunc (Scarf)"] == -1
          and slopes["gmc (Scarf)"] == -1 and sq_slopes["mask"] == -4 and sq_slopes["trunc (Scarf)"] == -2
          and abs(num["mask"] + 4) <= tol_num and abs(num["trunc (Scarf)"] + 2) <= tol_num)
    return Result.of(
        ok, expected,
        measured={"slope": {n_.split()[0]: str(v) for n_, v in slopes.items()},
                  "squared": {n_.split()[0]: str(sq_slopes[n_]) for n_ in ("mask", "trunc (Scarf)")},
                  "m_mask": str(m_law), "numeric squared": {n_.split()[0]: v for n_, v in num.items()}},
        tolerance={"symbolic": 0, "numeric slope": tol_num},
        evidence=(f"two-point law has mean 1, variance sigma2: {law_ok}; its m_mask = {sp.factor(m_law)} equals "
                  f"THEORY's closed form: {m_ok}; valid only for sigma2 <= eps (lo = {lo0} >= 0); Scarf's two-point "
                  f"law attains "
                  f"1/2(sqrt(s2+(k-mu)^2)-(k-mu)): {scarf_ok}; sigma->0 leading coefficients {lead} have eps-exponents "
                  f"{slopes} (sympy); E4 numeric squared-bias slopes over eps in [1e-4,1e-3], sigma=1e-7: "
                  f"mask {num['mask']:.4f}, trunc {num['trunc (Scarf)']:.4f}"),
    )


# ------------------------------------------------------------------------------- claim 15 (symbolic part)


def check_15_symbolic(quick: bool) -> Result:
    """E3 lognormal closed forms (sigma^2, mu_4, m_mask, m_trunc), derived by integration."""
    kk = sp.Symbol("kk", positive=True, integer=True)
    pdf_b = bias.lognormal_log_ratio_pdf(z, Delta, "b")
    pdf_t = bias.lognormal_log_ratio_pdf(z, Delta, "theta")
    def integral(f, lo):
        return sp.integrate(f, (z, lo, sp.oo), conds="none")

    Ew = sp.simplify(integral(sp.exp(kk * z) * pdf_b, -sp.oo))  # E_b w^k
    Ewk = lambda j: Ew.subs(kk, j)
    cap = sp.log(1 + eps)
    tail_w = integral(sp.exp(z) * pdf_b, cap)  # E_b[w 1{w > 1+eps}]
    derived = {
        "sigma2": Ewk(2) - 1,
        "mu4": sum(sp.binomial(4, j) * (-1) ** (4 - j) * (Ewk(j) if j else 1) for j in range(5)),
        "m_mask": integral(pdf_t, cap),  # P_theta(w > 1+eps)
        "m_trunc": tail_w - (1 + eps) * integral(pdf_b, cap),  # E_b (w-1-eps)_+, by linearity
    }
    change_of_measure = tail_w
    stated = {"sigma2": bias.lognormal_sigma2(Delta), "mu4": bias.lognormal_mu4(Delta),
              "m_mask": bias.lognormal_m_mask(Delta, eps), "m_trunc": bias.lognormal_m_trunc(Delta, eps)}
    agree = {n_: is_zero(derived[n_] - stated[n_]) for n_ in stated}
    com_ok = is_zero(change_of_measure - stated["m_mask"])
    # the numeric twins against scipy quadrature
    from scipy.integrate import quad
    from scipy.stats import norm

    twin_err = 0.0
    for D_, e_ in ((0.1, 0.2), (0.5, 0.28), (1.0, 0.05)):
        top = D_**2 / 2 + 40 * D_  # beyond 40 sd both integrands are below 1e-300
        opts = {"epsabs": 0.0, "epsrel": 1e-12, "limit": 200}
        q_mask = quad(norm.pdf, math.log1p(e_), top, args=(D_**2 / 2, D_), **opts)[0]
        q_trunc = quad(lambda x, e_=e_, D_=D_: (math.exp(x) - 1 - e_) * norm.pdf(x, -(D_**2) / 2, D_),
                       math.log1p(e_), top, **opts)[0]
        twin_err = max(twin_err, abs(float(twin("lognormal_m_mask")(Delta=D_, eps=e_)) - q_mask) / q_mask,
                       abs(float(twin("lognormal_m_trunc")(Delta=D_, eps=e_)) - q_trunc) / q_trunc)
    ok = all(agree.values()) and com_ok and twin_err <= 1e-8
    return Result.of(
        ok,
        expected={"derived = THEORY": {n_: True for n_ in stated}, **{n_: str(v) for n_, v in stated.items()}},
        measured={"derived = THEORY": agree, "change of measure": com_ok, "twin vs quad": twin_err},
        tolerance={"symbolic": 0, "twin vs quad": 1e-8},
        evidence=(f"sympy integrals over log w ~ N(-+Delta^2/2, Delta^2): E_b w^k = {Ew}; sigma2, mu4, m_mask, m_trunc "
                  f"equal THEORY's forms: {agree}; change of measure holds: {com_ok}; lambdified twins vs scipy quad "
                  f"at 3 points: rel err {fmt(twin_err)}"),
    )


# --------------------------------------------------------------------------- claim 6 (enumeration part)


def check_6_enumeration(quick: bool = False) -> Result:
    """E(Wbar-1)^4 = (mu4 + 3(G-1) sigma^4)/G^3: E1 exact enumeration against bounds' twin."""
    Gs = [1, 2, 3, 5, 8, 16] if quick else [1, 2, 3, 4, 5, 8, 16, 32, 64]
    worst, n = 0.0, 0
    for name in ("mild", "rare_arm"):
        env, th, tb, _ = e1_instance(name)
        lr, lpb, _, _ = env.arrays(th, tb)
        s2_, m4 = (float(x[0]) for x in ratio_moments(lr, lpb))
        for G_ in Gs:
            enum = float(exact_mass_batch(lr, lpb, G_, EPS, [], wbar_powers=(4,))[("wbar", 4)][0])
            formula = theory.fourth_moment_group_mean(s2_, m4, G_)
            worst = max(worst, abs(enum - formula) / formula)
            n += 1
    return _result("enumerated E(Wbar-1)^4 equals (mu4+3(G-1)sigma^4)/G^3", f"max rel. diff {worst:.2e}",
                   f"rel < {REL_EXACT:g}", worst < REL_EXACT,
                   f"E1 mild and rare_arm (K=4), G in {Gs}: {n} cases, count-vector enumeration")


# --------------------------------------------------------------------------- claim 15 (Monte Carlo part)


def check_15_monte_carlo(quick: bool = False) -> Result:
    """E3 Monte Carlo (2e6 samples) against the closed forms of sigma^2, mu_4, m_mask, m_trunc."""
    n = 200_000 if quick else 2_000_000
    worst_z, worst_abs, lines, ok = 0.0, 0.0, [], True
    three = True
    for D_ in (0.2, 0.3):
        pol = GaussianPolicy(D_, 0.0, seed=15)
        cf, mc = pol.closed_forms(EPS), pol.mc_ratio_moments(n, EPS)
        for key in cf:
            m, se = mc[key]
            diff = abs(m - cf[key])
            worst_z, worst_abs = max(worst_z, diff / se), max(worst_abs, diff)
            ok &= diff <= 4 * se
            three &= diff < 5e-4
            lines.append(f"D={D_} {key}: closed {cf[key]:.5f} MC {m:.5f}+-{se:.1e}")
    return _result("MC agrees with the closed forms (to 3 decimals)",
                   f"max |diff| {worst_abs:.1e} = {worst_z:.2f} s.e.; 3 decimals: {'yes' if three else 'no'}",
                   "4 s.e.", ok, f"{n:g} samples, eps={EPS}, closed forms = bounds' twins; " + "; ".join(lines))


# --------------------------------------------------------------------------- claims 6 and 15


def check_6(quick: bool = False) -> Result:
    """Claim 6: the identity derived symbolically, and checked on E1 by exact enumeration."""
    return combine({"symbolic": check_6_symbolic(quick), "enumeration": check_6_enumeration(quick)})


def check_15(quick: bool = False) -> Result:
    """Claim 15: the closed forms derived by integration, and checked on E3 by Monte Carlo."""
    return combine({"symbolic": check_15_symbolic(quick), "monte carlo": check_15_monte_carlo(quick)})
