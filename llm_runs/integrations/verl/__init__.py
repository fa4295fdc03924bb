"""verl integration: GMC and every other trajectory-level scheme of :mod:`estimators` as verl
policy losses, plus group advantage estimators that check the group layout.

Modules: :mod:`.compat` (which verl, which return style), :mod:`.losses` (the policy losses),
:mod:`.advantages`, :mod:`.engine` (the engine-path patch), :mod:`.cpu` (a CPU platform).
Importing them changes nothing in verl; :func:`install` (register + patch) does, and the thin
module :mod:`llm_runs.integrations.verl_plugin` calls it: load that one in every verl process with
``actor_rollout_ref.model.external_lib=llm_runs.integrations.verl_plugin`` (verl imports
``external_lib`` when it builds the model config, in the driver and in each worker). :func:`install` registers:

* policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``) for every scheme
  of :data:`estimators.SCHEMES`: ``gmc``, ``tic_mask``, ``tic_trunc``, ``tic_ppo``, ``snis``,
  ``is``, ``stale``, ``topr``, ``seq_tis_bn``, ``seq_mis``, ``seq_geo_mask``, ``vespo``. Knobs (``C`` of
  ``seq_tis_bn``, ``lo``/``hi`` of ``seq_mis``, ``kappa`` of ``gmc_cap``, ...) are read from
  ``actor.policy_loss.<knob>`` under the names of :data:`estimators.params.PARAMS`
  (:func:`estimator_options_from`; an unknown knob, or another loss's, is refused; :func:`extend_policy_loss_config`
  makes verl's ``PolicyLossConfig`` take them), defaults otherwise; ``seq_geo_mask``'s ``length`` L, when
  not set, is the micro-batch's response length (every response of the same length, else refused
  by name); ``seq_tis_bn``'s batch is the micro-batch the loss sees, not verl's whole batch. The
  surrogate is :func:`estimators.losses.trajectory_loss` itself:
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

Without verl, :func:`register` raises an ``ImportError`` saying how to install verl (and
``verl_plugin`` registers nothing: ``REGISTERED == []``).

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
cap ``1 + eps``); ``loss_agg_mode`` is ``token-mean`` or ``seq-mean-token-sum`` (THEORY's term
``c_i A_i``, one per response) or ``seq-mean-token-mean`` (that term over the response's token count,
VCPO's), the others refused (:data:`AGG_MODES`); a response ``rollout_rs`` rejected weighs 0 and its group's
term is divided by its kept responses or by G (``policy_loss.mask_denominator``). Micro-batch losses are scaled
by ``B * dp_size / global_batch_size`` so that their sum over micro-batches and mean over
data-parallel ranks is the mini-batch mean, as verl's ``agg_loss`` does.

Metrics (verl naming, averaged over micro-batches by verl): the row of
:func:`llm_runs.integrations._common.batch_statistics` under ``actor/``, the trainer's names
(:data:`~llm_runs.integrations._common.VOCABULARY`): ``actor/stale/<key>`` for every key of
:func:`estimators.diagnostics`, computed on the raw ratios, e.g. ``actor/stale/mass_cap_frac``
(capped-group fraction), ``actor/stale/clip_frac``, ``actor/stale/ess``, ``actor/stale/log_ratio_max``;
``actor/train/weight_*`` (the weights after capping), ``actor/drift/*`` (read by :mod:`llm_runs.drift`);
and, once per mini-batch, the step control's ``actor/step/lr_scale``.

Config-time checks: :mod:`.validation` (every setting the plugin cannot honour, refused in verl's
``validate_config``); VCPO's recipe: ``policy_loss.recipe=vcpo_exact`` with OPOB (:mod:`.opob`).

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

import os

from .._common import metric_names
from .advantages import _ESTIMATOR_FNS, ADVANTAGE_ESTIMATORS, grouped_advantages
from .compat import INSTALL_HINT, METRICS_STYLE, TUPLE4_STYLE, core_algos_or_none, return_style
from .cpu import CPU_PLATFORM, cpu_platform, init_cpu_process_group, register_cpu_engines
from .engine import EngineLoss, check_whole_groups_on_rank, patch_engine_path, regroup_by_uid
from .losses import group_ids, group_order, make_policy_loss, rows_by_uid, trajectory_policy_loss
from .settings import (
    BEHAVIOURS,
    MASK_DENOMINATORS,
    PLUGIN_SETTINGS,
    behaviour_from,
    eps_from,
    estimator_options_from,
    extend_policy_loss_config,
    group_size_from,
    mask_denominator_from,
    policy_loss_names,
    scheme_options_from,
)
from .validation import AGG_MODES, check_actor_config, check_rollout_correction, patch_config_validation

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "BEHAVIOURS",
    "CPU_PLATFORM",
    "INSTALL_HINT",
    "MASK_DENOMINATORS",
    "METRICS_STYLE",
    "PLUGIN_SETTINGS",
    "TUPLE4_STYLE",
    "EngineLoss",
    "behaviour_from",
    "check_actor_config",
    "check_rollout_correction",
    "check_whole_groups_on_rank",
    "core_algos_or_none",
    "cpu_platform",
    "eps_from",
    "estimator_options_from",
    "extend_policy_loss_config",
    "group_ids",
    "group_order",
    "group_size_from",
    "grouped_advantages",
    "init_cpu_process_group",
    "install",
    "make_policy_loss",
    "mask_denominator_from",
    "metric_names",
    "patch_config_validation",
    "patch_engine_path",
    "policy_loss_names",
    "register",
    "register_cpu_engines",
    "regroup_by_uid",
    "return_style",
    "rows_by_uid",
    "scheme_options_from",
    "trajectory_policy_loss",
]


def register(core_algos=None) -> list[str]:
    """Register every loss and advantage estimator with verl; returns the loss names.

    Idempotent. ``core_algos`` defaults to ``verl.trainer.ppo.core_algos`` (tests pass a
    stand-in). A loss name verl already uses for a loss of its own is refused.
    """
    core = core_algos if core_algos is not None else core_algos_or_none()
    if core is None:
        raise ImportError(INSTALL_HINT)
    style = return_style(core)
    names = policy_loss_names()
    for name in names:
        existing = core.POLICY_LOSS_REGISTRY.get(name)
        if existing is not None and getattr(existing, "gmc_plugin_estimator", None) != name:
            raise ValueError(f"verl already has a policy loss named {name!r} ({existing!r}); not overriding it")
        core.register_policy_loss(name)(make_policy_loss(name, style))
    register_adv = getattr(core, "register_adv_est", None)
    if register_adv is not None:  # absent in the oldest releases: the loss-side checks remain
        for name, fn in _ESTIMATOR_FNS.items():
            register_adv(name)(fn)
    return names


def install() -> list[str]:
    """Everything the plugin does to verl: :func:`register`, :func:`patch_engine_path`, the config
    checks (:func:`patch_config_validation`), and the CPU platform (its engines too under
    ``VERL_PLATFORM=cpu``). Returns the loss names."""
    names = register()
    extend_policy_loss_config()
    patch_config_validation()
    patch_engine_path()
    try:
        cpu_platform()
    except ImportError:  # verl before 0.9 has no verl.plugin.platform: no CPU platform to add
        return names
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM:
        register_cpu_engines()
    return names
