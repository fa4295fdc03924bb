"""verl plugin: GMC and every other trajectory-level scheme of :mod:`estimators` as verl
policy losses, plus group advantage estimators that check the group layout.

Load it in every verl process with ``actor_rollout_ref.model.external_lib=llm_runs.integrations.verl_plugin``
(verl imports ``external_lib`` when it builds the model config, in the driver and in each
worker). Importing this module registers, if verl is importable:

* policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``) for every scheme
  of :data:`estimators.SCHEMES`: ``gmc``, ``tic_mask``, ``tic_trunc``, ``tic_ppo``, ``snis``,
  ``is``, ``stale``, ``topr``, ``seq_tis_bn``, ``seq_mis``. Knobs (``C`` of ``seq_tis_bn``,
  ``lo``/``hi`` of ``seq_mis``) take their defaults of :data:`estimators.params.PARAMS` (verl's
  ``PolicyLossConfig`` refuses extra fields); ``seq_tis_bn``'s batch is the micro-batch the
  loss sees, not verl's whole batch. The surrogate is :func:`estimators.losses.trajectory_loss` itself:
  one trajectory log-ratio ``l_i = sum_t (log_prob - old_log_prob)`` per response, weights
  ``c = estimators.weights(scheme, l, eps)`` per group, loss ``-(1/N) sum_i c_i A_i`` over
  the N responses of the mini-batch, i.e. THEORY §2's ``g_hat(c)`` averaged over groups.
* advantage estimators (``algorithm.adv_estimator=<name>``) ``gmc_loo``, ``gmc_grpo``,
  ``gmc_drgrpo``: :func:`estimators.advantages` of kind loo / grpo / drgrpo on the summed
  token rewards, after checking with ``index`` (the prompt uid of each row) that the rows
  form whole, contiguous groups.

Without verl the import does nothing (``REGISTERED == []``); :func:`register` then raises
an ``ImportError`` saying how to install verl.

How the group reaches the loss
==============================

verl's policy loss sees ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights)`` for one micro-batch and never the group ids; extra fields under
``policy_loss`` are refused by verl's ``PolicyLossConfig``. The plugin therefore relies on
the layout and checks it at both ends:

1. **Where the ids are visible** (the ``gmc_*`` advantage estimator, which receives
   ``index``): rows must be whole groups of equal size G, each group contiguous. verl's
   trainer repeats each prompt ``rollout.n`` times interleaved, so this holds unless
   something reorders the batch before the advantages: ``trainer.balance_batch=True``
   sorts rows by length across data-parallel ranks, and the v1 trainer
   (``trainer.use_v1=True``, verl 0.9's default) always balances. The estimator raises a
   ``ValueError`` in both cases; use ``trainer.use_v1=False trainer.balance_batch=False``.
2. **Where the loss runs**, from the actor ``config`` verl passes in: G = ``config.rollout_n``
   (verl fills it from ``actor_rollout_ref.rollout.n``); ``shuffle`` and
   ``use_dynamic_bsz`` must be off (both reorder rows between the estimator and the loss);
   ``ppo_micro_batch_size_per_gpu``, the micro-batch and each rank's share of the
   mini-batch (``global_batch_info``) must be multiples of G. After the estimator's check
   the only later reorderings are those switches, so with them off every micro-batch is
   whole, aligned groups. As a tripwire the loss also checks that each block of G rows has
   group-relative advantages summing to 0 (true for loo, grpo and drgrpo): a necessary
   condition only, which catches most misaligned blocks but not all.

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

import inspect
import typing
from typing import Any

from ._common import check_contiguous_groups, metric_names

ADVANTAGE_ESTIMATORS = {"gmc_loo": "loo", "gmc_grpo": "grpo", "gmc_drgrpo": "drgrpo"}
"""verl advantage-estimator name -> :func:`estimators.advantages` kind."""

METRICS_STYLE = "metrics"  # (loss, {name: value})
TUPLE4_STYLE = "tuple4"  # (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)

INSTALL_HINT = (
    "verl is not installed; on CPU install it as the toolkit does: "
    "pip install --no-deps verl==0.9.1 && pip install ray tensordict omegaconf codetiming orjson"
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
    return float(eps if eps is not None else _cfg(config, "clip_ratio"))


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


def trajectory_policy_loss(scheme: str, old_log_prob, log_prob, advantages, response_mask, config,
                           rollout_is_weights=None):
    """``(loss, LossOutput)`` of ``scheme`` on one verl micro-batch (see the module docstring)."""
    from estimators.losses import policy_loss

    if config is None:
        raise ValueError(f"policy loss {scheme!r} needs verl's actor config (group size, eps, batch layout)")
    G = group_size_from(config)
    B = log_prob.shape[0]
    dp, gbs = _check_layout_config(config, B, G)
    mask = response_mask.bool()
    adv = _per_response(advantages.detach(), mask, "advantage")
    _check_zero_sum(adv, G)
    if rollout_is_weights is not None:
        adv = adv * _per_response(rollout_is_weights.detach().to(adv.dtype), mask, "rollout_is_weights")
    import estimators

    eps = eps_from(config)
    out = policy_loss(scheme, log_prob, old_log_prob, mask, adv, G, eps)
    out.metrics = {**estimators.diagnostics(out.seq_log_ratio, eps), **out.metrics}  # once per micro-batch call
    loss = out.loss * (B * dp / gbs) if gbs is not None else out.loss
    return loss, out


_LOSS_FNS: dict[tuple[str, str], Any] = {}


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
                                           rollout_is_weights)
        if style == METRICS_STYLE:
            return loss, metric_names(out.metrics, prefix="actor/")
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
    """:func:`estimators.advantages` of ``kind`` per group, after checking the group layout.

    ``token_level_rewards`` (B, T) are summed per response; ``index`` (B,) holds the prompt
    uid of each row. Returns ``(advantages, returns)``, both (B, T), the advantage repeated
    on every response token (verl's convention for outcome advantages).
    """
    import torch

    import estimators

    if index is None:
        raise ValueError(f"advantage estimator gmc_{kind} needs `index` (the prompt uid of every row)")
    G = check_contiguous_groups(list(index), where=f"advantage estimator gmc_{kind}")
    scores = token_level_rewards.detach().sum(-1).to(torch.float64)
    with torch.no_grad():
        adv = estimators.advantages(scores.reshape(-1, G), kind, delta=epsilon).reshape(-1)
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


REGISTERED: list[str] = register() if _core_algos() is not None else []
"""Loss names registered at import ([] when verl is not installed)."""
