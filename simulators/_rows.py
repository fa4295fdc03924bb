"""Tidy result rows shared by the sweeps: exact values beside Monte Carlo means and errors."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import theory
from .core import PER_SAMPLE_SCHEMES


def _proj_se(u: np.ndarray, cov: np.ndarray) -> float:
    """Standard error of <u, b_hat> from the covariance of b_hat (components are correlated)."""
    return float(np.sqrt(max(u @ cov @ u, 0.0)))


def _norm_se(b: np.ndarray, cov: np.ndarray) -> float:
    """Delta-method standard error of ||b_hat|| (valid away from b = 0)."""
    n = np.linalg.norm(b)
    return _proj_se(b / n, cov) if n > 0 else float(np.sqrt(max(np.trace(cov), 0.0)))


def moment_rows(env, theta, theta_b, G, eps, estimator_names, seeds, n_groups, seed_of) -> pd.DataFrame:
    """One row per (seed, scheme): exact moments (``*_exact``) and Monte Carlo (``*_mc``, ``*_mc_se``).

    ``seed_of(seed)`` gives the generator seed of a seed (deterministic per setting).
    ``bias_proj_mc`` is the Monte Carlo bias projected on the exact bias direction (an
    unbiased estimate of ``bias_norm_exact``) with its standard error.
    """
    exact = env.exact_all(theta, theta_b, G, eps, estimator_names)
    rows = []
    for estimator in estimator_names:
        e = exact[estimator]
        base = {
            "scheme": estimator,
            "bias_norm_exact": e["bias_norm"],
            "mass_bias_exact": e["mass_bias"],
            "second_moment_exact": e["second_moment"],
            "max_norm_exact": e["max_norm"],
            "grad_J_norm": float(np.linalg.norm(e["grad_J"])),
            "sigma2": e["sigma2"],
            "mu4": e["mu4"],
            "M": e["M"],
            "bias_bound": float(e["M"] * theory.mass_bound(estimator, e["sigma2"], e["mu4"], G, eps)),
            "gmc_rate_bound": float(e["M"] * theory.gmc_quadratic(e["sigma2"], G, eps)),
            "class_second_moment_bound": float(theory.class_second_moment(eps, e["M"])),
            "is_second_moment_bound": float(theory.is_second_moment(e["sigma2"], G, e["M"])),
            "per_sample": estimator in PER_SAMPLE_SCHEMES,
            "n_configs": e["n_configs"],
        }
        u = e["bias"].ravel() / e["bias_norm"] if e["bias_norm"] > 0 else None
        for seed in seeds:
            env.reseed(seed_of(seed))
            m = env.mc_moments(theta, theta_b, G, eps, estimator, n_groups)
            b, cov = m["bias"].ravel(), m["mean_grad_cov"]
            rows.append({
                **base,
                "seed": seed,
                "n_groups": n_groups,
                "bias_norm_mc": m["bias_norm"],
                "bias_norm_mc_se": _norm_se(b, cov),
                "bias_proj_mc": float(b @ u) if u is not None else float("nan"),
                "bias_proj_mc_se": _proj_se(u, cov) if u is not None else float("nan"),
                "mass_bias_mc": m["mass_bias"],
                "mass_bias_mc_se": m["mass_bias_se"],
                "second_moment_mc": m["second_moment"],
                "second_moment_mc_se": m["second_moment_se"],
                "max_norm_mc": m["max_norm"],
            })
    return pd.DataFrame(rows)


MOMENT_COLUMNS = {
    "scheme": "weighting scheme (estimators.SCHEMES)",
    "seed": "Monte Carlo seed (exact columns do not depend on it)",
    "bias_norm_exact": "||E g_hat(c) - grad J||, exact (enumeration)",
    "mass_bias_exact": "E[(1/G) sum_i (w_i - c_i)], exact (THEORY §3's m for c <= w)",
    "second_moment_exact": "E||g_hat||^2, exact",
    "max_norm_exact": "max over count vectors of ||g_hat||",
    "grad_J_norm": "||grad J(theta)||",
    "sigma2": "Var_b(w)", "mu4": "E_b (w-1)^4",
    "M": "(max r - min r) max_k ||s_k|| (bounds ||A_i s_i||)",
    "bias_bound": "M times THEORY §3's bound on m for the scheme (0 for is, nan if none)",
    "gmc_rate_bound": "M sigma^2 / (4 G eps)",
    "class_second_moment_bound": "(1+eps)^2 M^2 (Lemma 2)",
    "is_second_moment_bound": "M^2 (1 + sigma^2/G)",
    "bias_norm_mc": "||mean g_hat - grad J|| over n_groups groups", "bias_norm_mc_se": "its delta-method s.e.",
    "bias_proj_mc": "<mean g_hat - grad J, exact bias direction>", "bias_proj_mc_se": "its s.e.",
    "mass_bias_mc": "Monte Carlo mass-bias", "mass_bias_mc_se": "its s.e.",
    "second_moment_mc": "Monte Carlo E||g_hat||^2", "second_moment_mc_se": "its s.e.",
    "max_norm_mc": "largest ||g_hat|| drawn", "n_groups": "Monte Carlo groups per seed",
    "n_configs": "count vectors enumerated", "per_sample": "weight depends on w_i alone",
    "setting_key": "hash of the setting (parts/KEY.parquet)",
}
