"""A small exact model whose positions share parameters, and the search for the LLM's collapse in it.

The long-horizon E2 (:mod:`simulators.token_mdp.factorised`) gives every position its own logits,
so a step taken on one position cannot move another. An LLM shares every parameter. This model
keeps E2's task (V tokens, H positions, reward 1{every token right}, a warm start at
``J(theta_0) >= J_start``) and ties the positions'
logits through one low-dimensional parameter:

    logits[h, v] = sum_j theta[v, j] psi[h, j],   psi[h] = (1, xi_h),   xi_h ~ N(0, 1/(r-1)) iid (fixed)

with ``theta`` of shape ``(V, r)``. The right token at position h is the greedy token of a fixed
random teacher ``theta*`` of the same class (``argmax_v logits*[h, v]``), so every sharing can
represent the right sequence, and the positions' right tokens differ. ``r = 1`` ties every
position to the same logits (one vector of V numbers for the whole sequence), ``1 < r < H``
shares an r-dimensional code, and
``rank = "H"`` gives ``psi = I_H``, the factorised E2 itself (no sharing). The policy is still a
product over positions, so every quantity a run records is exact without enumerating the V^H
outcomes: ``J = prod_h pi_h(target)``, ``grad J = J sum_h (e_target - pi_h) psi_h`` (per token row),
and the trajectory chi^2 ``prod_h E_b rho_h^2 - 1`` (:meth:`SharedSoftmaxMDP.enumerate_J` checks
J against the V^H enumeration in the tests). Training is asynchronous as in
:func:`simulators.async_factorised.async_factorised`: at step t the group is drawn from
``pi_{theta_{t-d}}``, ratios and scores at ``theta_t``, weights from :func:`estimators.weights`,
leave-one-out advantages, any optimiser of :mod:`simulators.optim`.

``python -m simulators.sweep shared_collapse [--quick]`` searches (H, V, sharing, lr, d, optimiser)
for the LLM's pattern (:func:`claims.shared_model.pattern_table` reads the results): IS and GMC
collapse under Adam while TOPR holds, and GMC holds under SGD at a drift at least as large.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import log_softmax, softmax

import estimators
from estimators import get_scheme

from ._validate import check_positive_int
from .optim import Optimizer, OptimizerConfig
from .sweep_spec import Sweep, derive_seed


class SharedSoftmaxMDP:
    """Log-linear softmax policy over V^H sequences with logits shared through ``psi`` (module docstring).

    >>> env = SharedSoftmaxMDP(2, 4, 2)
    >>> th = env.start(0.3)
    >>> bool(0.3 <= env.J_batch(th[None])[0] < 0.35)
    True
    """

    def __init__(self, V: int, H: int, rank, feature_seed: int = 0):
        self.V = check_positive_int(V, "V (vocabulary size)", 2)
        self.H = check_positive_int(H, "H (horizon)", 1)
        rank = "H" if rank == "H" else (int(rank) if isinstance(rank, str) and rank.isdigit() else rank)
        if rank == "H":
            self.psi = np.eye(self.H)
        else:
            r = check_positive_int(rank, "rank r (shared parameters per token)", 1)
            xi = np.random.default_rng([feature_seed, self.H, r]).normal(0.0, 1.0, (self.H, r - 1))
            self.psi = np.column_stack([np.ones(self.H), xi / np.sqrt(max(r - 1, 1))])
        self.rank = rank
        self.r = self.psi.shape[1]
        # the right sequence is a teacher's greedy output in the same class (so the sharing can represent it)
        teacher = np.random.default_rng([feature_seed, self.H, self.V, 1]).normal(0.0, 1.0, (self.V, self.r))
        self.target = self.logits(teacher[None])[0].argmax(-1)

    # ------------------------------------------------------------------ parameters and exact sums

    def logits(self, theta) -> np.ndarray:
        """``(B, H, V)`` from ``theta`` ``(B, V, r)``."""
        return np.einsum("hr,bvr->bhv", self.psi, np.asarray(theta, float))

    def start(self, J_start: float, lr: float = 0.02, max_steps: int = 50_000) -> np.ndarray:
        """The warm start ``theta_0`` ``(V, r)``: exact gradient ascent on J from theta = 0 (the uniform
        policy), stopped at the first step where ``J >= J_start`` (as the LLM study starts from a
        warm-started model). Raises if this sharing cannot reach ``J_start`` within ``max_steps``."""
        if not (0 < J_start < 1):
            raise ValueError(f"J_start must be in (0, 1), got {J_start!r}")
        th = np.zeros((1, self.V, self.r))
        for _ in range(max_steps):
            J = float(self.J_batch(th)[0])
            if J >= J_start:
                return th[0]
            g = self.grad_J_batch(th)
            th = th + lr * g / max(J, 1e-300)  # ascent on log J: the same fixed points, faster from J ~ 0
        raise ValueError(f"rank {self.rank!r} (H = {self.H}, V = {self.V}) did not reach J = {J_start} "
                         f"in {max_steps} steps (J = {J:.3g})")

    def J_batch(self, theta) -> np.ndarray:
        lp = log_softmax(self.logits(theta), -1)
        return np.exp(lp[:, np.arange(self.H), self.target].sum(-1))

    def grad_J_batch(self, theta) -> np.ndarray:
        """``(B, V, r)``: ``J sum_h (e_target - pi_h) psi_h``."""
        pi = softmax(self.logits(theta), -1)
        e = np.zeros_like(pi)
        e[:, np.arange(self.H), self.target] = 1.0
        return self.J_batch(theta)[:, None, None] * np.einsum("bhv,hr->bvr", e - pi, self.psi)

    def chi2_batch(self, theta, theta_b) -> np.ndarray:
        """Trajectory ``sigma^2 = prod_h E_b rho_h^2 - 1``, exact, ``(B,)``."""
        lp, lpb = log_softmax(self.logits(theta), -1), log_softmax(self.logits(theta_b), -1)
        per = (np.exp(lpb) * np.expm1(2 * (lp - lpb))).sum(-1)  # E_b rho_h^2 - 1
        return np.expm1(np.log1p(per).sum(-1))

    def enumerate_J(self, theta) -> float:
        """J of one ``theta`` ``(V, r)`` by summing pi(o) 1{o = target} over all V^H outcomes (tests)."""
        from .token_mdp.env import outcomes

        o = outcomes(self.V, self.H)
        lp = log_softmax(self.logits(np.asarray(theta)[None])[0], -1)
        logp = lp[np.arange(self.H), o].sum(-1)
        return float(np.exp(logp)[(o == self.target).all(-1)].sum())

    # ------------------------------------------------------------------ groups

    def sample(self, rng, theta_b_row, G: int) -> np.ndarray:
        cdf = np.cumsum(softmax(self.logits(theta_b_row[None])[0], -1), -1)
        u = rng.random((G, self.H))
        return (u[..., None] > cdf[:, :-1]).sum(-1)

    def group_estimate(self, tokens, theta, theta_b, estimator: str, eps: float, params: dict | None = None):
        """``(g_hat (B, V, r), log-ratios (B, G))`` for groups ``tokens`` ``(B, G, H)`` (one group per run);
        ``params``: the estimator's knobs (:func:`estimators.weights`' ``**params``; None: its defaults)."""
        B, G, H = tokens.shape
        lp, lpb = log_softmax(self.logits(theta), -1), log_softmax(self.logits(theta_b), -1)
        hh = np.arange(H)
        lr = (lp - lpb)[np.arange(B)[:, None, None], hh[None, None], tokens].sum(-1)  # (B, G)
        r = (tokens == self.target).all(-1).astype(float)
        A = estimators.advantages(r, "loo")
        kw = {"advantages": A} if get_scheme(estimator).needs_advantages else {}
        c = np.exp(lr) if estimator == "is" else estimators.weights(estimator, lr, eps, **kw, **(params or {}))
        pi = softmax(self.logits(theta), -1)  # (B, H, V)
        oh = np.zeros((B, G, H, self.V))
        np.put_along_axis(oh, tokens[..., None], 1.0, -1)
        cA = c * A  # (B, G)
        score_sum = np.einsum("bg,bghv->bhv", cA, oh) - cA.sum(-1)[:, None, None] * pi
        return np.einsum("bhv,hr->bvr", score_sum, self.psi) / G, lr


def run_async(env: SharedSoftmaxMDP, theta0, estimator: str, cfg: OptimizerConfig, G: int, eps: float, d: int,
              T: int, seeds, setting_seed: int = 0, prompts_per_step: int = 1, params: dict | None = None) -> dict:
    """Every seed's asynchronous run at once (module docstring). Records ``(S, T + 1)`` J, and per step
    chi^2, drift ``||theta_t - theta_{t-d}||``, ``||g_hat||`` and the step norm, ``(S, T)``. Each step
    draws ``prompts_per_step`` groups of ``G`` (B = ``prompts_per_step``) and averages their estimates; one group
    draws exactly the random numbers it drew before the option existed. ``params``: the estimator's knobs."""
    B = check_positive_int(prompts_per_step, "prompts_per_step (groups per step)", 1)
    S = len(seeds)
    rngs = [np.random.default_rng([setting_seed, int(s)]) for s in seeds]
    theta = np.broadcast_to(theta0, (S,) + theta0.shape).copy()
    hist = [theta.copy()]
    opt = Optimizer(cfg, theta)
    rec = {k: np.zeros((S, T)) for k in ("chi2", "drift", "ghat_norm", "step_norm")}
    J = np.zeros((S, T + 1))
    J[:, 0] = env.J_batch(theta)
    for t in range(T):
        tb = hist[max(0, len(hist) - 1 - d)]
        tokens = np.stack([env.sample(rng, tb[i], G * B) for i, rng in enumerate(rngs)]).reshape(S * B, G, env.H)
        g, _ = env.group_estimate(tokens, np.repeat(theta, B, 0), np.repeat(tb, B, 0), estimator, eps, params)
        g = g.reshape(S, B, *g.shape[1:]).mean(1)
        g = np.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
        new = opt.step(theta, g)
        rec["chi2"][:, t] = env.chi2_batch(theta, tb)
        rec["drift"][:, t] = np.sqrt(((theta - tb) ** 2).sum((1, 2)))
        rec["ghat_norm"][:, t] = np.sqrt((g**2).sum((1, 2)))
        rec["step_norm"][:, t] = np.sqrt(((new - theta) ** 2).sum((1, 2)))
        theta = new
        hist.append(theta.copy())
        J[:, t + 1] = env.J_batch(theta)
    return {"J": J, **rec}


# --------------------------------------------------------------------------- the sweep

SCHEMES = ["is", "gmc", "topr", "tic_trunc"]
OPTIMIZERS = {"sgd": [0.5, 2.0, 8.0], "adam": [0.03, 0.1, 0.3, 1.0]}


def collapsed(J: np.ndarray, J0: float, frac: float, tail: float) -> np.ndarray:
    """A run collapses when J stays below ``frac * J0`` over the last ``tail`` share of its steps."""
    k = max(1, round(tail * (J.shape[1] - 1)))
    return (J[:, -k:] < frac * J0).all(-1)


def run_setting(setting: dict, seeds: list[int]) -> pd.DataFrame:
    """Every (scheme, optimiser, lr) for one (H, V, rank, d): one row per run."""
    env = SharedSoftmaxMDP(int(setting["V"]), int(setting["H"]), setting["rank"])
    theta0 = env.start(float(setting["J_start"]))
    J0 = float(env.J_batch(theta0[None])[0])
    rows = []
    for opt, lrs in setting["optimizers"].items():
        for lr in lrs:
            cfg = OptimizerConfig(opt, lr=float(lr))
            for estimator in setting["schemes"]:
                rec = run_async(env, theta0, estimator, cfg, int(setting["G"]), float(setting["eps"]),
                                int(setting["d"]), int(setting["T"]), seeds, derive_seed(0, setting))
                col = collapsed(rec["J"], J0, float(setting["collapse_frac"]), float(setting["tail"]))
                for i, s in enumerate(seeds):
                    rows.append({"seed": int(s), "scheme": estimator, "optimizer": opt, "lr": float(lr), "J0": J0,
                                 "final_J": float(rec["J"][i, -1]), "min_J": float(rec["J"][i].min()),
                                 "tail_J": float(rec["J"][i, -max(1, int(setting["T"]) // 4):].mean()),
                                 "collapsed": bool(col[i]), "avg_chi2": float(rec["chi2"][i].mean()),
                                 "max_chi2": float(rec["chi2"][i].max()),
                                 "avg_drift": float(rec["drift"][i].mean()),
                                 "avg_step_norm": float(rec["step_norm"][i].mean()),
                                 "J_curve": rec["J"][i, :: max(1, int(setting["T"]) // 20)].astype(np.float32)
                                 .tolist()})
    return pd.DataFrame(rows)


_FIXED = {"G": 8, "eps": 0.2, "J_start": 0.25, "T": 150, "schemes": SCHEMES, "optimizers": OPTIMIZERS,
          "collapse_frac": 0.5, "tail": 0.25}

SETTINGS = {
    "shared_collapse": {
        "full": {"grid": {"H": [8, 16], "V": [2, 4], "rank": ["2", "4", "H"], "d": [4, 32]}, "fixed": _FIXED,
                 "seeds": list(range(10))},
        "quick": {"grid": {"H": [4], "V": [2], "rank": ["2", "H"], "d": [4]},
                  "fixed": {**_FIXED, "T": 20, "optimizers": {"sgd": [2.0], "adam": [0.1]}}, "seeds": [0, 1]},
    },
}

COLUMNS = {
    "H": "horizon", "V": "vocabulary size", "rank": "shared parameters per token r, as text ('1': every position tied; "
    "'H': the factorised E2, nothing shared)", "d": "rollout delay (fixed)", "seed": "run seed (paired across schemes)",
    "scheme": "weighting scheme", "optimizer": "sgd or adam (simulators.optim)", "lr": "step size",
    "J0": "J(theta_0): the warm start's J (>= J_start)", "final_J": "J at the last step (exact)",
    "min_J": "min_t J (exact)",
    "tail_J": "mean J over the last quarter of the steps", "collapsed": "J < collapse_frac J0 over the last tail "
    "share of the steps", "avg_chi2": "mean_t trajectory chi^2 (exact)", "max_chi2": "max_t chi^2",
    "avg_drift": "mean_t ||theta_t - theta_{t-d}||", "avg_step_norm": "mean_t ||theta_{t+1} - theta_t||",
    "J_curve": "J every T/20 steps (float32)",
}

SWEEPS = [Sweep("shared_collapse", "Shared-parameter softmax model: search for the LLM's collapse pattern "
                "(IS and GMC collapse under Adam, TOPR holds, GMC holds under SGD)", SETTINGS["shared_collapse"],
                run_setting, COLUMNS)]

__all__ = ["SWEEPS", "SharedSoftmaxMDP", "collapsed", "run_async", "run_setting"]
