"""The plugin's verl policy losses: every trajectory scheme of :mod:`estimators` on one verl
micro-batch, with the checks that a micro-batch holds whole groups (see :mod:`llm_runs.integrations.verl`); the
settings they read from verl's config are :mod:`llm_runs.integrations.verl.settings`."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from estimators._compat import renamed_keywords

from .._common import batch_options, batch_statistics, metric_names, per_length
from .compat import METRICS_STYLE, TUPLE4_STYLE, _cfg
from .settings import (
    behaviour_from,
    eps_from,
    estimator_options_from,
    group_size_from,
    mask_denominator_from,
    opob_active,
)
from .validation import AGG_MODES


def _check_layout_config(config, B: int, G: int) -> tuple[int, int | None]:
    """Refuse every setting that reorders or splits groups between the estimator and the loss."""
    for key in ("shuffle", "use_dynamic_bsz"):
        if _cfg(config, key):
            raise ValueError(
                f"actor.{key} = True reorders responses across groups; the trajectory loss needs each "
                f"group of G = {G} contiguous in its micro-batch: set actor_rollout_ref.actor.{key}=False"
            )
    mbs = _cfg(config, "ppo_micro_batch_size_per_gpu")
    if mbs is not None and mbs % G:
        raise ValueError(
            f"actor.ppo_micro_batch_size_per_gpu = {mbs} is not a multiple of the group size G = {G} "
            "(rollout.n): a micro-batch would split a group"
        )
    if B % G:
        raise ValueError(
            f"micro-batch of {B} responses does not hold whole groups of G = {G} (rollout.n): a group is "
            "split across micro-batches; make ppo_micro_batch_size_per_gpu a multiple of G"
        )
    info = _cfg(config, "global_batch_info") or {}
    dp = int(info.get("dp_size") or 1)
    gbs = info.get("global_batch_size")
    if gbs is not None and gbs % (dp * G):
        raise ValueError(
            f"global mini-batch of {gbs} responses over dp_size = {dp} ranks gives each rank a share that is "
            f"not a multiple of G = {G}: a group is split across ranks"
        )
    if gbs is None and dp > 1:
        raise ValueError("config.global_batch_info lacks global_batch_size while dp_size > 1")
    return dp, gbs


def _per_response(values, mask, name: str, tol_scale: float = 1e-5):
    """The one value per response of a (B, T) tensor that must be constant on response tokens."""
    import torch

    m = mask.to(values.dtype)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    values = torch.where(m > 0, values, zero)  # padding is selected away, whatever it holds (NaN: never NaN * 0)
    count = m.sum(-1).clamp(min=1)
    row = (values * m).sum(-1) / count
    spread = torch.where(m > 0, (values - row[:, None]).abs(), zero).amax(-1)
    bad = spread > tol_scale * (1 + row.abs())
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"{name} varies along the tokens of response {i} (spread {float(spread[i]):.3g}); trajectory "
            f"losses need one {name} value per response (outcome rewards / sequence-level weights)"
        )
    return row


def _check_zero_sum(adv_row, G: int) -> None:
    groups = adv_row.reshape(-1, G)
    sums = groups.sum(-1).abs()
    tol = 1e-4 * G * (1 + groups.abs().amax(-1))
    bad = sums > tol
    if bool(bad.any()):
        import torch

        g = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"rows {g * G}..{g * G + G - 1} of the micro-batch are not one group: their advantages sum to "
            f"{float(groups[g].sum()):.4g}, but group-relative advantages (gmc_loo/gmc_grpo/gmc_drgrpo, grpo, rloo) "
            "sum to 0 within a group. Rows were reordered or split (balance_batch, shuffle, dynamic batch size?) "
            "or the advantage estimator is not group-relative"
        )


def rows_by_uid(ids) -> dict[Any, list[int]]:
    """``{uid: [row, ...]}``: the rows of each prompt uid, uids in order of first appearance
    (verl's own GRPO estimator groups with such a dict)."""
    rows: dict[Any, list[int]] = {}
    for i, uid in enumerate(ids):
        rows.setdefault(uid, []).append(i)
    return rows


def groups_not_of_size(rows: dict[Any, list[int]], G: int) -> dict[Any, int]:
    """``{uid: row count}`` of the groups of :func:`rows_by_uid` that do not have G rows."""
    return {uid: len(r) for uid, r in rows.items() if len(r) != G}


def whole_groups(ids, G: int, where: str, advice: str) -> dict[Any, list[int]]:
    """:func:`rows_by_uid` of ``ids`` when every uid has exactly G rows; else ``ValueError``
    naming the first uid that does not (``where``: "in this micro-batch", ...; then ``advice``)."""
    rows = rows_by_uid(ids)
    bad = groups_not_of_size(rows, G)
    if bad:
        uid, n = next(iter(bad.items()))
        raise ValueError(f"prompt uid {uid!r} has {n} rows {where}, not G = {G} (rollout.n) "
                         f"({len(bad)} of {len(rows)} groups incomplete): {advice}")
    return rows


def group_order(ids, G: int) -> list[int]:
    """Row order that puts the G rows of each group (prompt uid) together, groups in order of
    first appearance; every id must occur exactly G times in ``ids`` (else ``ValueError``)."""
    rows = whole_groups(
        ids, G, "in this micro-batch",
        "a group is split across micro-batches, mini-batches or data-parallel ranks. Keep "
        "ppo_micro_batch_size_per_gpu and each rank's share of ppo_mini_batch_size multiples of G, "
        "actor.shuffle=False, use_dynamic_bsz=False and, with several data-parallel ranks, the batch "
        "unbalanced (trainer.balance_batch=False)")
    return [i for r in rows.values() for i in r]


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def trajectory_policy_loss(estimator: str, old_log_prob, log_prob, advantages, response_mask, config,
                           rollout_is_weights=None, group_ids=None, rollout_log_probs=None,
                           loss_agg_mode: str = "token-mean"):
    """``(loss, LossOutput)`` of the trajectory scheme ``estimator`` on one verl micro-batch (see the
    module docstring).

    ``group_ids`` (the prompt uid of every row, as the engine path passes them) takes the groups
    from the data, in any row order; without them the rows must be contiguous groups of G.
    ``rollout_log_probs`` (the rollout's own log-probs, as the batch carries them) are the behaviour
    log-probs under ``policy_loss.behaviour=rollout`` (the default); ``recomputed`` takes ``old_log_prob``.

    ``loss_agg_mode`` (verl's ``actor.loss_agg_mode``, :data:`~llm_runs.integrations.verl.validation.AGG_MODES`):
    ``token-mean`` and ``seq-mean-token-sum`` give THEORY's term ``c_i A_i`` per response (the loss
    ``-(1/N) sum_i c_i A_i``, its gradient ``(1/N) sum_i c_i A_i grad log pi(o_i)``), ``seq-mean-token-mean`` that
    term over the response's token count ``|o_i|`` (VCPO's; the trainer's ``traj_agg = token-mean``); another is a
    ValueError.

    A response with an empty ``response_mask`` (rejected by verl's ``rollout_rs``) has weight 0 in its
    group: the weights of a group are those of ``estimator`` on its k kept responses (THEORY §2 with G = k:
    GMC's mass ``mean_kept w`` is capped at 1+eps), and the group's term is ``(1/k) sum_kept c_i A_i``
    (``policy_loss.mask_denominator = kept``, the default) or ``(1/G) sum_kept c_i A_i`` (``sampled``).
    """
    from estimators.losses import policy_loss

    if config is None:
        raise ValueError(f"policy loss {estimator!r} needs verl's actor config (group size, eps, batch layout)")
    if loss_agg_mode not in AGG_MODES:
        raise ValueError(f"actor_rollout_ref.actor.loss_agg_mode = {loss_agg_mode!r} has no meaning for the trajectory "
                         f"loss {estimator!r}; set loss_agg_mode to one of {', '.join(AGG_MODES)}")
    G = group_size_from(config)
    B = log_prob.shape[0]
    dp, gbs = _check_layout_config(config, B, G)
    behaviour = behaviour_from(config)
    if behaviour == "rollout":
        if rollout_log_probs is None:
            raise ValueError(
                f"policy loss {estimator!r} takes the ratio pi_theta / pi_rollout (policy_loss.behaviour=rollout, the "
                "default), but the batch carries no rollout_log_probs: "
                "set actor_rollout_ref.rollout.calculate_log_probs"
                "=True, or +actor_rollout_ref.actor.policy_loss.behaviour=recomputed for verl's decoupled pi_theta / "
                "pi_old")
        if tuple(rollout_log_probs.shape) != tuple(log_prob.shape):
            raise ValueError(f"rollout_log_probs of shape {tuple(rollout_log_probs.shape)} for log-probs of shape "
                             f"{tuple(log_prob.shape)}")
        if rollout_is_weights is not None:
            raise ValueError("rollout_is_weights (pi_old / pi_rollout) with policy_loss.behaviour=rollout "
                             "would correct "
                             "the staleness twice: drop algorithm.rollout_correction.rollout_is, or set "
                             "policy_loss.behaviour=recomputed")
        old_log_prob = rollout_log_probs.to(log_prob.dtype)
    if group_ids is not None:
        if len(group_ids) != B:
            raise ValueError(f"{len(group_ids)} prompt uids for a micro-batch of {B} responses")
        order = group_order(group_ids, G)
        if order != list(range(B)):
            import torch

            idx = torch.tensor(order, device=log_prob.device)
            old_log_prob, log_prob, advantages, response_mask = (
                t.index_select(0, idx) for t in (old_log_prob, log_prob, advantages, response_mask))
            if rollout_is_weights is not None:
                rollout_is_weights = rollout_is_weights.index_select(0, idx)
    mask = response_mask.bool()
    kept = mask.any(-1)
    adv = _per_response(advantages.detach(), mask, "advantage")
    whole = kept.reshape(-1, G).all(-1)
    if not opob_active(config):  # OPOB's advantages (R - b*) / std need not sum to 0; nor a group with a rejection
        _check_zero_sum(adv.reshape(-1, G)[whole].reshape(-1), G)
    if rollout_is_weights is not None:
        adv = adv * _per_response(rollout_is_weights.detach().to(adv.dtype), mask, "rollout_is_weights")
    if AGG_MODES[loss_agg_mode] == "token-mean":  # each response's term over its token count
        adv = per_length(adv, mask)
    import estimators

    eps = eps_from(config)
    options = batch_options(estimator, estimator_options_from(config, estimator), mask[kept])
    if not bool(whole.all()):
        loss, out = _loss_with_rejected(estimator, log_prob, old_log_prob, mask, adv, G, eps, options, dp, gbs, B,
                                        mask_denominator_from(config))
        return loss, out
    out = policy_loss(estimator, log_prob, old_log_prob, mask, adv, G, eps, **options)
    from .stepsize import record

    record(out.seq_log_ratio, out.weights)  # for a step-size control around the next optimiser step, if installed
    diag = estimators.diagnostics(out.seq_log_ratio, eps)  # once per micro-batch call
    out.metrics = {**diag, **out.metrics}
    out.logged = batch_statistics(out, log_prob, old_log_prob, mask, estimator, eps, diag)  # the trainer's names
    from ..warning_verl import loss_metrics

    out.logged.update(loss_metrics(log_prob, old_log_prob, mask))  # the early warning's, when installed ({} if not)
    loss = out.loss * (B * dp / gbs) if gbs is not None else out.loss
    return loss, out


def _loss_with_rejected(estimator, log_prob, behaviour, mask, adv, G, eps, options, dp, gbs, B, denominator="kept"):
    """The loss of a micro-batch holding rejected responses (empty mask): per group, the weights of
    ``estimator`` on its k kept responses (:func:`estimators.weights` on each set of groups with the same k),
    0 for the rejected ones, the group's term ``(1/k) sum_kept c_i A_i`` (``denominator = kept``: the group mean
    over its kept responses) or ``(1/G) sum_kept c_i A_i`` (``sampled``), averaged over the micro-batch's groups
    (a group with none kept contributes 0). The diagnostics and the step control's ratios are those of the groups
    with no rejected response."""
    import torch

    import estimators
    from estimators.losses import LossOutput, is_batch_coupled, trajectory_log_ratio

    spec = estimators.get_scheme(estimator)
    if is_batch_coupled(estimator) or spec.surrogate == "clamp":
        raise ValueError(f"loss_mode {estimator!r} with rejected responses (an empty response_mask, from "
                         "algorithm.rollout_correction.rollout_rs) is not supported: "
                         "its weights couple the whole batch "
                         "or its surrogate is not c * ratio; choose another loss or drop rollout_rs")
    m = mask.to(log_prob.dtype)
    lr = trajectory_log_ratio(log_prob, behaviour.detach(), m).reshape(-1, G)
    lr_d = lr.detach().double()
    a = adv.reshape(-1, G).double()
    keep = mask.any(-1).reshape(-1, G)
    k = keep.sum(-1)
    c = torch.zeros_like(lr_d)
    for size in sorted({int(x) for x in k.tolist()} - {0}):
        rows = k == size
        sel = keep[rows]
        sub = estimators.weights(estimator, lr_d[rows][sel].reshape(-1, size), eps,
                                 a[rows][sel].reshape(-1, size) if spec.needs_advantages else None, **options)
        block = torch.zeros_like(lr_d[rows])
        block[sel] = sub.reshape(-1)
        c[rows] = block
    c_used = torch.where((a == 0) | ~keep, torch.zeros((), dtype=c.dtype), c).to(lr.dtype)
    factor = c_used * torch.exp(lr - lr.detach())
    count = k.clamp(min=1).to(lr.dtype) if denominator == "kept" else torch.full_like(k, G, dtype=lr.dtype)
    per_group = (factor * a.to(lr.dtype)).sum(-1) / count
    loss = -per_group.mean()
    whole = keep.all(-1)
    out = LossOutput(loss, lr_d[whole].to(lr.dtype), c[whole].to(lr.dtype), {})
    if bool(whole.any()):
        from .stepsize import record

        record(out.seq_log_ratio, out.weights)
        out.metrics = {**estimators.diagnostics(out.seq_log_ratio, eps)}
    out.metrics["rejected_frac"] = float((~keep).double().mean())
    out.logged = {}
    return (loss * (B * dp / gbs) if gbs is not None else loss), out


_LOSS_FNS: dict[tuple[str, str], Any] = {}

_ROLLOUT_LOG_PROBS: contextvars.ContextVar = contextvars.ContextVar("gmc_plugin_rollout_log_probs", default=None)
"""The rollout log-probs (B, T) of the micro-batch whose loss is being computed (set by :class:`EngineLoss`)."""

_GROUP_IDS: contextvars.ContextVar = contextvars.ContextVar("gmc_plugin_group_ids", default=None)
"""The prompt uids of the micro-batch whose loss is being computed (set by :class:`EngineLoss`)."""


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def make_policy_loss(estimator: str, style: str = METRICS_STYLE):
    """The verl policy-loss function for ``estimator`` in the given return ``style`` (cached)."""
    import estimators

    estimators.get_scheme(estimator)  # ValueError listing the valid names
    if style not in (METRICS_STYLE, TUPLE4_STYLE):
        raise ValueError(f"unknown return style {style!r}; valid: {METRICS_STYLE}, {TUPLE4_STYLE}")
    key = (estimator, style)
    if key in _LOSS_FNS:
        return _LOSS_FNS[key]

    def verl_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                         config=None, rollout_is_weights=None, rollout_log_probs=None):
        if rollout_log_probs is None:  # verl 0.9's ppo_loss passes none: the engine path hands them over
            rollout_log_probs = _ROLLOUT_LOG_PROBS.get()
        loss, out = trajectory_policy_loss(estimator, old_log_prob, log_prob, advantages, response_mask, config,
                                           rollout_is_weights, group_ids=_GROUP_IDS.get(),
                                           rollout_log_probs=rollout_log_probs, loss_agg_mode=loss_agg_mode)
        if style == METRICS_STYLE:
            return loss, {**{f"actor/{k}": v for k, v in out.logged.items()},
                          **metric_names(out.metrics, prefix="actor/")}
        import torch

        from estimators.losses import masked_token_log_ratio

        m = response_mask.to(log_prob.dtype)
        ppo_kl = masked_token_log_ratio(old_log_prob.detach(), log_prob.detach(), m).sum() / m.sum().clamp(min=1)
        clipfrac, capped = (torch.tensor(out.metrics[k], dtype=log_prob.dtype, device=log_prob.device)
                            for k in ("frac_clipped", "frac_groups_capped"))
        return loss, clipfrac, ppo_kl, capped

    verl_policy_loss.__name__ = f"compute_policy_loss_{estimator}"
    verl_policy_loss.__qualname__ = verl_policy_loss.__name__
    verl_policy_loss.__doc__ = f"verl policy loss {estimator!r}: estimators.losses.trajectory_loss on one micro-batch."
    verl_policy_loss.gmc_plugin_estimator = estimator
    _LOSS_FNS[key] = verl_policy_loss
    return verl_policy_loss


@contextlib.contextmanager
def rollout_log_probs(values):
    """Within this block the plugin's policy losses take ``values`` (B, T) as the rollout's log-probs
    (:class:`EngineLoss` hands over the micro-batch's ``rollout_log_probs``)."""
    token = _ROLLOUT_LOG_PROBS.set(values)
    try:
        yield
    finally:
        _ROLLOUT_LOG_PROBS.reset(token)


@contextlib.contextmanager
def group_ids(ids):
    """Within this block the plugin's policy losses take the groups from ``ids`` (the prompt
    uid of every row of the micro-batch), in any row order (:class:`EngineLoss` uses it)."""
    token = _GROUP_IDS.set(None if ids is None else list(ids))
    try:
        yield
    finally:
        _GROUP_IDS.reset(token)
