"""Metric names shared by every LLM trainer: the toolkit's trainer, the verl plugin and the TRL adapter.

Importance-ratio diagnostics (:func:`estimators.diagnostics`, always on the raw, uncapped
trajectory ratios w) are logged under ``stale/`` with these names, everywhere.
"""
from __future__ import annotations

STALE = {  # estimators.diagnostics key -> metric name
    "ess_frac_mean": "stale/ess",  # mean over groups of ESS/G = (sum w)^2 / (G sum w^2)
    "ess_frac_min": "stale/ess_min",
    "mass_mean": "stale/mass_mean",  # group mass mean_i w_i, mean over groups
    "mass_max": "stale/mass_max",
    "frac_groups_capped": "stale/mass_cap_frac",  # fraction of groups with mass > 1+eps (GMC capping active)
    "gmc_lambda_mean": "stale/gmc_lambda_mean",  # mean GMC scale lambda
    "frac_clipped": "stale/clip_frac",  # fraction of trajectories with w > 1+eps (TIC clipped / masked)
    "log_ratio_mean": "stale/log_ratio_mean",  # mean of log w over the batch
    "log_ratio_abs_mean": "stale/log_ratio_abs_mean",
    "log_ratio_max": "stale/log_ratio_max",
    "log_ratio_min": "stale/log_ratio_min",
}


MECHANISM = {
    "mech/cos_is": "cosine between the update's gradient estimate and the IS gradient estimate (c_i = w_i) on the "
                   "same batch and the same forward pass",
    "mech/heavy_share": "||gradient of the single heaviest trajectory|| / ||batch gradient||, the heaviest being the "
                        "trajectory with the largest total |d loss / d log pi(o_t)|",
    "mech/lambda_min": "smallest GMC group scale lambda of the batch (on the raw ratios, whatever the estimator)",
    "mech/step_norm": "||theta_{t+1} - theta_t||, the parameter step the optimiser took",
    "mech/step_cos_grad": "cosine between the parameter step and minus the (clipped) gradient: how far the optimiser "
                          "turns the estimator's direction",
    "mech/kl": "KL(pi_b || pi_theta) per completion token, the k3 estimate mean((r_t - 1) - log r_t) over the batch",
}
"""The mechanism diagnostics (:mod:`llm_runs.mechanism`), logged per update when a run sets
``mechanism_diagnostics``: name -> meaning. GMC's share of capped groups and mean lambda are
``stale/mass_cap_frac`` and ``stale/gmc_lambda_mean`` (:data:`STALE`)."""


DRIFT = {
    "drift/kl": "KL(pi_b || pi_theta) per completion token, the k3 estimate (as mech/kl)",
    "drift/ess_ratio": "VCPO's sequence ESS ratio (sum w)^2 / ((sum w^2 + 1e-8) N) over the update's N trajectories, "
                       "raw ratios",
    "drift/abs_log_w_median": "median over the update's trajectories of |log w|",
}
"""The drift diagnostics, logged per update when a run sets ``drift_diagnostics`` (ratios only: the
update is unchanged): name -> meaning. With ``stale/chi2`` they place a run on the drift map
(:mod:`llm_runs.drift`)."""

WARN = {
    "warn/kl": "the early warning's statistic: KL(pi_b || pi_theta) per completion token of the update's batch, the "
               "k3 estimate (as drift/kl)",
    "warn/kl_rolling": "its mean over the last 7 updates (NaN before the 7th), the quantity the frozen threshold "
                       "is compared with (llm_runs.warning.FROZEN)",
    "warn/fired": "1 from the update at which the early warning fired on, 0 before",
}
"""The early-warning columns (:mod:`llm_runs.warning`, docs/PREREGISTRATION-WARNING.md), logged when a run sets
``early_warning``; verl logs them under ``actor/``, TRL under these names."""

STEP = {
    "step/lr_scale": "the factor the step-size controls multiplied the learning rate by in this update",
    "step/ess_ratio": "the ESS ratio the ESS scaling used (raw ratios, or the estimator's weights with "
                      "ess_use_clipped)",
    "step/gmc_scale": "GMC's step form s_t: the mean over the batch's groups of min(1, (1+eps) / mean_i w_i)",
    "step/zero_grad_skipped": "1 when the gradient was exactly zero and the optimiser did not step (skip_zero_grad)",
    "perf/opob_s": "seconds spent on the per-trajectory gradient norms of the OPOB baseline",
}
"""The step-size control columns (:mod:`llm_runs.stepsize`), logged by runs that use a control."""


def stale_metrics(diagnostics: dict, prefix: str = "") -> dict[str, float]:
    """``{prefix + name: value}`` for every diagnostic, named by :data:`STALE` (a key not in it is
    logged as ``stale/<key>``); verl passes ``prefix="actor/"``."""
    return {prefix + STALE.get(k, f"stale/{k}"): float(v) for k, v in diagnostics.items()}


def estimator_labels() -> dict[str, str]:
    """estimator name (``estimators.SCHEMES`` / ``estimators.losses.loss_names()``) -> display name (the
    ``label`` of its record, in its own module: :mod:`estimators.records`), read when asked (so a correction
    registered later has its label, and importing this module imports no estimator, nor torch); also
    :data:`ESTIMATOR_LABELS`."""
    from estimators.records import records

    return {n: r.label for n, r in records().items() if r.label is not None}


def __getattr__(name: str):
    if name == "ESTIMATOR_LABELS":  # the table as a module attribute, read when asked (estimator_labels)
        return estimator_labels()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def estimator_label(name: str, mode: str | None = None) -> str:
    """``GMC``, ``TIC-mask (async)``: the display name of an estimator run in ``mode``."""
    from estimators.records import records

    rec = records().get(name)  # its row of estimator_labels(), without building the table
    base = rec.label if rec is not None and rec.label is not None else name
    return base if mode in (None, "", "controlled") else f"{base} ({mode})"
