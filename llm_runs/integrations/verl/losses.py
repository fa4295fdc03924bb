"""The plugin's verl policy losses: every trajectory scheme of :mod:`estimators` on one verl
micro-batch, with the checks that a micro-batch holds whole groups (see :mod:`llm_runs.integrations.verl`)."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from estimators._compat import renamed_keywords

from .._common import batch_options, metric_names
from .compat import METRICS_STYLE, TUPLE4_STYLE, _cfg


def policy_loss_names() -> list[str]:
    """The verl policy-loss names the plugin registers: the trajectory schemes of :mod:`estimators`
    (:func:`estimators.losses.loss_names` also lists the token-level losses, which verl has its own of)."""
    import estimators

    return list(estimators.SCHEMES)


def group_size_from(config) -> int:
    """G: ``config.rollout_n`` (filled by verl from ``actor_rollout_ref.rollout.n``), else
    ``config.policy_loss.group_size`` (older DictConfig-based verl)."""
    G = _cfg(config, "rollout_n")
    source = "actor.rollout_n (from actor_rollout_ref.rollout.n)"
    if G is None:
        G = _cfg(_cfg(config, "policy_loss", {}) or {}, "group_size")
        source = "actor.policy_loss.group_size"
    if G is None:
        raise ValueError(
            "the trajectory loss needs the group size G: set actor_rollout_ref.rollout.n "
            "(verl copies it to actor.rollout_n) or, on old verl, +actor_rollout_ref.actor.policy_loss.group_size"
        )
    if isinstance(G, bool) or not isinstance(G, int) or G < 2:
        raise ValueError(f"{source} = {G!r}: group-relative trajectory losses need groups of G >= 2")
    return G


def eps_from(config) -> float:
    """eps of the cap 1+eps: ``actor.clip_ratio_high`` (else ``actor.clip_ratio``)."""
    eps = _cfg(config, "clip_ratio_high")
    if eps is None:
        eps = _cfg(config, "clip_ratio")
    if eps is None:
        raise ValueError("actor.clip_ratio_high and actor.clip_ratio are both None: the cap 1+eps needs eps; set "
                         "actor_rollout_ref.actor.clip_ratio_high (e.g. 0.28)")
    try:
        return float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"actor.clip_ratio_high / clip_ratio must be a number (eps of the cap 1+eps), got {eps!r}") \
            from None


VERL_POLICY_LOSS_FIELDS = ("_target_", "loss_mode", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                           "ppo_kl_coef", "dro_beta", "rollout_correction", "group_size")
"""Keys of ``actor.policy_loss`` that are verl's own (verl 0.9.1's ``PolicyLossConfig``) or the plugin's
``group_size`` (old verl): never a knob."""


def knob_names() -> list[str]:
    """Every knob name of every scheme the plugin registers (:data:`estimators.params.PARAMS`)."""
    from estimators.params import params_of

    return sorted({p.name for s in policy_loss_names() for p in params_of(s)})


def extend_policy_loss_config() -> type | None:
    """Make verl's ``PolicyLossConfig`` (a dataclass that refuses fields it does not declare) take every
    knob of :func:`knob_names` (``None``: not set), so that ``+actor_rollout_ref.actor.policy_loss.kappa=2``
    reaches :func:`estimator_options_from`: a subclass declaring them replaces it in
    ``verl.workers.config``, where the configs' ``_target_`` points. Idempotent; returns the class
    (None: a verl without ``verl.workers.config``). It acts in a process that imported the plugin
    before building the actor config (verl's workers, through ``external_lib``)."""
    import dataclasses
    import importlib

    try:
        wc = importlib.import_module("verl.workers.config")
    except ModuleNotFoundError:
        return None
    current = getattr(wc, "PolicyLossConfig", None)
    if current is None or getattr(current, "gmc_plugin_knobs", None) is not None:
        return current
    own = {f.name for f in dataclasses.fields(current)}
    knobs = [k for k in knob_names() if k not in own]
    ext = dataclasses.make_dataclass("PolicyLossConfig", [(k, float | None, dataclasses.field(default=None))
                                                          for k in knobs], bases=(current,))
    ext.__module__ = current.__module__
    ext.gmc_plugin_knobs = tuple(knobs)
    for module in {wc, importlib.import_module(current.__module__)}:
        if getattr(module, "PolicyLossConfig", None) is current:
            module.PolicyLossConfig = ext
    return ext


@renamed_keywords(scheme="estimator")
def estimator_options_from(config, estimator: str) -> dict:
    """The knobs of ``estimator`` set in verl's actor config, each under ``actor.policy_loss.<knob>``
    (``+actor_rollout_ref.actor.policy_loss.kappa=2`` for ``gmc_cap``; the names of
    :data:`estimators.params.PARAMS`), checked (:func:`estimators.losses.check_options`). A key there
    that is neither verl's own (:data:`VERL_POLICY_LOSS_FIELDS`) nor a knob of ``estimator`` is refused
    naming it, a knob of another estimator included; a knob left unset (absent or None) takes its
    default, except a completion length (``seq_geo_mask``'s ``length``), which comes from the batch."""
    from estimators.losses import check_options
    from estimators.params import params_of

    pl = _cfg(config, "policy_loss", None)
    if pl is None:
        return {}
    if hasattr(pl, "keys"):
        keys = list(pl.keys())
    else:
        import dataclasses

        keys = [f.name for f in dataclasses.fields(pl)] if dataclasses.is_dataclass(pl) else []
    mine = {p.name for p in params_of(estimator)}
    given = {k: _cfg(pl, k) for k in keys if k not in VERL_POLICY_LOSS_FIELDS and _cfg(pl, k) is not None}
    unknown = sorted(set(given) - mine)
    if unknown:
        raise ValueError(f"actor.policy_loss sets {unknown}, which loss_mode {estimator!r} does not take (its knobs: "
                         f"{', '.join(sorted(mine)) or 'none'}); remove them or choose the loss they belong to")
    check_options(estimator, given)  # a bad value is refused naming the knob
    return given


def scheme_options_from(config, estimator: str) -> dict:
    """Deprecated name of :func:`estimator_options_from` (a ``DeprecationWarning``)."""
    import warnings

    warnings.warn("scheme_options_from is deprecated: use estimator_options_from", DeprecationWarning, stacklevel=2)
    return estimator_options_from(config, estimator)


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


@renamed_keywords(scheme="estimator")
def trajectory_policy_loss(estimator: str, old_log_prob, log_prob, advantages, response_mask, config,
                           rollout_is_weights=None, group_ids=None):
    """``(loss, LossOutput)`` of the trajectory scheme ``estimator`` on one verl micro-batch (see the
    module docstring).

    ``group_ids`` (the prompt uid of every row, as the engine path passes them) takes the groups
    from the data, in any row order; without them the rows must be contiguous groups of G.
    """
    from estimators.losses import policy_loss

    if config is None:
        raise ValueError(f"policy loss {estimator!r} needs verl's actor config (group size, eps, batch layout)")
    G = group_size_from(config)
    B = log_prob.shape[0]
    dp, gbs = _check_layout_config(config, B, G)
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
    empty = ~mask.any(-1)
    if bool(empty.any()):
        import torch

        rows = [int(i) for i in torch.nonzero(empty)[:, 0]]
        raise ValueError(f"response {rows[0]} of the micro-batch has an empty response_mask (no response token; "
                         f"{len(rows)} such rows): a trajectory loss needs a log-ratio for every response. Drop "
                         "empty responses before the update, or give each at least its EOS token")
    adv = _per_response(advantages.detach(), mask, "advantage")
    _check_zero_sum(adv, G)
    if rollout_is_weights is not None:
        adv = adv * _per_response(rollout_is_weights.detach().to(adv.dtype), mask, "rollout_is_weights")
    import estimators

    eps = eps_from(config)
    options = batch_options(estimator, estimator_options_from(config, estimator), mask)
    out = policy_loss(estimator, log_prob, old_log_prob, mask, adv, G, eps, **options)
    from .stepsize import record

    record(out.seq_log_ratio, out.weights)  # for a step-size control around the next optimiser step, if installed
    diag = estimators.diagnostics(out.seq_log_ratio, eps)  # once per micro-batch call
    out.metrics = {**diag, **out.metrics}
    from ...theory import batch_metrics

    out.logged = batch_metrics(out, log_prob, old_log_prob, mask, estimator, eps, diag)  # the trainer's names
    loss = out.loss * (B * dp / gbs) if gbs is not None else out.loss
    return loss, out


_LOSS_FNS: dict[tuple[str, str], Any] = {}

_GROUP_IDS: contextvars.ContextVar = contextvars.ContextVar("gmc_plugin_group_ids", default=None)
"""The prompt uids of the micro-batch whose loss is being computed (set by :class:`EngineLoss`)."""


@renamed_keywords(scheme="estimator")
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
        if rollout_log_probs is not None:
            raise ValueError(
                "rollout_log_probs were passed (old verl's truncated-IS correction, tis_imp_ratio_cap > 0): the "
                f"trajectory scheme {estimator!r} already corrects with the trajectory ratio; disable that correction"
            )
        loss, out = trajectory_policy_loss(estimator, old_log_prob, log_prob, advantages, response_mask, config,
                                           rollout_is_weights, group_ids=_GROUP_IDS.get())
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
def group_ids(ids):
    """Within this block the plugin's policy losses take the groups from ``ids`` (the prompt
    uid of every row of the micro-batch), in any row order (:class:`EngineLoss` uses it)."""
    token = _GROUP_IDS.set(None if ids is None else list(ids))
    try:
        yield
    finally:
        _GROUP_IDS.reset(token)
