"""The candidates' laws against G at a fixed ratio law, on the exact models (docs/PREREGISTRATION-WARNING.md).

A batch is B groups of G trajectories drawn iid from one behaviour policy. A statistic that is a mean over the
batch's N = B G trajectories (or their tokens) of one function of each has a law that depends on N alone, never
on how N is cut into groups: its mean is the function's expectation at every (B, G), its spread falls as
N^(-1/2). The group ESS fraction, a mean over groups of a function of G ratios, has a mean that moves with G
(from 1 at G = 1 towards 1 / (1 + chi^2)); the largest share of one trajectory moves with N. Both models:

* **E3** (lognormal ratios): log w ~ N(-D^2/2, D^2), D^2 = log(1 + chi^2); one "token" per trajectory, so the
  per-token KL is the trajectory's k3, with E = D^2 / 2; E(-2 mean log w) = D^2; E(mean w^2 - 1) = chi^2.
* **E5** (:class:`simulators.shared_softmax.SharedSoftmaxMDP`, H = 8, V = 4, r = 4, the group-size study's
  frozen-pair cell): per-token k3 with E = (1/H) sum_h KL(pi_b,h || pi_h), exact.

:func:`law` gives, per G, the Monte Carlo mean, standard deviation and standard error of each statistic over
``reps`` batches and the exact expectation where one exists; ``tests/test_warning_study.py`` checks them.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import log_softmax

GS = (4, 8, 16, 32, 64, 128)
N_ISO = 128
"""The iso-samples batch: B = N_ISO / G groups (the group-size grid's design)."""


def batch_statistics(seq_lr: np.ndarray, token_lr: np.ndarray | None = None) -> dict:
    """The candidates of one batch from its trajectory log-ratios ``seq_lr`` ``(B, G)`` and, where there are
    tokens, their per-token log-ratios ``token_lr`` ``(B, G, H)`` (every token a completion token); E3 has none
    and reads each trajectory as one token."""
    from estimators import diagnostics

    lr = np.asarray(seq_lr, float)
    tok = lr[..., None] if token_lr is None else np.asarray(token_lr, float)
    w = np.exp(lr)
    lrf = lr.ravel()
    top = lrf.max()
    return {"kl": float(np.mean(np.expm1(tok) - tok)), "chi2_log": float(-2.0 * lrf.mean()),
            "chi2": float(np.mean(w**2) - 1.0), "abs_log_w": float(np.abs(lrf).mean()),
            "max_share": float(1.0 / np.exp(lrf - top).sum()),
            "ess": float(diagnostics(lr, 0.2)["ess_frac_mean"])}


def e3_law(chi2: float = 1.0, Gs=GS, reps: int = 2000, seed: int = 0, B: int | None = None) -> dict:
    """E3 at sequence chi^2 ``chi2``: per G, each statistic's mean, sd and se over ``reps`` batches of B groups
    (``B`` None: iso-samples, N_ISO / G), and the exact expectations of the pooled means."""
    D2 = math.log1p(chi2)
    D = math.sqrt(D2)
    out = {}
    for G in Gs:
        b = N_ISO // G if B is None else B
        rng = np.random.default_rng([seed, G, b])
        rows = [batch_statistics(rng.normal(-D2 / 2, D, (b, G))) for _ in range(reps)]
        out[G] = _moments(rows, B=b)
    exact = {"kl": D2 / 2, "chi2_log": D2, "chi2": chi2,
             "abs_log_w": _abs_normal_mean(-D2 / 2, D)}
    return {"model": "E3", "chi2": chi2, "exact": exact, "per_G": out}


def e5_law(delta: float = 1.5, Gs=GS, reps: int = 2000, seed: int = 0, B: int | None = None) -> dict:
    """E5 at the frozen pair (theta, theta - delta u) of the group-size study's predictions (u a fixed random unit
    direction, seed 11): per G, each statistic over ``reps`` batches, and the exact per-token KL, chi2_log's
    expectation 2 sum_h KL_h and the trajectory chi^2."""
    from simulators.shared_softmax import SharedSoftmaxMDP

    env = SharedSoftmaxMDP(4, 8, 4)
    theta = env.start(0.25)
    u = np.random.default_rng([0, 11]).normal(size=theta.shape)
    u /= np.linalg.norm(u)
    tb = theta - delta * u
    lp, lpb = log_softmax(env.logits(theta[None])[0], -1), log_softmax(env.logits(tb[None])[0], -1)
    kl_h = (np.exp(lpb) * (lpb - lp)).sum(-1)  # KL(pi_b,h || pi_h) per position
    out = {}
    for G in Gs:
        b = N_ISO // G if B is None else B
        rng = np.random.default_rng([seed, G, b, 5])
        rows = []
        for _ in range(reps):
            tok = env.sample(rng, tb, b * G).reshape(b, G, env.H)
            tlr = (lp - lpb)[np.arange(env.H), tok]
            rows.append(batch_statistics(tlr.sum(-1), tlr))
        out[G] = _moments(rows, B=b)
    exact = {"kl": float(kl_h.mean()), "chi2_log": float(2 * kl_h.sum()),
             "chi2": float(env.chi2_batch(theta[None], tb[None])[0])}
    return {"model": "E5", "delta": delta, "exact": exact, "per_G": out}


def _moments(rows: list[dict], B: int) -> dict:
    out = {"B": B}
    for k in rows[0]:
        x = np.array([r[k] for r in rows])
        out[k] = {"mean": float(x.mean()), "sd": float(x.std(ddof=1)), "se": float(x.std(ddof=1) / math.sqrt(len(x)))}
    return out


def _abs_normal_mean(mu: float, s: float) -> float:
    """E|X| for X ~ N(mu, s^2)."""
    from scipy.stats import norm

    return float(s * math.sqrt(2 / math.pi) * math.exp(-mu * mu / (2 * s * s)) + mu * (1 - 2 * norm.cdf(-mu / s)))


def law(reps: int = 2000) -> dict:
    """Both models, iso-samples (N = 128) and at a fixed B = 4 (N = 4 G, the budget grid's smallest B)."""
    return {"e3_iso": e3_law(reps=reps), "e3_B4": e3_law(reps=reps, B=4),
            "e5_iso": e5_law(reps=reps), "e5_B4": e5_law(reps=reps, B=4)}


def law_lines(doc: dict) -> list[str]:
    """The law as a table in Markdown: per model and design, each statistic's mean (sd) at every G."""
    lines = []
    for key, res in doc.items():
        Gs = list(res["per_G"])
        lines.append(f"**{res['model']}, {'iso-samples N = 128' if key.endswith('iso') else 'B = 4 (N = 4 G)'}**"
                     f" (exact: " + ", ".join(f"{k} {v:.4g}" for k, v in res["exact"].items()) + ")")
        lines.append("")
        lines.append("| statistic | " + " | ".join(f"G = {G}" for G in Gs) + " |")
        lines.append("|---|" + "---|" * len(Gs))
        for k in ("kl", "chi2_log", "chi2", "abs_log_w", "max_share", "ess"):
            cells = [f"{res['per_G'][G][k]['mean']:.4g} ({res['per_G'][G][k]['sd']:.2g})" for G in Gs]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
