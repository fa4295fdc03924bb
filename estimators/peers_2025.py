"""Trajectory-level stale-rollout corrections that verl, TRL and AReaL ship since late 2025, as
registered schemes (same contract as :mod:`estimators.peers`: pure log-space weight functions on
``(prompts_per_step, G)`` trajectory log-ratios, numpy or torch; knobs in :data:`estimators.params.PARAMS`).

============  ==================================================  ====================================
name          c_i                                                 group mass sup (C_eps iff <= 1+eps)
============  ==================================================  ====================================
seq_geo_mask  1{lo <= exp(l_i / L) <= hi}, times min(w_i, C)      1 (C = 0); min(C, hi^L) (C > 0)
              when C > 0
vespo         phi(w_i) = w_i^k exp(lambda (1 - w_i)), with        max over the two signs of
              (k, lambda) = (k_pos, lambda_pos) if A_i >= 0,      (k/lambda)^k exp(lambda - k)
              else (k_neg, lambda_neg)                            (1.2416 at the defaults: outside
                                                                  C_eps for eps < 0.2416)
============  ==================================================  ====================================

The token-level newcomers (``icepop``, ``sapo``, ``dppo_tv``) are in
:mod:`estimators.losses`.
"""
from __future__ import annotations

import math
import sys

from .params import Param
from .records import Style, interval_check
from .schemes import register_scheme


def _geo_sup(eps, B, lo, hi, length, C):
    return 1.0 if C == 0 else min(C, math.exp(length * math.log(hi)))


@register_scheme("seq_geo_mask", family="peer", in_class=True, sup_mass=_geo_sup,
                 label="seq. geo-mean mask", style=Style("#BBBB00", "s", 18), knob_check=interval_check(),
                 params=(Param("lo", 0.999, "rho_lo", "seq_geo_mask: keep a sequence when its geometric-mean ratio "
                               "exp(l / L) is >= rho_lo"),
                         Param("hi", 1.001, "rho_hi", "seq_geo_mask: ... and <= rho_hi"),
                         Param("length", 1.0, "L", "seq_geo_mask: tokens per completion the geometric mean averages "
                               "over (exact when every completion has L tokens)", batch_length=True),
                         Param("C", 0.0, "C_geo", "seq_geo_mask: 0 = kept sequences get weight 1; C > 0 = min(w, C) "
                               "(verl's sequence-TIS variant)", lo_open=False)))
def seq_geo_mask_log_weights(log_ratio, eps, advantages, ops, lo, hi, length, C):
    """Geometric-mean sequence rejection (verl's Geo-RS, ``rollout_rs="seq_mean_k1"``; AReaL's
    ``rejection_sampling`` with ``level="sequence"``, ``metric="ratio"``, ``agg="mean"``):
    a trajectory is kept iff its geometric-mean token ratio ``exp(l_i / L)`` lies in
    ``[lo, hi]``; a kept trajectory gets ``c = 1`` (verl ``RolloutCorrectionConfig.bypass_pg_geo_rs``:
    REINFORCE, no IS weight) or, with ``C > 0``, the truncated sequence ratio ``min(w, C)``
    (``bypass_pg_geo_rs_seq_tis``, is_threshold 2.0); a rejected one gets ``c = 0``.

    Followed: verl-project/verl ``verl/trainer/ppo/rollout_corr_helper.py``
    (``compute_rollout_rejection_mask``, option ``seq_mean_k1``) and
    ``verl/trainer/config/algorithm.py`` (the Geo-RS presets, rs_threshold ``"0.999_1.001"``) at
    commit 1dda039b9c6311889a9c9a26040677e1254814f9; inclusionAI/AReaL
    ``areal/utils/functional/functional.py`` (``apply_rejection_sampling``) at
    4aef98d8d818af55b43621aaadba047ae10f4e77.

    Differences, said plainly:

    * The length. A trajectory scheme sees only ``l_i = sum_t log r_t``, not the completion's
      length, so the geometric mean is ``exp(l_i / L)`` with the knob ``L`` (default 1). It is
      verl's rule exactly when every completion has ``L`` tokens (E1: 1; E2: H; the study's long
      horizon: 18); on completions of varying length it is not.
    * The direction. verl's code compares ``mean_t (-log r_t)`` with ``[log lo, log hi]``, i.e.
      keeps ``exp(mean log r)`` in ``[1/hi, 1/lo]``; this scheme keeps it in ``[lo, hi]`` (the
      rule verl's documentation states). At the default ``[0.999, 1.001]`` the two intervals
      differ by about 1e-6.
    * verl's token-level TIS on the kept sequences (``bypass_pg_geo_rs_token_tis``) is a per-token
      weight, not a trajectory weight: it has no form here; ``C`` gives verl's sequence-level
      variant instead.

    Membership: ``c in {0, 1}`` when ``C = 0`` (mass <= 1, always in C_eps); with ``C > 0`` a kept
    ratio is at most ``hi^L``, so the supremum is ``min(C, hi^L)``."""
    log_lo = math.log(lo) * length
    log_hi = math.log(hi) * length
    keep = (log_ratio >= log_lo) & (log_ratio <= log_hi)
    kept = ops.full_like(log_ratio, 0.0) if C == 0 else ops.clamp_max(log_ratio, math.log(C))
    return ops.where(keep, kept, ops.full_like(log_ratio, -math.inf))


def vespo_phi_max(k: float, lam: float) -> float:
    """``max_w phi(w)`` of ``phi(w) = w^k exp(lam (1 - w))``: at ``w = k / lam``,
    ``(k / lam)^k exp(lam - k)`` (``exp(lam)`` as ``w -> 0`` when ``k = 0``)."""
    log_max = k * math.log(k / lam) + lam - k if k > 0 else lam
    return math.exp(log_max) if log_max < math.log(sys.float_info.max) else math.inf


def _vespo_sup(eps, B, k_pos, lambda_pos, k_neg, lambda_neg):
    return max(vespo_phi_max(k_pos, lambda_pos), vespo_phi_max(k_neg, lambda_neg))


@register_scheme("vespo", family="peer", in_class=False, needs_advantages=True, sup_mass=_vespo_sup,
                 label="VESPO", style=Style("#EE3377", "D", 19),
                 params=(Param("k_pos", 2.0, "k_pos", "vespo: power k of phi(w) = w^k exp(lambda (1 - w)) when A >= "
                               "0", lo_open=False, hi=1000000.0),
                         Param("lambda_pos", 3.0, "lambda_pos", "vespo: decay lambda of phi when A >= 0"),
                         Param("k_neg", 3.0, "k_neg", "vespo: power k of phi when A < 0", lo_open=False, hi=1000000.0),
                         Param("lambda_neg", 2.0, "lambda_neg", "vespo: decay lambda of phi when A < 0")))
def vespo_log_weights(log_ratio, eps, advantages, ops, k_pos, lambda_pos, k_neg, lambda_neg):
    """VESPO (arXiv 2602.10693), the detached gamma weight of the whole sequence ratio:
    ``c_i = phi(w_i) = w_i^k exp(lambda (1 - w_i))`` (``phi(1) = 1``), with ``(k, lambda) =
    (k_pos, lambda_pos)`` when ``A_i >= 0`` and ``(k_neg, lambda_neg)`` when ``A_i < 0``;
    ``log c = lambda + k l - lambda e^l``. The surrogate is ``detached``: gradient
    ``phi(w) A grad log pi(o)``.

    Followed: huggingface/trl ``trl/trainer/grpo_trainer.py`` (``get_gamma_weights`` and the
    ``vespo`` branch of ``_compute_loss``) and ``trl/trainer/grpo_config.py`` (defaults k_pos 2,
    lambda_pos 3, k_neg 3, lambda_neg 2) at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8.
    The VESPO paper's own code was not available to read. Differences: TRL clamps ``log w`` to
    ``[log 1e-8, 20]`` (here exact: ``c -> 0`` at both ends) and normalises the loss by the
    batch's token count, so its gradient is this one times ``G / (tokens per group)``.

    Membership: ``phi`` peaks at ``w = k / lambda``; with every trajectory of a group on the
    sign of the larger peak the group mass is that peak, so the supremum is
    ``max((k_pos/lambda_pos)^k_pos e^(lambda_pos - k_pos), (k_neg/lambda_neg)^k_neg
    e^(lambda_neg - k_neg))`` = 1.2416 at the defaults (the negative side, w = 1.5)."""
    pos = advantages >= 0
    k = ops.where(pos, ops.full_like(log_ratio, k_pos), ops.full_like(log_ratio, k_neg))
    lam = ops.where(pos, ops.full_like(log_ratio, lambda_pos), ops.full_like(log_ratio, lambda_neg))
    # lambda e^l: as lambda * exp(l) (exact at l = 0: phi(1) = 1) while exp(l) is finite, else as
    # exp(l + log lambda); once that overflows too it dwarfs k l and phi is exactly 0
    zero = ops.full_like(log_ratio, 0.0)
    cap = ops.log_max(log_ratio) - 10.0
    t = log_ratio + ops.log(lam)
    big = t > cap
    small = log_ratio <= cap
    decay = ops.where(small, lam * ops.exp(ops.where(small, log_ratio, zero)), ops.exp(ops.where(big, zero, t)))
    log_phi = lam + k * ops.where(big, zero, log_ratio) - decay
    return ops.where(big, ops.full_like(log_ratio, -math.inf), log_phi)
