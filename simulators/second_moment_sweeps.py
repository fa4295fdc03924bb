"""The realised second moment ``E||g_hat||^2`` of every scheme against chi^2 and G, beside the
uniform bound ``(1+eps)^2 M^2`` of Lemma 2 (``python -m simulators.sweep second_moment_vs_chi2``).

* E1 (softmax bandit, instance ``rare_arm``: a heavy ratio tail) and E2 (token tree MDP,
  instance ``threshold``, V = 2, H = 4): exact, by count-vector enumeration at
  ``theta_b = theta - Delta u`` for a grid of static delays (each Delta gives one
  chi^2 = Var_b w), for G in the grid.
* E3 (Gaussian policy, lognormal ratios, ``chi^2 = e^{Delta^2} - 1``): Monte Carlo with standard
  errors, ``g_hat = (1/G) sum_i c_i A_i (a_i - theta)`` with ``a ~ N(theta_b, 1)``, reward
  ``1{a > 0}`` and leave-one-out advantages. Its score is unbounded, so there is no M and no
  uniform bound (``class_second_moment_bound`` is NaN).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

import estimators

from . import theory
from .delay import static_behaviour
from .delay_sweeps import make_instance
from .sweep_spec import Sweep, derive_seed

BASE_SCHEMES = ["is", "stale", "tic_mask", "tic_trunc", "gmc", "snis", "topr"]


def scheme_list() -> list[str]:
    """The base schemes and the GMC variants of the mechanism study that are registered."""
    return BASE_SCHEMES + [s for s in ("gmc_cap", "gmc_topr") if s in estimators.SCHEMES]


ENV_INSTANCE = {"bandit": "rare_arm", "token_mdp": "threshold"}


def exact_rows(setting: dict) -> pd.DataFrame:
    env, theta, _, u = make_instance(setting["env"], ENV_INSTANCE[setting["env"]])
    G, eps = int(setting["G"]), float(setting["eps"])
    rows = []
    for delta in setting["Deltas"]:
        theta_b = static_behaviour(theta, delta, u)
        ex = env.exact_all(theta, theta_b, G, eps, setting["schemes"])
        for s, e in ex.items():
            rows.append({"Delta": float(delta), "scheme": s, "chi2": e["sigma2"], "mu4": e["mu4"], "M": e["M"],
                         "second_moment": e["second_moment"], "second_moment_se": 0.0, "exact": True,
                         "grad_J_sq": float((np.asarray(e["grad_J"]) ** 2).sum()),
                         "bias_norm": e["bias_norm"], "mass_bias": e["mass_bias"],
                         "class_second_moment_bound": float(theory.class_second_moment(eps, e["M"])),
                         "is_second_moment_bound": float(theory.is_second_moment(e["sigma2"], G, e["M"]))})
    return pd.DataFrame(rows)


def lognormal_rows(setting: dict, seed: int) -> pd.DataFrame:
    """E3: Monte Carlo E||g_hat||^2 (a scalar here) per scheme, ``n_groups`` groups, with its s.e."""
    G, eps, n = int(setting["G"]), float(setting["eps"]), int(setting["n_groups"])
    rows = []
    for delta in setting["Deltas"]:
        rng = np.random.default_rng(derive_seed(seed, setting, round(delta * 1e6)))
        theta, theta_b = float(delta), 0.0
        a = rng.normal(theta_b, 1.0, size=(n, G))
        lr = ((a - theta_b) ** 2 - (a - theta) ** 2) / 2
        A = estimators.advantages((a > 0).astype(np.float64), "loo")
        score = a - theta
        for s in setting["schemes"]:
            spec = estimators.get_scheme(s)
            c = estimators.weights(s, lr, eps, advantages=A if spec.needs_advantages else None)
            sq = ((c * A * score).sum(-1) / G) ** 2
            rows.append({"Delta": float(delta), "scheme": s, "chi2": math.expm1(delta**2),
                         "mu4": float(theory.lognormal_closed_forms(delta, eps)["mu4"]) if delta > 0 else 0.0,
                         "M": math.nan,
                         "second_moment": float(sq.mean()), "second_moment_se": float(sq.std(ddof=1) / math.sqrt(n)),
                         "exact": False, "grad_J_sq": math.nan, "bias_norm": math.nan, "mass_bias": math.nan,
                         "class_second_moment_bound": math.nan, "is_second_moment_bound": math.nan})
    return pd.DataFrame(rows)


def run_setting(setting: dict, seeds: list[int]) -> pd.DataFrame:
    if setting["env"] == "lognormal":
        return pd.concat([lognormal_rows(setting, s).assign(seed=s) for s in seeds], ignore_index=True)
    return exact_rows(setting).assign(seed=-1)  # exact: no seed


_DELTAS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0]

SETTINGS = {
    "second_moment_vs_chi2": {
        "full": {"grid": {"env": ["bandit", "token_mdp", "lognormal"], "G": [2, 4, 8]},
                 "fixed": {"eps": 0.2, "Deltas": _DELTAS, "schemes": scheme_list(), "n_groups": 200_000},
                 "seeds": [0]},
        "quick": {"grid": {"env": ["bandit", "token_mdp", "lognormal"], "G": [2, 4]},
                  "fixed": {"eps": 0.2, "Deltas": [0.0, 0.5, 1.5], "schemes": ["is", "tic_trunc", "gmc"],
                            "n_groups": 2_000},
                  "seeds": [0]},
    },
}

COLUMNS = {
    "env": "bandit (E1, rare_arm), token_mdp (E2, threshold, H = 4) or lognormal (E3)", "G": "group size",
    "eps": "cap 1+eps", "Delta": "static delay (E1/E2: theta_b = theta - Delta u; E3: |theta - theta_b|)",
    "scheme": "weighting scheme", "chi2": "Var_b w = chi^2(pi_theta || pi_b) (exact)", "mu4": "E_b (w-1)^4",
    "M": "(max r - min r) max ||s|| (NaN in E3: unbounded score)",
    "second_moment": "E||g_hat||^2: exact (E1/E2) or the Monte Carlo mean (E3)",
    "second_moment_se": "its standard error (0 when exact)", "exact": "enumeration (True) or Monte Carlo",
    "grad_J_sq": "||grad J||^2 (E1/E2)", "bias_norm": "||E g_hat - grad J|| (E1/E2)",
    "mass_bias": "THEORY §3's m (E1/E2)", "class_second_moment_bound": "(1+eps)^2 M^2 (Lemma 2; NaN in E3)",
    "is_second_moment_bound": "M^2 (1 + chi^2/G)", "seed": "Monte Carlo seed (-1: exact)",
}

SWEEPS = [Sweep("second_moment_vs_chi2", "E1/E2 exact, E3 Monte Carlo: E||g_hat||^2 of every scheme against chi^2 "
                "and G, beside (1+eps)^2 M^2 (Lemma 2)", SETTINGS["second_moment_vs_chi2"], run_setting, COLUMNS)]
