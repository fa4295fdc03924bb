"""Pieces both adapters share: the group-layout check and the metric names.

Kept free of torch, verl and TRL imports so that importing an adapter stays cheap.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from estimators.params import params_of
from schema.metrics import stale_metrics

# Diagnostics of :func:`estimators.diagnostics` (always on the raw, uncapped ratios) are
# logged with the trainer's names (:data:`schema.metrics.STALE`): ``stale/mass_cap_frac`` (GMC
# active: group mass > 1+eps), ``stale/clip_frac`` (trajectories with w > 1+eps), ``stale/ess``,
# ``stale/ess_min``, ``stale/mass_mean|max``, ``stale/gmc_lambda_mean``, ``stale/log_ratio_*``.
METRIC_NAMESPACE = "stale/"


def metric_names(diagnostics: dict[str, float], prefix: str = "") -> dict[str, float]:
    """``{prefix + name: value}`` for every diagnostic, named as the trainer names them (verl passes
    ``prefix="actor/"``)."""
    return stale_metrics(diagnostics, prefix)


VOCABULARY = {
    "step/lr_scale": "the factor a step-size control multiplied the learning rate by (logged once per optimiser step)",
    "stale/ess": "ESS/G of the raw ratios, mean over groups",
    "drift/ess_ratio": "VCPO's sequence ESS ratio (sum w)^2 / ((sum w^2 + 1e-8) N) of the raw ratios of the batch",
    "stale/mass_cap_frac": "share of groups whose mass mean_i w_i exceeds 1 + eps (GMC's cap acts)",
    "stale/clip_frac": "share of trajectories whose raw weight w exceeds 1 + eps (TIC's clip acts)",
    "stale/mass_mean": "mean raw weight w before capping (the group mass, mean over groups)",
    "stale/log_ratio_max": "log of the largest raw weight w before capping",
    "train/weight_mean": "mean weight c after capping (trajectory schemes)",
    "train/weight_max": "largest weight c after capping (trajectory schemes)",
    "drift/kl": "KL(pi_b || pi_theta) per completion token, the k3 estimate",
    "stale/chi2": "trajectory chi^2 estimate mean w^2 - 1",
}
"""The per-batch statistics both adapters log, under the toolkit trainer's names (:data:`llm_runs.metrics.COLUMNS`,
:mod:`schema.metrics`): verl as ``actor/<name>``, TRL as :func:`trl_name` gives it. The weights before capping are
``stale/mass_mean`` and ``exp(stale/log_ratio_max)``, after it ``train/weight_mean`` and ``train/weight_max``; the
share capped is ``stale/mass_cap_frac`` (groups) and ``stale/clip_frac`` (trajectories). Every row of
:func:`batch_statistics` holds these (but ``step/lr_scale``, which the step control logs, and the ``train/weight_*``
of token-level losses, which have no trajectory weight)."""


def trl_name(name: str) -> str:
    """The key under which TRL logs the toolkit's metric ``name``: ``name`` without a leading ``train/``, because
    transformers' wandb and TensorBoard callbacks (``integration_utils.rewrite_logs``) put ``train/`` before every
    training key: ``train/weight_max`` is logged as ``weight_max`` and shown as ``train/weight_max``, never
    ``train/train/weight_max``; ``stale/ess`` is shown as ``train/stale/ess``."""
    return name.removeprefix("train/")


def batch_statistics(out, logp, old_logp, mask, estimator: str, eps: float, diagnostics: dict | None = None
                     ) -> dict[str, float]:
    """The per-batch statistics of one loss call, by the trainer's names: :func:`llm_runs.theory.batch_metrics`
    (the raw-ratio diagnostics, the theory columns, the weights after capping, ``mech/kl``, ``mech/lambda_min``),
    the loss's own fractions (``out.metrics``: ``stale/token_clip_frac``, ...) and the drift columns
    (:func:`llm_runs.theory.drift_metrics`: ``drift/kl``, ``drift/ess_ratio``, ``drift/abs_log_w_median``, the
    names :mod:`llm_runs.drift` reads). The one place both adapters build what they log per batch: verl's loss
    returns it under ``actor/``, TRL's adapter appends it to its metrics (:func:`trl_name`)."""
    from estimators.losses import masked_token_log_ratio

    from ..theory import batch_metrics, drift_metrics

    row = batch_metrics(out, logp, old_logp, mask, estimator, eps, diagnostics)
    row.update(stale_metrics(out.metrics or {}))
    tok = masked_token_log_ratio(logp.detach(), old_logp.detach(), mask)
    row.update(drift_metrics(out.seq_log_ratio, tok, mask))
    return row


def check_contiguous_groups(ids: Sequence[Any], group_size: int | None = None, where: str = "batch") -> int:
    """Check that rows form whole groups laid out contiguously; return the group size G.

    ``ids[k]`` is the group (prompt) id of row k. The layout every trajectory-level loss of
    :mod:`estimators.losses` assumes is: rows ``g*G .. g*G+G-1`` are the G completions of one
    prompt, every group has the same G, and no group appears twice. ``group_size=None``
    takes G as the number of rows with the first row's id.

    Raises ``ValueError`` naming the first offending rows and ids.
    """
    n = len(ids)
    if n == 0:
        raise ValueError(f"{where}: no rows")
    if group_size is None:
        group_size = sum(1 for x in ids if x == ids[0])
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{where}: group size G must be an integer >= 1, got {group_size!r}")
    if n % group_size:
        raise ValueError(
            f"{where}: {n} rows do not split into whole groups of G = {group_size}; "
            "a group must stay whole (keep every completion of a prompt in the same batch)"
        )
    seen: dict[Any, int] = {}
    for start in range(0, n, group_size):
        block = ids[start:start + group_size]
        first = block[0]
        for offset, other in enumerate(block):
            if other != first:
                raise ValueError(
                    f"{where}: rows {start}..{start + group_size - 1} should be one group of G = {group_size}, "
                    f"but row {start} has group id {first!r} and row {start + offset} has {other!r}: "
                    "the groups are split or not contiguous (something reordered the rows)"
                )
        if first in seen:
            raise ValueError(
                f"{where}: group id {first!r} occupies rows {seen[first]}.. and rows {start}..: "
                f"a group of more than G = {group_size} rows, or a group split in two"
            )
        seen[first] = start
    return group_size


def batch_options(estimator: str, given: dict | None, mask) -> dict:
    """The knobs ``estimator`` gets on one batch: ``given`` (the user's), and each knob that is a
    completion length (:attr:`estimators.params.Param.batch_length`: ``seq_geo_mask``'s ``L``) the user
    did not give, taken from the batch's completion mask ``mask`` (B, T): the number of completion
    tokens, which every completion of the batch must share (the geometric mean of verl's Geo-RS averages
    each response over its own tokens; one ``L`` is that rule only when every response has ``L`` tokens).
    Completions of several lengths are a ``ValueError`` naming the knob."""
    options = dict(given or {})
    for p in params_of(estimator):
        if p.batch_length and p.name not in options:
            counts = [int(c) for c in mask.sum(-1).tolist()]
            if len(set(counts)) != 1:
                raise ValueError(
                    f"{estimator}: its knob {p.name} ({p.symbol}, the tokens per completion its geometric mean "
                    f"averages over) comes from the batch when not set, but this batch's completions have "
                    f"{min(counts)} to {max(counts)} tokens; one {p.symbol} gives each its own mean only when all "
                    f"have the same length: set {p.name} explicitly (an approximation on completions of varying "
                    f"length)")
            options[p.name] = float(counts[0])
    return options


TRAJ_AGGS = ("sum", "token-mean")
"""How a trajectory scheme's term is aggregated (the trainer's ``traj_agg``, :mod:`llm_runs.config`): ``sum`` is
THEORY's ``c_i A_i grad log pi(o_i)`` (every token of a response weighs the same; verl's ``token-mean``),
``token-mean`` that term over the response's own token count ``|o_i|`` (verl's ``seq-mean-token-mean``, VCPO's)."""


def per_length(advantages, mask):
    """``A_i / |o_i|``, ``|o_i|`` the tokens of response i under ``mask`` (B, T) (at least 1): the advantages of
    ``traj_agg = token-mean``, as the trainer divides them (``llm_runs.update.update_advantages``)."""
    lengths = mask.sum(-1).clamp(min=1)
    return advantages / lengths.reshape(advantages.shape).to(advantages.dtype)


RECIPE_STEP = ("ess_scaling", "ess_base_ratio", "ess_use_clipped", "gmc_step")
RECIPE_OPOB = ("opob_norm_by_std", "opob_weight", "opob_std", "opob_flat_zero")


def recipe_settings(name: str) -> dict:
    """A named recipe of :data:`llm_runs.stepsize.RECIPES` as the adapters apply it: ``estimator``, its
    ``knobs`` (the trainer's ``<estimator>_<knob>`` keys, e.g. ``seq_tis_c`` -> ``C``), ``advantage``, the OPOB
    settings (``opob``), ``traj_agg``, the step controls (``step``) and ``max_grad_norm``. A key no adapter
    applies is a ValueError, never dropped in silence."""
    from estimators.params import params_of

    from ..stepsize import RECIPES

    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
    recipe = dict(RECIPES[name])
    estimator = recipe.pop("estimator")
    knobs = {}
    for p in params_of(estimator):
        key = f"{estimator}_{p.name.lower()}"
        if key in recipe:
            knobs[p.name] = float(recipe.pop(key))
    out = {"estimator": estimator, "knobs": knobs, "advantage": recipe.pop("advantage", "loo"),
           "opob": {k: recipe.pop(k) for k in RECIPE_OPOB if k in recipe},
           "traj_agg": recipe.pop("traj_agg", "sum"),
           "step": {k: recipe.pop(k) for k in RECIPE_STEP if k in recipe},
           "max_grad_norm": recipe.pop("max_grad_norm", None)}
    if recipe:
        raise ValueError(f"recipe {name!r} sets {sorted(recipe)}, which the verl plugin and the TRL adapter do not "
                         "apply")
    return out


def trajectory_grad_sq_norms_of(logp, mask, params):
    """``||grad_theta sum_t log pi_theta(o_i,t)||^2`` of every row i of ``logp`` (B, T, with its graph) under
    ``mask``: one backward pass per row through the batch's graph (kept), the parameters' ``.grad`` untouched;
    float64, shape (B,). The trainer takes the same norms with one forward pass per trajectory
    (``llm_runs.stepsize.trajectory_grad_sq_norms``)."""
    import torch

    params = [p for p in params if p.requires_grad]
    m = mask.to(logp.dtype)
    out = torch.zeros(logp.shape[0], dtype=torch.float64)
    for i in range(logp.shape[0]):
        grads = torch.autograd.grad((logp[i] * m[i]).sum(), params, retain_graph=True, allow_unused=True)
        out[i] = sum(float((g.double() ** 2).sum()) for g in grads if g is not None)
    return out
