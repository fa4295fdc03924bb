"""Claims 1-4: the class C_eps and the optimality of GMC within it (THEORY §2).

Each ``check_<id>(quick)`` returns a :class:`~claims.result.Result`. Every formula is read
from :mod:`bounds.bias` *at call time*, so a wrong bound planted there (a test monkeypatches
one) makes its claim FAIL. ``expected`` is what THEORY.md states; ``measured`` is what sympy
or the numerics give. Tolerances are stated beside each check.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import sympy as sp
from scipy.optimize import linprog

import estimators
from bounds import bias
from bounds.numeric import twin
from bounds.symbols import (
    eps,
    ratios,
)

from .common import EPS, fmt, is_zero, log_ratios
from .result import Result

SCHEMES_IN = ("stale", "tic_mask", "tic_trunc", "gmc", "snis")
SCHEMES_OUT = ("is", "tic_ppo")

# ------------------------------------------------------------------------------- claim 1


def _min_in_regime(a_, b_):
    """min(a, b) when the sign of b - a is known to sympy, else None."""
    diff = sp.simplify(b_ - a_)
    if diff.is_nonnegative:
        return a_
    if diff.is_nonpositive:
        return b_
    return None


def check_1(quick: bool) -> Result:
    """GMC mass = min(Wbar, 1+eps), c <= w, g_GMC = lambda g_IS (§2 (d))."""
    # symbolic, G = 3: place Wbar in each regime via w3, then compare exactly
    ws = ratios(3)
    Wbar = sp.Add(*ws) / 3
    v0, v1 = sp.Dummy("v", nonnegative=True), sp.Dummy("v", positive=True)
    sym_ok = []
    for target in ((1 + eps) / (1 + v0), (1 + eps) * (1 + v1)):  # Wbar <= 1+eps, Wbar > 1+eps
        sub = {ws[2]: 3 * target - ws[0] - ws[1]}
        lam = sp.simplify(bias.gmc_lambda(ws, eps).subs(sub))
        mass = sp.simplify(lam * Wbar.subs(sub))
        expect = _min_in_regime(target, 1 + eps)
        sym_ok.append(expect is not None and is_zero(mass - expect) and bool((1 - lam).is_nonnegative))
    X = sp.symbols("X1:4")
    lam = bias.gmc_lambda(ws, eps)
    sym_ok.append(sp.expand(sum(lam * wi * xi for wi, xi in zip(ws, X))
                            - lam * sum(wi * xi for wi, xi in zip(ws, X))) == 0)

    # numeric, through the shared core
    rng = np.random.default_rng(1)
    lam3 = sp.lambdify([*ws, eps], lam, "numpy")
    n = 200 if quick else 2000
    mass_err = cw_excess = cos_gap = lam_err = 0.0
    for G_, scale in itertools.product((1, 2, 3, 8, 64), (0.05, 0.5, 2.0, 6.0)):
        lr = log_ratios(rng, n, G_, scale)
        w, c = np.exp(lr), estimators.weights("gmc", lr, EPS)
        target = np.minimum(w.mean(-1), 1 + EPS)
        mass_err = max(mass_err, float(np.max(np.abs(c.mean(-1) - target) / target)))
        cw_excess = max(cw_excess, float(np.max(c / w - 1)))
        Xs = rng.normal(size=(n, G_, 3))
        g_gmc, g_is = (c[..., None] * Xs).mean(1), (w[..., None] * Xs).mean(1)
        cos = (g_gmc * g_is).sum(-1) / (np.linalg.norm(g_gmc, axis=-1) * np.linalg.norm(g_is, axis=-1))
        cos_gap = max(cos_gap, float(np.max(np.abs(1 - cos))))
        if G_ == 3:
            core = estimators.gmc_lambda(lr, EPS)[:, 0]
            lam_err = max(lam_err, float(np.max(np.abs(core - lam3(*w.T, EPS)))))
    tol = 1e-12
    ok = all(sym_ok) and max(mass_err, cw_excess, cos_gap, lam_err) <= tol
    return Result.of(
        ok,
        expected={"mass err": 0.0, "c/w-1": 0.0, "1-cos": 0.0, "sympy G=3": True},
        measured={"mass err": mass_err, "c/w-1": cw_excess, "1-cos": cos_gap, "sympy G=3": all(sym_ok),
                  "core lambda vs sympy": lam_err},
        tolerance=tol,
        evidence=(f"sympy G=3, both regimes: mass=min exact, lambda<=1: {sym_ok}; "
                  f"estimators.weights('gmc') on {20 * n} random groups (G in 1..64): rel mass err {fmt(mass_err)}, "
                  f"max c/w-1 {fmt(cw_excess)}, max |1-cos(g_GMC,g_IS)| {fmt(cos_gap)}, "
                  f"|gmc_lambda - sympy lambda| {fmt(lam_err)}"),
    )


# ------------------------------------------------------------------------------- claim 2


def _grid(G_: int, eps_: float) -> np.ndarray:
    cap = math.log1p(eps_)
    vals = [math.log(1e-9), math.log(0.5), 0.0, cap - 1e-9, cap, cap + 1e-9, math.log(2.0), math.log(10.0),
            math.log(1e3), math.log(1e9)]
    return np.array(list(itertools.product(vals, repeat=G_)))


def _norm_ratio(estimator: str, lr: np.ndarray, adv: np.ndarray | None, Xs: np.ndarray) -> np.ndarray:
    """||g|| / ((1+eps) max_i ||X_i||) per group, g = (1/G) sum_i c_i X_i."""
    c = estimators.weights(estimator, lr, EPS, advantages=adv)
    g = (c[..., None] * Xs).mean(1)
    return np.linalg.norm(g, axis=-1) / ((1 + EPS) * np.linalg.norm(Xs, axis=-1).max(-1))


def check_2(quick: bool) -> Result:
    """Class membership (Lemma 2): ||g|| <= (1+eps) max ||X_i|| for members, counterexamples for IS, TIC-PPO."""
    rng = np.random.default_rng(2)
    worst = {s: 0.0 for s in SCHEMES_IN + SCHEMES_OUT}
    n_cfg = 0
    for G_ in (1, 2, 3) if quick else (1, 2, 3, 4):
        lr = _grid(G_, EPS)
        n_cfg += len(lr)
        aligned = np.ones((len(lr), G_, 1))  # all X_i equal: the worst case of Lemma 2
        rand = rng.normal(size=(len(lr), G_, 3))
        for estimator in SCHEMES_IN + SCHEMES_OUT:
            advs = [None] if estimator != "tic_ppo" else [-np.ones_like(lr), np.ones_like(lr),
                                                      rng.choice([-1.0, 1.0], size=lr.shape)]
            for adv, Xs in itertools.product(advs, (aligned, rand)):
                worst[estimator] = max(worst[estimator], float(_norm_ratio(estimator, lr, adv, Xs).max()))
    # THEORY's explicit counterexample: w = (G(1+eps)+1, 1, ..., 1), X_i equal, A_1 < 0
    G_ = 4
    lr = np.log(np.array([[G_ * (1 + EPS) + 1] + [1.0] * (G_ - 1)]))
    adv = -np.ones_like(lr)
    counter = {s: float(_norm_ratio(s, lr, adv if s == "tic_ppo" else None, np.ones((1, G_, 1)))[0])
               for s in SCHEMES_OUT}
    tol = 1e-12
    member = {s: worst[s] <= 1 + tol for s in worst}
    flags = {s: estimators.get_scheme(s).in_class for s in worst}
    ok = (all(member[s] for s in SCHEMES_IN) and not any(member[s] for s in SCHEMES_OUT)
          and all(counter[s] > 1 + tol for s in SCHEMES_OUT) and all(flags[s] == member[s] for s in worst))
    return Result.of(
        ok,
        expected={"out": list(SCHEMES_OUT), "in": list(SCHEMES_IN)},
        measured={"out": [s for s in worst if not member[s]], "in": [s for s in worst if member[s]],
                  "max ||g||/((1+eps)max||X||)": worst, "counterexample ratio": counter},
        tolerance=tol,
        evidence=(f"{n_cfg} enumerated ratio configurations (G=1..{3 if quick else 4}, ratios 1e-9..1e9 incl. "
                  f"1+eps+-1e-9), aligned and random X: worst ratios "
                  f"{', '.join(f'{s}={fmt(v)}' for s, v in worst.items())}; "
                  f"w=(G(1+eps)+1,1,..,1), G=4: IS {fmt(counter['is'])}, TIC-PPO (A_1<0) {fmt(counter['tic_ppo'])}; "
                  f"estimators.SCHEMES in_class flags agree: {all(flags[s] == member[s] for s in worst)}"),
    )


# ------------------------------------------------------------------------------- claim 3

_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _lp_beta_inf(w: np.ndarray, eps_: float, extra=None):
    """min_c beta_inf(c; w) over c >= 0, (1/G) sum c <= 1+eps, as an LP in (u = c/w, delta)."""
    G_ = len(w)
    A = np.zeros((2 * G_ + 1, G_ + 1))
    b = np.zeros(2 * G_ + 1)
    A[:G_, :G_], A[:G_, G_], b[:G_] = np.eye(G_), -1.0, 1.0  # u_i - 1 <= delta
    A[G_:2 * G_, :G_], A[G_:2 * G_, G_], b[G_:2 * G_] = -np.eye(G_), -1.0, -1.0  # 1 - u_i <= delta
    A[2 * G_, :G_], b[2 * G_] = w, G_ * (1 + eps_)  # mass cap
    obj = np.r_[np.zeros(G_), w.mean()]
    return A, b, obj


def _lp_beta_1(w: np.ndarray, eps_: float):
    """min_c beta_1(c; w) as an LP in (u = c/w, t), t_i >= |1 - u_i|."""
    G_ = len(w)
    I = np.eye(G_)
    A = np.block([[I, -I], [-I, -I], [w[None, :], np.zeros((1, G_))]])
    b = np.r_[np.ones(G_), -np.ones(G_), G_ * (1 + eps_)]
    obj = np.r_[np.zeros(G_), w / G_]
    return A, b, obj


def _solve(A, b, obj):
    res = linprog(obj, A_ub=A, b_ub=b, bounds=[(0, None)] * A.shape[1], method="highs", options=_HIGHS)
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    return res


def _face_range(A, b, obj, opt: float, i: int, slack: float = 1e-9) -> float:
    """Width of coordinate i over the optimal face {x feasible, obj.x <= opt + slack}."""
    A2, b2 = np.vstack([A, obj]), np.r_[b, opt + slack]
    e = np.zeros(A.shape[1])
    e[i] = 1.0
    lo, hi = _solve(A2, b2, e).fun, -_solve(A2, b2, -e).fun
    return hi - lo


def check_3(quick: bool) -> Result:
    """Theorem 1: min beta_inf = min beta_1 = (Wbar-1-eps)_+; the beta_inf argmin is GMC and unique."""
    rng = np.random.default_rng(3)
    excess = twin("gmc_excess")
    val_err = arg_err = uniq_width = b1_err = gmc_b1_err = b1_face_err = 0.0
    b1_nonunique = capped = n = 0
    for G_, scale in itertools.product((2, 3, 5, 8), (0.3, 1.0, 2.0)):
        for _ in range(2 if quick else 5):
            w = np.exp(log_ratios(rng, 1, G_, scale))[0]
            n += 1
            target = float(excess(wbar=w.mean(), eps=EPS))
            c_gmc = estimators.weights("gmc", np.log(w)[None], EPS)[0]
            # beta_inf
            A, b, obj = _lp_beta_inf(w, EPS)
            res = _solve(A, b, obj)
            val_err = max(val_err, abs(res.fun - target))
            arg_err = max(arg_err, float(np.max(np.abs(res.x[:G_] * w - c_gmc))))
            for i in range(G_):
                uniq_width = max(uniq_width, float(_face_range(A, b, obj, res.fun, i) * w[i]))
            # beta_1
            A1, b1, obj1 = _lp_beta_1(w, EPS)
            res1 = _solve(A1, b1, obj1)
            b1_err = max(b1_err, abs(res1.fun - target))
            gmc_b1_err = max(gmc_b1_err, abs(float(bias.beta_1(c_gmc[None], w[None])[0]) - target))
            if target > 0:
                capped += 1
                c1 = res1.x[:G_] * w
                b1_face_err = max(b1_face_err, float(np.max(c1 - w)), abs(c1.sum() - G_ * (1 + EPS)))
                b1_nonunique += _face_range(A1, b1, obj1, res1.fun, 0) * w[0] > 1e-3
    tol, tol_unique = 1e-7, 1e-6
    ok = (max(val_err, arg_err, b1_err, gmc_b1_err, b1_face_err) <= tol and uniq_width <= tol_unique
          and b1_nonunique == capped)
    return Result.of(
        ok,
        expected={"value err": 0.0, "argmin err": 0.0, "face width": 0.0, "beta_1 err": 0.0,
                  "beta_1 non-unique": f"{capped}/{capped}"},
        measured={"value err": val_err, "argmin err": arg_err, "face width": uniq_width, "beta_1 err": b1_err,
                  "beta_1 non-unique": f"{b1_nonunique}/{capped}", "beta_1(GMC) err": gmc_b1_err,
                  "beta_1 face err": b1_face_err},
        tolerance={"value/argmin": tol, "uniqueness width": tol_unique},
        evidence=(f"scipy linprog (HiGHS) on {n} random w (G=2..8, {capped} with Wbar>1+eps): value err "
                  f"{fmt(val_err)}, argmin vs estimators GMC {fmt(arg_err)}, width of the beta_inf optimal face "
                  f"{fmt(uniq_width)} (unique); beta_1 LP err {fmt(b1_err)}, beta_1 minimisers satisfy c<=w, "
                  f"sum=G(1+eps) to {fmt(b1_face_err)}, face width > 1e-3 in {b1_nonunique}/{capped} capped draws"),
    )


# ------------------------------------------------------------------------------- claim 4


def check_4(quick: bool) -> Result:
    """Pointwise beta_1: GMC <= TIC-trunc <= TIC-mask, and the §2 table's closed forms."""
    rng = np.random.default_rng(4)
    n = 2000 if quick else 20000
    viol = 0
    table_err = 0.0
    total = 0
    t_trunc, t_mask = twin("beta1_term_trunc"), twin("beta1_term_mask")
    bi_trunc, bi_mask = twin("beta_inf_trunc"), twin("beta_inf_mask")
    for G_, scale in itertools.product((1, 2, 4, 16, 64), (0.1, 0.5, 1.5, 3.0)):
        lr = log_ratios(rng, n, G_, scale)
        w = np.exp(lr)
        c = {s: estimators.weights(s, lr, EPS) for s in ("gmc", "tic_trunc", "tic_mask")}
        b1 = {s: bias.beta_1(cs, w) for s, cs in c.items()}
        scale_ = 1 + w.mean(-1)
        tol_v = 1e-12 * scale_
        viol += int(np.sum((b1["gmc"] > b1["tic_trunc"] + tol_v) | (b1["tic_trunc"] > b1["tic_mask"] + tol_v)))
        total += n
        wbar, wmax = w.mean(-1), w.max(-1)
        diffs = [b1["tic_trunc"] - t_trunc(w=w, eps=EPS).mean(-1), b1["tic_mask"] - t_mask(w=w, eps=EPS).mean(-1),
                 bias.beta_inf(c["tic_trunc"], w) - bi_trunc(wbar=wbar, wmax=wmax, eps=EPS),
                 bias.beta_inf(c["tic_mask"], w) - bi_mask(wbar=wbar, wmax=wmax, eps=EPS)]
        table_err = max(table_err, max(float(np.max(np.abs(x) / scale_)) for x in diffs))
    tol = 1e-12
    ok = viol == 0 and table_err <= 1e-10
    return Result.of(
        ok,
        expected={"violations": 0, "table err": 0.0},
        measured={"violations": viol, "table err": table_err, "groups": total},
        tolerance={"ordering": tol, "table": 1e-10},
        evidence=(f"{total} random groups (G=1..64, log-ratio sd 0.1..3) through estimators.weights: {viol} "
                  f"violations of beta_1(GMC)<=beta_1(trunc)<=beta_1(mask); §2 table beta_1/beta_inf of trunc and "
                  f"mask (lambdified) match the definitions to {fmt(table_err)} relative"),
    )


