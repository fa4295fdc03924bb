"""Diagnostics of a batch of groups, always computed on the **raw** ratios w
(never on capped ones: the question "how much did capping change?" needs the
uncapped numbers; cf. verl PR #6806).
"""
from __future__ import annotations

import math

import numpy as np

from ._backend import is_torch, ops_for, torch
from ._validate import check_eps, check_groups
from .schemes import gmc_log_lambda


def _f(x) -> float:
    return float(x.item()) if is_torch(x) else float(x)


def diagnostics(log_ratio, eps: float) -> dict[str, float]:
    """Summary statistics of trajectory log-ratios ``(prompts_per_step, G)``.

    Returns python floats:

    * ``ess_frac_mean``, ``ess_frac_min``: effective sample size per group,
      (sum w)^2 / sum w^2, divided by G (1 = all weights equal);
    * ``mass_mean``, ``mass_max``: the group mass mean_i w_i (THEORY §2), mean and max over
      groups (may be ``inf`` when a ratio exceeds the float range);
    * ``frac_groups_capped``: fraction of groups with mass > 1+eps (GMC active);
    * ``gmc_lambda_mean``: mean GMC scale lambda;
    * ``frac_clipped``: fraction of trajectories with w > 1+eps (truncated by TIC-trunc,
      masked by TIC-mask);
    * ``log_ratio_mean``, ``log_ratio_abs_mean``, ``log_ratio_max``, ``log_ratio_min``.
    """
    lr = check_groups(log_ratio, "log_ratio")
    eps = check_eps(eps)
    # float64 on the CPU whatever the input dtype: (sum w)^2 and sum w^2 of a float16 / float32
    # group overflow long before the ratios do (a handful of floats per group; cheap)
    lr = lr.detach().to("cpu", torch.float64) if is_torch(lr) else lr.astype(np.float64, copy=False)
    ops = ops_for(lr)
    G = lr.shape[-1]
    lse = ops.logsumexp(lr)
    log_mass = lse - math.log(G)
    ess = ops.exp(2 * lse - ops.logsumexp(2 * lr)) / G
    log_cap = math.log1p(eps)
    lam = ops.exp(gmc_log_lambda(lr, eps, ops))
    return {
        "ess_frac_mean": _f(ess.mean()),
        "ess_frac_min": _f(ess.min()),
        "mass_mean": _f(ops.exp(log_mass).mean()),
        "mass_max": _f(ops.exp(log_mass.max())),
        "frac_groups_capped": _f((log_mass > log_cap).sum()) / lr.shape[0],
        "gmc_lambda_mean": _f(lam.mean()),
        "frac_clipped": _f((lr > log_cap).sum()) / (lr.shape[0] * G),
        "log_ratio_mean": _f(lr.mean()),
        "log_ratio_abs_mean": _f(abs(lr).mean()),
        "log_ratio_max": _f(lr.max()),
        "log_ratio_min": _f(lr.min()),
    }
