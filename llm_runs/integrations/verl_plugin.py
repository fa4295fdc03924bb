"""verl plugin: GMC and every other trajectory-level scheme of :mod:`estimators` as verl
policy losses, plus group advantage estimators that check the group layout.

Load it in every verl process with ``actor_rollout_ref.model.external_lib=llm_runs.integrations.verl_plugin``
(verl imports ``external_lib`` when it builds the model config, in the driver and in each
worker). Importing this module registers, if verl is importable:

* policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``) for every scheme
  of :data:`estimators.SCHEMES`: ``gmc``, ``tic_mask``, ``tic_trunc``, ``tic_ppo``, ``snis``,
  ``is``, ``stale``, ``topr``, ``seq_tis_bn``, ``seq_mis``, ``seq_geo_mask``, ``vespo``. Knobs (``C`` of
  ``seq_tis_bn``, ``lo``/``hi`` of ``seq_mis``, ...) take their defaults of :data:`estimators.params.PARAMS` (verl's
  ``PolicyLossConfig`` refuses extra fields); ``seq_tis_bn``'s batch is the micro-batch the
  loss sees, not verl's whole batch. The surrogate is :func:`estimators.losses.trajectory_loss` itself:
  one trajectory log-ratio ``l_i = sum_t (log_prob - old_log_prob)`` per response, weights
  ``c = estimators.weights(scheme, l, eps)`` per group, loss ``-(1/N) sum_i c_i A_i`` over
  the N responses of the mini-batch, i.e. THEORY §2's ``g_hat(c)`` averaged over groups.
* advantage estimators (``algorithm.adv_estimator=<name>``) ``gmc_loo``, ``gmc_grpo``,
  ``gmc_drgrpo``: :func:`estimators.advantages` of kind loo / grpo / drgrpo on the summed
  token rewards, per group of rows sharing ``index`` (the prompt uid of each row), the rows
  of a group in any order (as verl's own ``grpo`` groups them); every group must have the
  same size;
* the engine-path patch (:func:`patch_engine_path`) that hands each micro-batch's prompt uids
  to these losses, and a CPU platform for verl (:func:`cpu_platform`, chosen with
  ``VERL_PLATFORM=cpu``; tests and laptops).

Without verl the import does nothing (``REGISTERED == []``); :func:`register` then raises
an ``ImportError`` saying how to install verl.

How the group reaches the loss
==============================

verl's policy loss sees ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights)`` for one micro-batch and never the group ids; extra fields under
``policy_loss`` are refused by verl's ``PolicyLossConfig``. But on verl's engine path (verl
0.8+: ``ActorRolloutRefWorker`` -> ``TrainingWorker`` -> FSDP/Megatron engine -> ``ppo_loss``)
every micro-batch TensorDict carries the prompt ``uid`` of each row, so the plugin takes the
groups from the data (:func:`patch_engine_path`):

1. **Before verl cuts the batch** into mini- and micro-batches (``TrainingWorker.train_mini_batch``
   and ``train_batch``), the rows of each uid are made contiguous (:func:`regroup_by_uid`); a
   batch that ``balance_batch`` reordered is regrouped, not refused. Each rank only sees its
   own share, so a group whose rows verl dispatched to several ranks cannot be regrouped: the
   rank refuses it (:func:`check_whole_groups_on_rank`, ``ValueError`` naming the uid).
2. **Where the loss runs**, :class:`EngineLoss` hands the micro-batch's uids to the policy loss,
   which orders the rows by group (any order within the micro-batch) and refuses a micro-batch
   holding part of a group (``ValueError`` naming the uid). G = ``config.rollout_n`` (verl fills
   it from ``actor_rollout_ref.rollout.n``); ``shuffle`` and ``use_dynamic_bsz`` must be off
   (both reorder rows after the regrouping); ``ppo_micro_batch_size_per_gpu`` and each rank's
   share of the mini-batch (``global_batch_info``) must be multiples of G.

``trainer.balance_batch`` (verl 0.9.1's legacy trainer, ``RayPPOTrainer._balance_batch``)
splits the rows into ``dp_size`` equal partitions of similar token counts, ignoring the uids,
and the dispatcher gives partition k to rank k. With one data-parallel rank the one partition
is the whole batch in another order: the ``gmc_*`` estimators group by uid and the worker
regroups, so balancing is harmless. With several ranks it splits groups across ranks, which
nothing inside a rank can undo: keep ``trainer.balance_batch=False`` there (the rank raises
otherwise). The v1 trainer (``trainer.use_v1=True``, verl 0.9's default) always balances and
pads the batch with rows of a synthetic uid; it is not supported (``trainer.use_v1=False``).

Without the uids (the policy loss called directly, an older actor) the loss relies on the
layout: each block of G consecutive rows of the micro-batch is one group. It checks, as a
tripwire, that each block has group-relative advantages summing to 0 (true for loo, grpo and
drgrpo): a necessary condition only.

Other rules the loss enforces: one advantage per response (outcome rewards; a token-varying
advantage such as GAE is refused); ``rollout_is_weights`` only at sequence level (multiplied
into the advantage, i.e. ``c_i * rho_i * A_i``); ``eps`` is ``actor.clip_ratio_high`` (the
cap ``1 + eps``); ``loss_agg_mode`` does not apply to a trajectory loss (one term per
response; verl still uses it for the entropy and KL terms). Micro-batch losses are scaled
by ``B * dp_size / global_batch_size`` so that their sum over micro-batches and mean over
data-parallel ranks is the mini-batch mean, as verl's ``agg_loss`` does.

Metrics (verl naming, averaged over micro-batches by verl): ``actor/stale/<key>`` for every
key of :func:`estimators.diagnostics`, computed on the raw ratios (see
:mod:`llm_runs.integrations._common`), e.g. ``actor/stale/mass_cap_frac`` (capped-group
fraction), ``actor/stale/clip_frac``, ``actor/stale/ess``,
``actor/stale/log_ratio_max``.

verl versions
=============

Current verl returns ``(loss, metrics)``; older releases returned
``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)`` and called the loss with no
``rollout_is_weights`` (0.4) or with ``rollout_log_probs`` (0.5). :func:`return_style` reads
which one the installed verl expects from the return annotation of
``core_algos.PolicyLossFn`` and of ``compute_policy_loss_vanilla`` (an unreadable or
contradictory answer is an error, never a guess). In the 4-tuple style the plugin returns
``(loss, frac_clipped, ppo_kl, frac_groups_capped)``, so the old actor logs the capped-group
fraction as ``actor/pg_clipfrac_lower``; the other diagnostics are not reported there.
Older configs without ``rollout_n`` may give G as ``+actor_rollout_ref.actor.policy_loss.group_size=G``.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import typing
from typing import Any

from ._common import metric_names

ADVANTAGE_ESTIMATORS = {"gmc_loo": "loo", "gmc_grpo": "grpo", "gmc_drgrpo": "drgrpo"}
"""verl advantage-estimator name -> :func:`estimators.advantages` kind."""

METRICS_STYLE = "metrics"  # (loss, {name: value})
TUPLE4_STYLE = "tuple4"  # (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)

INSTALL_HINT = (
    "verl is not installed; install it with its own dependencies, in an environment without TRL: "
    "pip install torch==2.13.0 -e '.[verl]' (verl 0.9.1, uvicorn, fastapi; `make setup-verl` builds .venv-verl)"
)


def loss_names() -> list[str]:
    """Every policy-loss name the plugin registers: the trajectory schemes of :mod:`estimators`."""
    import estimators

    return list(estimators.SCHEMES)


def _core_algos():
    """``verl.trainer.ppo.core_algos``, or None when verl itself is not installed.

    A verl that is installed but fails to import (a missing dependency) raises: hiding it
    would turn into a confusing "Unsupported loss mode" later.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "verl":
            return None
        raise
    return core_algos


# --------------------------------------------------------------------------- return style


def _style_of_annotation(ret) -> str | None:
    """Classify a return annotation as the metrics-dict or the 4-tensor style (None: unknown)."""
    if ret is None or ret is inspect.Signature.empty:
        return None
    if isinstance(ret, str):  # postponed annotations
        text = ret.replace(" ", "")
        if "dict" in text.lower():
            return METRICS_STYLE
        return TUPLE4_STYLE if text.count("Tensor") == 4 else None
    args = typing.get_args(ret)
    if len(args) == 2 and (args[1] is dict or typing.get_origin(args[1]) is dict):
        return METRICS_STYLE
    if len(args) == 4 and all("Tensor" in getattr(a, "__name__", str(a)) for a in args):
        return TUPLE4_STYLE
    return None


def return_style(core_algos) -> str:
    """Which return convention the installed verl's actor unpacks: ``"metrics"`` or ``"tuple4"``.

    Read from the registry's type ``core_algos.PolicyLossFn`` (``Callable[[...], ret]``) and
    from ``compute_policy_loss_vanilla``'s return annotation. Raises ``RuntimeError`` when
    neither tells, or when they disagree.
    """
    found = {}
    fn_type = getattr(core_algos, "PolicyLossFn", None)
    if fn_type is not None:
        args = typing.get_args(fn_type)
        if len(args) == 2:
            found["PolicyLossFn"] = _style_of_annotation(args[1])
    vanilla = getattr(core_algos, "compute_policy_loss_vanilla", None)
    if vanilla is not None:
        found["compute_policy_loss_vanilla"] = _style_of_annotation(inspect.signature(vanilla).return_annotation)
    styles = {s for s in found.values() if s is not None}
    if len(styles) == 1:
        return styles.pop()
    raise RuntimeError(
        "cannot tell whether this verl's policy losses return (loss, metrics) or a 4-tuple: "
        f"return annotations read {found or 'nothing'} (from core_algos.PolicyLossFn and "
        "compute_policy_loss_vanilla); refusing to guess"
    )


# --------------------------------------------------------------------------- the loss


def _cfg(config, key, default=None):
    getter = getattr(config, "get", None)
    if getter is not None:
        return getter(key, default)
    return getattr(config, key, default)


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
    count = m.sum(-1).clamp(min=1)
    row = (values * m).sum(-1) / count
    spread = ((values - row[:, None]).abs() * m).amax(-1)
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
        "a group is split across micro-batches, mini-batches or data-parallel ranks. Keep ppo_micro_batch_size_per_gpu and each rank's share of ppo_mini_batch_size multiples of G, "
        "actor.shuffle=False, use_dynamic_bsz=False and, with several data-parallel ranks, the batch "
        "unbalanced (trainer.balance_batch=False)")
    return [i for r in rows.values() for i in r]


def trajectory_policy_loss(scheme: str, old_log_prob, log_prob, advantages, response_mask, config,
                           rollout_is_weights=None, group_ids=None):
    """``(loss, LossOutput)`` of ``scheme`` on one verl micro-batch (see the module docstring).

    ``group_ids`` (the prompt uid of every row, as the engine path passes them) takes the groups
    from the data, in any row order; without them the rows must be contiguous groups of G.
    """
    from estimators.losses import policy_loss

    if config is None:
        raise ValueError(f"policy loss {scheme!r} needs verl's actor config (group size, eps, batch layout)")
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
    out = policy_loss(scheme, log_prob, old_log_prob, mask, adv, G, eps)
    diag = estimators.diagnostics(out.seq_log_ratio, eps)  # once per micro-batch call
    out.metrics = {**diag, **out.metrics}
    from ..theory import batch_metrics

    out.logged = batch_metrics(out, log_prob, old_log_prob, mask, scheme, eps, diag)  # the trainer's names
    loss = out.loss * (B * dp / gbs) if gbs is not None else out.loss
    return loss, out


_LOSS_FNS: dict[tuple[str, str], Any] = {}

_GROUP_IDS: contextvars.ContextVar = contextvars.ContextVar("gmc_plugin_group_ids", default=None)
"""The prompt uids of the micro-batch whose loss is being computed (set by :class:`EngineLoss`)."""


def make_policy_loss(scheme: str, style: str = METRICS_STYLE):
    """The verl policy-loss function for ``scheme`` in the given return ``style`` (cached)."""
    import estimators

    estimators.get_scheme(scheme)  # ValueError listing the valid names
    if style not in (METRICS_STYLE, TUPLE4_STYLE):
        raise ValueError(f"unknown return style {style!r}; valid: {METRICS_STYLE}, {TUPLE4_STYLE}")
    key = (scheme, style)
    if key in _LOSS_FNS:
        return _LOSS_FNS[key]

    def verl_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                         config=None, rollout_is_weights=None, rollout_log_probs=None):
        if rollout_log_probs is not None:
            raise ValueError(
                "rollout_log_probs were passed (old verl's truncated-IS correction, tis_imp_ratio_cap > 0): the "
                f"trajectory scheme {scheme!r} already corrects with the trajectory ratio; disable that correction"
            )
        loss, out = trajectory_policy_loss(scheme, old_log_prob, log_prob, advantages, response_mask, config,
                                           rollout_is_weights, group_ids=_GROUP_IDS.get())
        if style == METRICS_STYLE:
            return loss, {**{f"actor/{k}": v for k, v in out.logged.items()}, **metric_names(out.metrics, prefix="actor/")}
        import torch

        m = response_mask.to(log_prob.dtype)
        ppo_kl = ((old_log_prob - log_prob).detach() * m).sum() / m.sum().clamp(min=1)
        clipfrac, capped = (torch.tensor(out.metrics[k], dtype=log_prob.dtype, device=log_prob.device)
                            for k in ("frac_clipped", "frac_groups_capped"))
        return loss, clipfrac, ppo_kl, capped

    verl_policy_loss.__name__ = f"compute_policy_loss_{scheme}"
    verl_policy_loss.__qualname__ = verl_policy_loss.__name__
    verl_policy_loss.__doc__ = f"verl policy loss {scheme!r}: estimators.losses.trajectory_loss on one micro-batch."
    verl_policy_loss.gmc_plugin_scheme = scheme
    _LOSS_FNS[key] = verl_policy_loss
    return verl_policy_loss


# --------------------------------------------------------------------------- advantages


def grouped_advantages(kind: str, token_level_rewards, response_mask, index=None, epsilon: float = 1e-6, **_):
    """:func:`estimators.advantages` of ``kind`` per group, the groups taken from ``index``.

    ``token_level_rewards`` (B, T) are summed per response; ``index`` (B,) holds the prompt
    uid of each row, in any row order (the rows of a uid need not be contiguous: verl's
    ``balance_batch`` reorders them before the advantages). Every uid must have the same
    number G of rows (``ValueError`` naming the uid otherwise). Returns
    ``(advantages, returns)``, both (B, T), the advantage repeated on every response token
    (verl's convention for outcome advantages), row for row as given.
    """
    import torch

    import estimators

    where = f"advantage estimator gmc_{kind}"
    if index is None:
        raise ValueError(f"{where} needs `index` (the prompt uid of every row)")
    ids = list(index)
    if len(ids) != token_level_rewards.shape[0]:
        raise ValueError(f"{where}: {len(ids)} prompt uids for {token_level_rewards.shape[0]} responses")
    if not ids:
        raise ValueError(f"{where}: no rows")
    rows = rows_by_uid(ids)
    first = next(iter(rows))
    G = len(rows[first])
    odd = groups_not_of_size(rows, G)
    if odd:
        uid, n = next(iter(odd.items()))
        raise ValueError(
            f"{where}: prompt uid {uid!r} has {n} rows but uid {first!r} has {G}: every group needs the same "
            f"number of responses (rollout.n); {len(odd)} of {len(rows)} groups differ"
        )
    order = torch.tensor([i for r in rows.values() for i in r], device=token_level_rewards.device)
    scores = token_level_rewards.detach().sum(-1).to(torch.float64)
    with torch.no_grad():
        grouped = estimators.advantages(scores[order].reshape(-1, G), kind, delta=epsilon).reshape(-1)
    adv = torch.empty_like(grouped)
    adv[order] = grouped
    adv = adv.to(token_level_rewards.dtype)[:, None] * response_mask.to(token_level_rewards.dtype)
    return adv, adv


def _gmc_loo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_loo: leave-one-out advantages (THEORY §1, the toolkit's canonical choice)."""
    return grouped_advantages("loo", token_level_rewards, response_mask, index, epsilon)


def _gmc_grpo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_grpo: (r - mean) / (std + epsilon), Bessel std, as verl's grpo."""
    return grouped_advantages("grpo", token_level_rewards, response_mask, index, epsilon)


def _gmc_drgrpo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_drgrpo: r - mean (Dr. GRPO)."""
    return grouped_advantages("drgrpo", token_level_rewards, response_mask, index, epsilon)


_ESTIMATOR_FNS = {"gmc_loo": _gmc_loo, "gmc_grpo": _gmc_grpo, "gmc_drgrpo": _gmc_drgrpo}


# --------------------------------------------------------------------------- verl's engine path


@contextlib.contextmanager
def group_ids(ids):
    """Within this block the plugin's policy losses take the groups from ``ids`` (the prompt
    uid of every row of the micro-batch), in any row order (:class:`EngineLoss` uses it)."""
    token = _GROUP_IDS.set(None if ids is None else list(ids))
    try:
        yield
    finally:
        _GROUP_IDS.reset(token)


def _uids(data) -> list | None:
    """The prompt uid of every row of a verl TensorDict (None: the data carries none)."""
    if data is None or "uid" not in data.keys():  # noqa: SIM118 (TensorDict wants keys())
        return None
    from verl.utils import tensordict_utils as tu

    uids = tu.get(data, "uid")
    return list(uids) if isinstance(uids, (list, tuple)) or hasattr(uids, "__len__") else None


def _plugin_scheme(loss_fn) -> str | None:
    """The plugin scheme a verl engine loss (``partial(ppo_loss, config=actor_config)``) selects, else None."""
    config = getattr(loss_fn, "keywords", {}).get("config") if loss_fn is not None else None
    policy_loss = _cfg(config, "policy_loss") if config is not None else None
    mode = _cfg(policy_loss, "loss_mode") if policy_loss is not None else None
    return mode if mode in _registered_names() else None


def _registered_names() -> list[str]:
    return REGISTERED or loss_names()


class EngineLoss:
    """verl's engine loss (``partial(ppo_loss, config=...)``) with the micro-batch's prompt uids
    handed to the plugin's policy loss, which ``ppo_loss`` calls without them."""

    def __init__(self, inner, scheme: str):
        self.inner, self.scheme = inner, scheme
        self.keywords = getattr(inner, "keywords", {})  # still looks like the partial verl built

    def __call__(self, model_output, data, dp_group=None):
        with group_ids(_uids(data)):  # by keyword, as verl's engines call it (config is bound by keyword)
            return self.inner(model_output=model_output, data=data, dp_group=dp_group)

    def __repr__(self):
        return f"EngineLoss({self.scheme!r}, {self.inner!r})"


def regroup_by_uid(data):
    """``data`` (a verl TensorDict) with the rows of each prompt uid made contiguous, groups in
    order of first appearance (unchanged when they already are, or when there is no uid)."""
    ids = _uids(data)
    if ids is None:
        return data
    order = [i for r in rows_by_uid(ids).values() for i in r]
    if order == list(range(len(ids))):
        return data
    from verl.utils import tensordict_utils as tu

    return tu.index_select_tensor_dict(data, order)


def check_whole_groups_on_rank(data, G: int) -> None:
    """Refuse a rank's training batch that holds part of a group (``ValueError`` naming the uid).

    Each data-parallel rank trains on its own share of the batch; the regrouping inside the
    rank cannot bring back rows that verl dispatched to another rank. With several ranks
    verl's ``trainer.balance_batch=True`` partitions the rows by sequence length, ignoring the
    prompt uids, so a group's responses end up on different ranks.
    """
    ids = _uids(data)
    if ids is None:
        return
    whole_groups(ids, G, "in this rank's training batch",
                 "the group is split across data-parallel ranks. With several data-parallel ranks set trainer.balance_batch=False (verl's balancing partitions "
                 "rows by length, ignoring groups) and keep train_batch_size a multiple of the number of ranks")


def _regrouping(method):
    """A TrainingWorker method that first checks and regroups its batch by uid when the plugin's loss is set."""
    import functools

    @functools.wraps(method)
    def wrapper(self, data, *args, **kwargs):
        loss_fn = getattr(self, "loss_fn", None)
        if isinstance(loss_fn, EngineLoss):
            config = loss_fn.keywords.get("config")
            if config is not None:
                check_whole_groups_on_rank(data, group_size_from(config))
            data = regroup_by_uid(data)
        return method(self, data, *args, **kwargs)

    wrapper.gmc_plugin_wrapped = method
    return wrapper


def _wrapping_set_loss_fn(method):
    import functools

    @functools.wraps(method)
    def set_loss_fn(self, loss_fn):
        scheme = _plugin_scheme(loss_fn)
        if scheme is not None and not isinstance(loss_fn, EngineLoss):
            loss_fn = EngineLoss(loss_fn, scheme)
        return method(self, loss_fn)

    set_loss_fn.gmc_plugin_wrapped = method
    return set_loss_fn


def patch_engine_path(engine_workers=None) -> bool:
    """Make verl's engine path give the plugin's losses whole groups, taken from the data.

    Why a patch: verl's engine loss ``ppo_loss`` (verl/workers/utils/losses.py) calls a
    registered policy loss with log-probs, advantages and the mask only, although the
    micro-batch it holds carries every row's prompt ``uid``; and the batch reaches
    ``TrainingWorker`` in whatever order the trainer left it (``balance_batch`` sorts rows by
    length), which then cuts it into mini- and micro-batches of consecutive rows. Three
    methods of ``verl.workers.engine_workers.TrainingWorker`` are wrapped (idempotent):

    * ``set_loss_fn``: a loss whose ``config.policy_loss.loss_mode`` is a plugin scheme is
      wrapped in :class:`EngineLoss`, which hands the micro-batch's uids to the policy loss;
      the policy loss then forms the groups from them (any row order inside a micro-batch)
      and refuses a micro-batch holding part of a group;
    * ``train_mini_batch`` and ``train_batch``: with such a loss, the batch is first
      regrouped by uid (:func:`regroup_by_uid`), so that consecutive rows, and so every
      mini- and micro-batch of a multiple of G rows, hold whole groups.

    Other losses pass through untouched. Tested with verl 0.9.1 (``ActorRolloutRefWorker``
    builds ``partial(ppo_loss, config=actor_config)`` after importing ``external_lib`` and
    hands it to its ``TrainingWorker`` with ``set_loss_fn``). Returns False when verl's
    engine workers cannot be imported (older verl: the layout checks of the loss remain).
    """
    if engine_workers is None:
        try:
            from verl.workers import engine_workers
        except ImportError:
            return False
    worker = getattr(engine_workers, "TrainingWorker", None)
    if worker is None:
        return False
    for name, wrap in (("set_loss_fn", _wrapping_set_loss_fn), ("train_mini_batch", _regrouping),
                       ("train_batch", _regrouping)):
        method = worker.__dict__.get(name)
        if method is None:
            raise RuntimeError(f"verl's TrainingWorker has no {name}: this verl is not one the plugin is tested with")
        if not hasattr(method, "gmc_plugin_wrapped"):
            setattr(worker, name, wrap(method))
    return True


# --------------------------------------------------------------------------- a CPU platform

CPU_PLATFORM = "cpu"
"""``VERL_PLATFORM=cpu`` selects :func:`cpu_platform` (never auto-detected)."""


def cpu_platform():
    """A verl platform for one CPU process (tests, laptops), registered as ``cpu``.

    verl 0.9.1 ships cuda / npu / rocm platforms only and registers its FSDP engines for
    those devices; on CPU the FSDP2 engine works with one gloo rank once a platform answers
    ``device_name == "cpu"``. This class is registered through verl's own
    ``PlatformRegistry`` and is chosen only with ``VERL_PLATFORM=cpu`` (its
    ``is_platform_available`` is False, so a CPU-only Ray driver of a GPU job keeps verl's
    auto-detection). With ``VERL_PLATFORM=cpu`` the plugin also registers verl's FSDP /
    FSDP2 engine classes for the device ``cpu`` (:func:`register_cpu_engines`). Tested with
    verl 0.9.1.
    """
    import contextlib
    import types

    import torch
    from verl.plugin.platform import PlatformRegistry
    from verl.plugin.platform.platform_base import PlatformBase

    existing = PlatformRegistry.get(CPU_PLATFORM)
    if existing is not None:
        return existing

    def _zero(*_a, **_k):
        return 0

    def _none(*_a, **_k):
        return None

    # what verl calls on get_torch_device(): memory statistics (0 on CPU) and no-ops
    cpu_module = types.SimpleNamespace(
        **{n: getattr(torch.cpu, n) for n in ("is_available", "synchronize", "current_device", "device_count",
                                              "Stream", "stream", "current_stream", "Event") if hasattr(torch.cpu, n)},
        max_memory_allocated=_zero, max_memory_reserved=_zero, memory_allocated=_zero, memory_reserved=_zero,
        reset_peak_memory_stats=_none, empty_cache=_none, manual_seed=torch.manual_seed, get_device_name=lambda *a: "CPU",
        manual_seed_all=torch.manual_seed, set_device=_none, mem_get_info=lambda *a: (0, 0),
        get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state, is_initialized=lambda: True)

    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = cpu_module

        def is_available(self):
            return True

        def is_platform_available(self, use_smi_check=False):
            return False  # only by VERL_PLATFORM=cpu

        def current_device(self):
            return "cpu"  # verl moves modules and tensors with .to(get_device_id()); an index would mean cuda

        def device_count(self):
            return 1

        def set_device(self, device_index):
            return None

        def synchronize(self, device_index=None):
            return None

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            return None

        def empty_cache(self):
            return None

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            return None

        def profiler_stop(self):
            return None

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    # PlatformBase declares these as abstract properties; plain class attributes satisfy them
    for name in ("device_name", "vendor_name", "device_module"):
        PlatformCPU.__abstractmethods__ = frozenset(PlatformCPU.__abstractmethods__ - {name})
    PlatformRegistry.register(platform=CPU_PLATFORM)(PlatformCPU)
    return PlatformCPU


def init_cpu_process_group() -> None:
    """The one-rank gloo process group verl's workers expect, for a CPU run outside Ray.

    verl's ``initialize_global_process_group_ray`` (called by ``TrainingWorker``) asks for the
    backend ``"cpu:gloo,<device>:<comm backend>"``, which on the ``cpu`` platform reads
    ``"cpu:gloo,cpu:gloo"`` and torch refuses as a duplicate; it skips the call when a group
    exists, so this creates it first (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the
    environment, defaults 0 / 1 / 127.0.0.1 / a free port). Tested with verl 0.9.1.
    """
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def register_cpu_engines() -> None:
    """verl's FSDP / FSDP2 engines (language model, value model) for the device ``cpu``
    (verl 0.9.1 registers them for cuda and npu only). Idempotent."""
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    for model_type, cls_name in (("language_model", "FSDPEngineWithLMHead"), ("value_model", "FSDPEngineWithValueHead")):
        cls = getattr(transformer_impl, cls_name, None)
        if cls is None:
            continue
        for backend in ("fsdp", "fsdp2"):
            if CPU_PLATFORM not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device=CPU_PLATFORM)(cls)


# --------------------------------------------------------------------------- registration


def register(core_algos=None) -> list[str]:
    """Register every loss and advantage estimator with verl; returns the loss names.

    Idempotent. ``core_algos`` defaults to ``verl.trainer.ppo.core_algos`` (tests pass a
    stand-in). A loss name verl already uses for a loss of its own is refused.
    """
    core = core_algos if core_algos is not None else _core_algos()
    if core is None:
        raise ImportError(INSTALL_HINT)
    style = return_style(core)
    names = loss_names()
    for name in names:
        existing = core.POLICY_LOSS_REGISTRY.get(name)
        if existing is not None and getattr(existing, "gmc_plugin_scheme", None) != name:
            raise ValueError(f"verl already has a policy loss named {name!r} ({existing!r}); not overriding it")
        core.register_policy_loss(name)(make_policy_loss(name, style))
    register_adv = getattr(core, "register_adv_est", None)
    if register_adv is not None:  # absent in the oldest releases: the loss-side checks remain
        for name, fn in _ESTIMATOR_FNS.items():
            register_adv(name)(fn)
    return names


def _install() -> list[str]:
    names = register()
    patch_engine_path()
    try:
        cpu_platform()
    except ImportError:  # verl before 0.9 has no verl.plugin.platform: no CPU platform to add
        return names
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM:
        register_cpu_engines()
    return names


REGISTERED: list[str] = _install() if _core_algos() is not None else []
"""Loss names registered at import ([] when verl is not installed)."""
