"""Sweeps of the delay (E1 and E2): second moment vs a static delay (F4) and
asynchronous SGD vs the rollout delay d (F5, claim 17), as data."""
from __future__ import annotations

import numpy as np
import pandas as pd

from estimators import scheme_names

from . import theory
from ._rows import MOMENT_COLUMNS, moment_rows
from .bandit import sweeps as e1
from .delay import AsyncConfig, async_sgd, static_behaviour
from .sweep_spec import Sweep, derive_seed
from .token_mdp import sweeps as e2

ENVS = {"bandit": e1.instance, "token_mdp": e2.instance}

DELAY_SCHEMES = ["is", *scheme_names(family="theory", in_class=True)]
"""THEORY §2's members of C_eps and plain IS (not a member: the unbiased reference)."""


def make_instance(env: str, name: str):
    if env not in ENVS:
        raise ValueError(f"unknown environment {env!r}; valid: {', '.join(ENVS)}")
    return ENVS[env](name)


# --------------------------------------------------------------------------- static delay


def run_second_moment_vs_delay(setting: dict, seeds: list[int]):
    env, theta, _, u = make_instance(setting["env"], setting["instance"])
    theta_b = static_behaviour(theta, setting["Delta"], u)
    return moment_rows(env, theta, theta_b, setting["G"], setting["eps"], setting["schemes"], seeds,
                       setting["n_groups"], lambda s: derive_seed(s, setting))


_DELTAS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0]

# --------------------------------------------------------------------------- asynchronous SGD

ASYNC_START = {
    # env: instance, theta_0 (the instance's theta_b: a policy that rarely finds the reward), G, eta
    "bandit": {"instance": "rare_arm", "G": 8, "eta": 0.5},
    "token_mdp": {"instance": "target", "G": 4, "eta": 0.5},
}


def async_records(setting: dict, seeds: list[int]) -> dict:
    """Run one async setting for every delay in ``setting["delays"]`` and every seed; the optimiser
    (``optimizer``, default ``sgd``; ``eta`` its step size, default the environment's; ``clip_norm``)
    may be set per setting (:mod:`simulators.optim`)."""
    start = ASYNC_START[setting["env"]]
    env, _, theta0, _ = make_instance(setting["env"], start["instance"])
    cfg = AsyncConfig(setting["scheme"], start["G"], setting["eps"], setting.get("eta", start["eta"]), setting["T"],
                      setting.get("delay_kind", "fixed"), record_bias=True,
                      optimizer=setting.get("optimizer", "sgd"), clip_norm=setting.get("clip_norm", 1.0))
    return cfg, async_sgd(env, theta0, cfg, seeds, setting["delays"])


def async_summary(cfg: AsyncConfig, rec: dict, delays, seeds) -> pd.DataFrame:
    """One row per (d, seed): averages over steps, the exact bias against Theorem 2's term.

    The A5 constants are estimated on the run's own trajectory: C2 = max_t sigma_t^2 /
    ||theta_t - theta_{t-d_t}||^2, C4 likewise with mu_4 and the 4th power, r0 = max drift,
    M = max_t M_t; ``D_bound`` is then Theorem 2's delay term (bounds/ twin).
    """
    rows = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i, d in enumerate(delays):
            for j, seed in enumerate(seeds):
                r = {k: v[i, j] for k, v in rec.items() if k not in ("diverged_at", "theta_T")}
                ok = np.isfinite(r["grad_sq"])
                drift = r["drift"][ok]
                moving = drift > 0
                C2 = float(np.max(r["sigma2"][ok][moving] / drift[moving] ** 2)) if moving.any() else 0.0
                C4 = float(np.max(r["mu4"][ok][moving] / drift[moving] ** 4)) if moving.any() else 0.0
                M = float(np.nanmax(r["M"]))
                r0 = float(drift.max()) if len(drift) else 0.0
                step_bound = r["M"] * theory.mass_bound(cfg.estimator, np.nan_to_num(r["sigma2"]),
                                                        np.nan_to_num(r["mu4"]), cfg.G, cfg.eps)
                bias = np.sqrt(r["bias_sq"])
                viol = bias[ok] > step_bound[ok] * (1 + theory.FP_SLACK) + 1e-15
                D = theory.delay_term(cfg.estimator, cfg.eta, d, cfg.G, cfg.eps, C2, C4, r0, M) if d > 0 else 0.0
                gn = r["ghat_norm"][ok]
                rows.append({
                    "d": d, "seed": seed, "scheme": cfg.estimator,
                    "avg_grad_sq": float(np.mean(r["grad_sq"][ok])),
                    "final_J": float(r["J"][ok][-1]),
                    "avg_bias_sq": float(np.mean(r["bias_sq"][ok])),
                    "D_bound": D,
                    "bias_le_D": bool(np.mean(r["bias_sq"][ok]) <= D * (1 + theory.FP_SLACK) + 1e-30)
                    if np.isfinite(D) else None,
                    "step_bound_violations": int(viol.sum()) if np.isfinite(step_bound).all() else -1,
                    "max_ghat_norm": float(gn.max()), "mean_ghat_norm": float(gn.mean()),
                    "median_ghat_norm": float(np.median(gn)),
                    "class_norm_bound": float(theory.estimator_norm_bound(cfg.eps, M)),
                    "C2_hat": C2, "C4_hat": C4, "r0_hat": r0, "M_hat": M,
                    "max_drift": r0, "drift_radius_R": float(theory.drift_radius(cfg.eta, d, cfg.eps, M)),
                    "avg_sigma2": float(np.mean(r["sigma2"][ok])), "avg_mu4": float(np.mean(r["mu4"][ok])),
                    "diverged_at": int(rec["diverged_at"][i, j]),
                    "G": cfg.G, "eta": cfg.eta,
                })
    return pd.DataFrame(rows)


def async_steps(cfg: AsyncConfig, rec: dict, delays) -> pd.DataFrame:
    """Per (d, step): means over seeds and standard errors of the per-step records."""
    frames = []
    n = rec["grad_sq"].shape[1]
    for i, d in enumerate(delays):
        df = {"d": d, "step": np.arange(cfg.T), "scheme": cfg.estimator}
        for k in ("grad_sq", "bias_sq", "J", "sigma2", "mu4", "drift", "ghat_norm"):
            x = rec[k][i]
            df[k] = np.nanmean(x, 0)
            df[k + "_se"] = np.nanstd(x, 0, ddof=1) / np.sqrt(n) if n > 1 else np.nan
        frames.append(pd.DataFrame(df))
    return pd.concat(frames, ignore_index=True)


def run_async_sgd(setting: dict, seeds: list[int]):
    cfg, rec = async_records(setting, seeds)
    return async_summary(cfg, rec, setting["delays"], seeds), async_steps(cfg, rec, setting["delays"])


ASYNC_DELAYS = [0, 2, 4, 8, 16, 32]  # the figures' 0, 4, 16 and claim 17's 0, 2, 8, 32

SETTINGS = {
    "second_moment_vs_delay": {
        "full": {"grid": {"env": ["bandit"], "instance": ["mild"], "Delta": _DELTAS, "G": [8], "eps": [0.2]},
                 "fixed": {"schemes": DELAY_SCHEMES, "n_groups": 20_000}, "seeds": [0, 1, 2]},
        "quick": {"grid": {"env": ["bandit"], "instance": ["mild"], "Delta": [0.0, 0.5, 1.0, 2.0, 4.0], "G": [8],
                           "eps": [0.2]},
                  "fixed": {"schemes": DELAY_SCHEMES, "n_groups": 4_000}, "seeds": [0]},
    },
    "second_moment_vs_delay_e2": {
        "full": {"grid": {"env": ["token_mdp"], "instance": ["threshold"], "Delta": _DELTAS, "G": [4],
                          "eps": [0.2]},
                 "fixed": {"schemes": DELAY_SCHEMES, "n_groups": 20_000}, "seeds": [0, 1, 2]},
        "quick": {"grid": {"env": ["token_mdp"], "instance": ["threshold"], "Delta": [0.0, 1.0, 2.0, 4.0],
                           "G": [4], "eps": [0.2]},
                  "fixed": {"schemes": DELAY_SCHEMES, "n_groups": 4_000}, "seeds": [0]},
    },
    "async_sgd": {
        "full": {"grid": {"env": ["bandit", "token_mdp"], "scheme": DELAY_SCHEMES, "eps": [0.1, 0.2, 0.4]},
                 "fixed": {"delays": ASYNC_DELAYS, "T": 200, "delay_kind": "fixed"}, "seeds": list(range(20))},
        "quick": {"grid": {"env": ["bandit"], "scheme": DELAY_SCHEMES, "eps": [0.2]},
                  "fixed": {"delays": [0, 4, 16], "T": 100, "delay_kind": "fixed"}, "seeds": [0, 1, 2]},
    },
}

ASYNC_COLUMNS = {
    "env": "bandit (E1) or token_mdp (E2)", "scheme": "weighting scheme", "eps": "cap 1+eps",
    "d": "rollout delay (fixed d_t = d)", "seed": "run seed (paired across schemes)",
    "avg_grad_sq": "(1/T) sum_t ||grad J(theta_t)||^2", "final_J": "J(theta_T-1)",
    "avg_bias_sq": "(1/T) sum_t ||b_t||^2, b_t exact at (theta_t, theta_{t-d})",
    "D_bound": "Theorem 2's delay term with C2, C4, r0, M estimated on the run (0 for is, nan for snis)",
    "bias_le_D": "avg_bias_sq <= D_bound (None: no D in THEORY)",
    "step_bound_violations": "steps with ||b_t|| > M_t m-bound(sigma_t, mu4_t) (-1: no bound in THEORY, snis)",
    "max_ghat_norm": "max_t ||g_hat_t||", "mean_ghat_norm": "mean_t ||g_hat_t||",
    "median_ghat_norm": "median_t ||g_hat_t||",
    "class_norm_bound": "(1+eps) M_hat (Lemma 2)", "C2_hat": "max_t sigma_t^2 / drift_t^2",
    "C4_hat": "max_t mu4_t / drift_t^4", "r0_hat": "max_t drift_t", "M_hat": "max_t M_t",
    "max_drift": "max_t ||theta_t - theta_{t-d}||", "drift_radius_R": "eta d (1+eps) M_hat",
    "avg_sigma2": "mean_t sigma_t^2", "avg_mu4": "mean_t mu4_t", "diverged_at": "first non-finite step (-1: none)",
    "G": "group size", "eta": "step size", "T": "steps", "delay_kind": "fixed",
    "steps.parquet": "per (setting, d, step): seed means of grad_sq, bias_sq, J, sigma2, mu4, drift, ghat_norm "
                     "and their *_se",
}

_E1E2 = {**MOMENT_COLUMNS, "env": "environment", "instance": "instance of the environment's sweeps.INSTANCES",
         "Delta": "static delay: theta_b = theta - Delta u", "G": "group size", "eps": "cap 1+eps"}

SWEEPS = [
    Sweep("second_moment_vs_delay", "E1: second moment, max norm and bias of every scheme against a static delay (F4)",
          SETTINGS["second_moment_vs_delay"], run_second_moment_vs_delay, _E1E2),
    Sweep("second_moment_vs_delay_e2", "E2: the same on the token tree MDP (V=2, H=4) (F4)",
          SETTINGS["second_moment_vs_delay_e2"], run_second_moment_vs_delay, _E1E2),
    Sweep("async_sgd", "E1/E2: asynchronous SGD against the delay d; exact per-step bias vs Theorem 2 (F5, claim 17)",
          SETTINGS["async_sgd"], run_async_sgd, ASYNC_COLUMNS),
]
