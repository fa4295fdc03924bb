"""Every registered estimator, trajectory-level and token-level, measured on E1 and E2 under a
static delay: exact bias vector and second moment by enumeration where the estimator is a
function of one group, Monte Carlo with standard errors where a batch statistic couples
groups (``seq_tis_bn`` and ``m2po`` with B > 1 groups per batch).

One group's estimate is the gradient of the registered surrogate itself
(:func:`estimators.losses.policy_loss`), never a second copy of a weighting: the per-token
log-probs ``l_{i,t}`` of a group are a leaf tensor, autograd gives ``d loss / d l_{i,t}``, and
the chain rule ``g_hat = -sum_{i,t} (d loss / d l_{i,t}) grad_theta log pi(o_{i,t})`` gives the
estimate (exact, the environment's per-token scores being closed-form). The loss of a call
averages over the groups it holds, so the estimate of one group is that gradient times the
number of groups in the call.

* E1 (bandit) is a one-token sequence (H = 1); E2 (token tree MDP) has H tokens.
* Token-level losses average over tokens (``1/|o|``); every |o| = H here, so their estimate is
  multiplied by H: on-policy every loss then has mean grad J(theta) exactly.
* The bias is ``E g_hat - grad J(theta)`` (THEORY §1: with leave-one-out advantages IS is
  unbiased, so this is ``b(c)`` of §2); ``bias_b_norm`` compares with grad J(theta_b), the
  token-level reference of THEORY §6.
* Membership in C_eps (trajectory schemes) is the registry's exact rule
  (:meth:`estimators.Scheme.member` with the batch's number of groups); the table's
  ``max_norm_ratio`` = max ||g_hat|| / ((1+eps) M) is the measured side of Lemma 2.

``python -m simulators.sweep peers`` writes ``results/sim/peers/`` (resumable, never overwritten).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from scipy.special import softmax

import estimators
from estimators import scheme_names
from estimators.losses import CORRECTIONS_2026, SEQUENCE_SUM_LOSSES, TOKEN_LOSSES, is_batch_coupled, policy_loss

from . import theory
from .core import bound_M, configurations
from .delay import static_behaviour
from .delay_sweeps import DELAY_SCHEMES, make_instance
from .sweep_spec import Sweep, derive_seed

TRAJECTORY = [*DELAY_SCHEMES, *scheme_names(family="peer"), *scheme_names(family="variant")]
"""Every trajectory scheme: THEORY §2's members of C_eps and IS, the peers, and the mechanism
study's GMC variants (at their default knobs)."""
TOKEN = ["token_clip", "gspo", "cispo", "opsm", "m2po", "icepop", "sapo", "dppo_tv"]
TOKEN_2026 = list(CORRECTIONS_2026)
"""The 2026 corrections, measured by their own sweep (``peers_2026``) so that the committed peers
table is left as it was."""

LENGTH_KNOB = {"seq_geo_mask": "length"}
"""Schemes whose knob is the completion length (a trajectory scheme does not see it): set to the
environment's H (E1: 1, E2: every completion has H tokens), the rest at their defaults."""


def options_for(estimator: str, H: int) -> dict | None:
    """The knobs ``name`` runs with on an environment of horizon ``H``."""
    return {LENGTH_KNOB[estimator]: float(H)} if estimator in LENGTH_KNOB else None


def _extremal_ratios(estimator: str) -> list[float]:
    """Ratios where a scheme's weight peaks inside the grid's gaps (VESPO: w = k / lambda per sign)."""
    if estimator == "vespo":
        p = estimators.params.defaults(estimator)
        return [p["k_pos"] / p["lambda_pos"], p["k_neg"] / p["lambda_neg"]]
    return []


# --------------------------------------------------------------------------- per-token view


def token_view(env, theta, theta_b) -> dict:
    """Per-outcome, per-token arrays of a finite-outcome environment (one prompt).

    ``lp`` and ``lpb`` ``(K, H)``: log pi_theta and log pi_b of each token; ``tok_scores``
    ``(K, H, P)``: grad_theta log pi_theta(o_h | node_h); ``rewards`` ``(K,)``; ``log_p_b`` ``(K,)``;
    ``scores`` ``(K, P)`` (their sum over h); ``grad_J``, ``grad_J_b`` ``(P,)``.
    """
    theta, theta_b = env.check_theta(theta), env.check_theta(theta_b, "theta_b")
    if hasattr(env, "token_log_probs"):  # E2
        lp, lpb = env.token_log_probs(theta), env.token_log_probs(theta_b)
        n, V = env.theta_shape
        pi = softmax(theta, axis=-1)
        K, H = lp.shape
        S = np.zeros((K, H, n, V))
        k, h = np.arange(K)[:, None], np.arange(H)[None, :]
        S[k, h, env.nodes, :] = -pi[env.nodes]
        S[k, h, env.nodes, env.tokens] += 1.0
        tok_scores = S.reshape(K, H, n * V)
        rewards = env.rewards
    else:  # E1: one token, the arm
        if getattr(env, "n_prompts", 1) != 1:
            raise ValueError("token_view needs a single-prompt bandit")
        lp, lpb = env.log_probs(theta)[:, None], env.log_probs(theta_b)[:, None]
        tok_scores = env.scores(theta)[:, None, :]
        rewards = np.asarray(env.rewards, dtype=np.float64)
    return {"lp": lp, "lpb": lpb, "tok_scores": tok_scores, "rewards": rewards, "log_p_b": lpb.sum(-1),
            "scores": tok_scores.sum(1), "grad_J": np.asarray(env.grad_J(theta)).ravel(),
            "grad_J_b": np.asarray(env.grad_J(theta_b)).ravel()}


def group_estimates(view: dict, tuples: np.ndarray, eps: float, estimator: str, prompts_per_step: int = 1,
                    options: dict | None = None, advantage: str = "loo") -> np.ndarray:
    """``g_hat`` of every group ``tuples (n, G)`` (outcome indices), shape ``(n, P)``.

    A batch-coupled loss is called on consecutive blocks of ``prompts_per_step`` groups (one batch
    each; ``n`` must be a multiple); any other loss on all groups at once (its value is the
    mean of the groups' values, so the split does not matter).
    """
    n, G = tuples.shape
    coupled = is_batch_coupled(estimator)
    B = prompts_per_step if coupled else n
    if n % B:
        raise ValueError(f"{n} groups do not split into batches of {B}")
    H = view["lp"].shape[1]
    scale = H if estimator in TOKEN_LOSSES and estimator not in SEQUENCE_SUM_LOSSES else 1
    rows = tuples.reshape(-1)
    adv_all = estimators.advantages(view["rewards"][tuples], advantage)  # (n, G)
    out = np.empty((n, view["tok_scores"].shape[-1]))
    step = B if coupled else max(B, 1)
    for g0 in range(0, n, step):
        sl = slice(g0 * G, (g0 + step) * G)
        logp = torch.tensor(view["lp"][rows[sl]], dtype=torch.float64, requires_grad=True)
        old = torch.tensor(view["lpb"][rows[sl]], dtype=torch.float64)
        adv = torch.from_numpy(np.ascontiguousarray(adv_all[g0:g0 + step])).reshape(-1)
        loss = policy_loss(estimator, logp, old, torch.ones_like(old), adv, G, eps, **(options or {})).loss
        (coef,) = torch.autograd.grad(loss, logp)
        k = step
        contrib = np.einsum("rh,rhp->rp", coef.numpy(), view["tok_scores"][rows[sl]])
        out[g0:g0 + step] = -k * scale * contrib.reshape(step, G, -1).sum(1)
    return out


# --------------------------------------------------------------------------- moments


def _summary(view, eps, g_mean, cov, second, second_se, max_norm, extra) -> dict:
    M = float(bound_M(view["rewards"], view["scores"])[0])
    out = dict(extra)
    for key, ref in (("bias", view["grad_J"]), ("bias_b", view["grad_J_b"])):
        b = g_mean - ref
        nb = float(np.linalg.norm(b))
        se = 0.0 if cov is None else (float(np.sqrt(max((b / nb) @ cov @ (b / nb), 0.0))) if nb > 0
                                      else float(np.sqrt(max(np.trace(cov), 0.0))))
        out[f"{key}_norm"], out[f"{key}_norm_se"] = nb, se
    out["bias_vec"] = (g_mean - view["grad_J"]).tolist()
    out.update(second_moment=float(second), second_moment_se=float(second_se), max_norm=float(max_norm), M=M,
               max_norm_ratio=float(max_norm / theory.estimator_norm_bound(eps, M)) if M > 0 else float("nan"),
               grad_J_norm=float(np.linalg.norm(view["grad_J"])),
               grad_J_b_norm=float(np.linalg.norm(view["grad_J_b"])))
    return out


def exact_moments(view: dict, G: int, eps: float, estimator: str, options: dict | None = None) -> dict:
    """Exact mean, second moment and max norm of one group's estimate (one group per batch)."""
    K = view["lp"].shape[0]
    counts, tuples, log_coef = configurations(G, K)
    pmf = np.exp(log_coef + counts @ view["log_p_b"])
    g = group_estimates(view, np.asarray(tuples), eps, estimator, 1, options)
    sq = (g**2).sum(-1)
    return _summary(view, eps, pmf @ g, None, pmf @ sq, 0.0, math.sqrt(sq.max()),
                    {"method": "exact", "n": len(counts), "prob_total": float(pmf.sum())})


def mc_moments(view: dict, G: int, eps: float, estimator: str, prompts_per_step: int, n_batches: int,
               rng: np.random.Generator, options: dict | None = None) -> dict:
    """Monte Carlo over ``n_batches`` iid batches of ``prompts_per_step`` groups (batches are the
    independent units of the standard errors: groups of one batch share its statistic)."""
    K = view["lp"].shape[0]
    p_b = np.exp(view["log_p_b"])
    p_b = p_b / p_b.sum()
    tuples = rng.choice(K, size=(n_batches * prompts_per_step, G), p=p_b)
    g = group_estimates(view, tuples, eps, estimator, prompts_per_step, options)
    g = g.reshape(n_batches, prompts_per_step, -1)
    per_batch = g.mean(1)  # (n_batches, P)
    sq = (g**2).sum(-1).mean(1)
    cov = np.cov(per_batch, rowvar=False, ddof=1) / n_batches
    return _summary(view, eps, per_batch.mean(0), np.atleast_2d(cov), sq.mean(), sq.std(ddof=1) / math.sqrt(n_batches),
                    math.sqrt((g**2).sum(-1).max()), {"method": "mc", "n": n_batches * prompts_per_step})


# --------------------------------------------------------------------------- membership by enumeration


def grid_max_mass(estimator: str, eps: float, G: int = 3, prompts_per_step: int = 1) -> tuple[float, list]:
    """Largest group mass ``(1/G) sum_i c_i`` over an enumerated grid of ratio vectors (the
    counterexample search of claim 2): every G-tuple of ratios from {1e-9, 0.5, 1, 2, 10, 1e3,
    1e9}, the edges of the scheme's thresholds (1+eps, C, lo, hi, each +-1e-9) and the ratios where
    its weight peaks (:func:`_extremal_ratios`), with every
    advantage sign pattern for schemes that read advantages. With ``prompts_per_step`` B > 1 the
    other B - 1 groups of the batch hold ratios 1e-9 (the extremal batch of a batch-normalised
    scheme) or 1; a batch-coupled scheme is called on one batch at a time. Returns the maximum and
    the ratio vector (and advantages) attaining it."""
    import itertools

    spec = estimators.get_scheme(estimator)
    edges = [1 + eps] + [v for k, v in estimators.params.defaults(estimator).items()]
    edges += _extremal_ratios(estimator)
    vals = sorted({1e-9, 0.5, 1.0, 2.0, 10.0, 1e3, 1e9}
                  | {max(e + d, 1e-12) for e in edges for d in (-1e-9, 0.0, 1e-9)})
    lr = np.log(np.array(list(itertools.product(vals, repeat=G))))
    signs = ([np.full(G, -1.0), np.full(G, 1.0)] + [np.array(s) for s in itertools.product([-1.0, 1.0], repeat=G)]
             if spec.needs_advantages else [None])
    best, arg = -math.inf, None
    for A in signs:
        adv = None if A is None else np.broadcast_to(A, lr.shape)
        if not spec.batch_coupled:  # rows are independent groups: one call for the whole grid
            mass = estimators.weights(estimator, lr, eps, adv).mean(-1)
            i = int(np.argmax(mass))
            if mass[i] > best:
                best, arg = float(mass[i]), [np.exp(lr[i]).tolist(), None if A is None else A.tolist()]
            continue
        for fill in ((1e-9, 1.0) if prompts_per_step > 1 else (1.0,)):
            for i, row in enumerate(lr):
                batch = np.full((prompts_per_step, G), math.log(fill))
                batch[0] = row
                a = None if A is None else np.broadcast_to(A, batch.shape)
                m = float(estimators.weights(estimator, batch, eps, a)[0].mean())
                if m > best:
                    best, arg = m, [np.exp(row).tolist(), None if A is None else A.tolist(), f"others {fill:g}"]
    return best, arg


# --------------------------------------------------------------------------- the sweep


CASES = {
    "E1": {"env": "bandit", "instance": "mild", "G": 8},
    "E2": {"env": "token_mdp", "instance": "threshold", "G": 4},
}
"""The E1 and E2 instances of the static-delay sweeps (F4), with their group sizes."""


def run_peers(setting: dict, seeds: list[int]) -> pd.DataFrame:
    case = CASES[setting["case"]]
    return _measure(setting, seeds, list(TRAJECTORY) + (list(TOKEN) if case["env"] == "token_mdp" else []))


def run_peers_2026(setting: dict, seeds: list[int]) -> pd.DataFrame:
    """The 2026 corrections (:data:`estimators.losses.CORRECTIONS_2026`) on E1 and E2, measured as
    :func:`run_peers` measures the others (on E1 a completion is one token, so the prefix and
    sequence rules act on that token)."""
    return _measure(setting, seeds, list(TOKEN_2026))


def _measure(setting: dict, seeds: list[int], names: list[str]) -> pd.DataFrame:
    case = CASES[setting["case"]]
    env, theta, _, u = make_instance(case["env"], case["instance"])
    theta_b = static_behaviour(theta, setting["Delta"], u)
    view = token_view(env, theta, theta_b)
    G, eps, Bmc = case["G"], setting["eps"], setting["batch_groups"]
    H = view["lp"].shape[1]
    rows = []
    for name in names:
        level = "trajectory" if name in estimators.SCHEMES else "token"
        opts = options_for(name, H)
        runs = [(1, None)]
        if is_batch_coupled(name):
            runs += [(Bmc, s) for s in seeds]
        for B, seed in runs:
            if B == 1:
                r = exact_moments(view, G, eps, name, opts)
            else:
                rng = np.random.default_rng(derive_seed(seed, setting, B, sum(map(ord, name))))
                r = mc_moments(view, G, eps, name, B, setting["n_batches"], rng, opts)
            spec = estimators.SCHEMES.get(name)
            grid = grid_max_mass(name, eps, 3, B)[0] if spec else float("nan")
            rows.append({"scheme": name, "level": level, "env": case["env"], "instance": case["instance"],
                         "G": G, "batch_groups": B, "seed": -1 if seed is None else seed, **r,
                         "sup_mass": spec.group_mass_sup(eps, B, **(opts or {})) if spec else float("nan"),
                         "grid_max_mass": grid,
                         "in_class": bool(spec.member(eps, B, **(opts or {}))) if spec else None})
    return pd.DataFrame(rows)


COLUMNS = {
    "case": "E1 (bandit 'mild', G = 8) or E2 (token tree MDP 'threshold', V = 2, H = 4, G = 4)",
    "Delta": "static delay: theta_b = theta - Delta u", "eps": "threshold 1+eps of the trajectory schemes",
    "scheme": "registered estimator (estimators.losses.loss_names)", "level": "trajectory or token",
    "batch_groups": "groups per batch B (the batch statistic of seq_tis_bn / m2po; 1 = one group, exact)",
    "method": "exact (enumeration of count vectors) or mc (Monte Carlo over batches)",
    "n": "count vectors enumerated, or groups drawn", "seed": "Monte Carlo seed (-1: exact)",
    "bias_norm": "||E g_hat - grad J(theta)|| (THEORY §2's bias b(c) for trajectory schemes)",
    "bias_norm_se": "its standard error (delta method; 0 when exact)",
    "bias_b_norm": "||E g_hat - grad J(theta_b)|| (THEORY §6's token-level reference)", "bias_b_norm_se": "s.e.",
    "bias_vec": "the bias vector E g_hat - grad J(theta), flattened like theta (exact, or its MC estimate)",
    "second_moment": "E ||g_hat||^2 of one group's estimate", "second_moment_se": "s.e. (0 when exact)",
    "max_norm": "max ||g_hat|| over the groups enumerated / drawn", "M": "(max r - min r) max_k ||s_k||",
    "max_norm_ratio": "max ||g_hat|| / ((1+eps) M): <= 1 for every member of C_eps (Lemma 2)",
    "sup_mass": "exact sup over ratios of one group's mass (1/G) sum c_i (trajectory schemes)",
    "in_class": "member of C_eps (sup_mass <= 1+eps) with this batch size; None for token-level losses",
    "grid_max_mass": "largest group mass over the enumerated ratio grid (G = 3; simulators.peers.grid_max_mass): "
                     "<= 1+eps for members, > 1+eps exhibits the counterexample for non-members",
    "grad_J_norm": "||grad J(theta)||", "grad_J_b_norm": "||grad J(theta_b)||",
    "prob_total": "sum of the enumerated pmf (1 up to rounding)",
}

DELTAS = [0.0, 0.5, 1.0, 2.0, 3.0, 4.0]

SETTINGS = {
    "peers": {
        "full": {"grid": {"case": ["E1", "E2"], "Delta": DELTAS, "eps": [0.2]},
                 "fixed": {"batch_groups": 8, "n_batches": 4000}, "seeds": [0]},
        "quick": {"grid": {"case": ["E1", "E2"], "Delta": [0.0, 2.0], "eps": [0.2]},
                  "fixed": {"batch_groups": 4, "n_batches": 300}, "seeds": [0]},
    },
}

SETTINGS["peers_2026"] = SETTINGS["peers"]

SWEEPS = [
    Sweep("peers_2026", "E1/E2: the 2026 corrections (p3o, ctpo, minpro, trm_k2, trm_k3, dispo, oapl) measured as "
          "the peers sweep measures the others: exact bias and second moment, Monte Carlo for p3o's batch ESS",
          SETTINGS["peers_2026"], run_peers_2026, COLUMNS),
    Sweep("peers", "E1/E2: every registered estimator (published peers beside GMC/TIC) under a static delay: "
          "exact bias and second moment, Monte Carlo where a batch statistic couples groups",
          SETTINGS["peers"], run_peers, COLUMNS),
]
