"""Trajectory-level corrections for stale rollouts from the literature, as registered schemes.

Each is one pure log-space weight function on ``(prompts_per_step, G)`` trajectory log-ratios
``l = log pi_theta(o|q) - log pi_b(o|q)`` (numpy or torch, like :mod:`estimators.schemes`),
registered in the same :data:`estimators.SCHEMES` as GMC and TIC, so the trainer, the
simulators and both adapters get it. Their knobs live in :data:`estimators.params.PARAMS`.

==========  ===========================================================  ===========================
name        c_i                                                          group mass sup (C_eps iff
                                                                         <= 1+eps)
==========  ===========================================================  ===========================
topr        1 if A_i >= 0, else min(w_i, 1)                              1: always a member
seq_tis     min(w_i, C)                                                  C
seq_tis_bn  min(w_i, C) / mean over the whole batch of min(w, C)         B (groups in the batch);
                                                                         1 when B = 1
seq_mis     w_i 1{lo <= w_i <= hi}                                       hi
==========  ===========================================================  ===========================

Batch normalisation (``seq_tis_bn``) fixes the mass of the **batch** at exactly 1:
``(1/(B G)) sum_{g,i} c_gi = 1``. So the update averaged over the batch obeys
``||(1/B) sum_g g_hat_g|| <= max ||X|| = M`` surely (the drift lemma of THEORY §1 holds for
the batch step), but one group's mass ``m_g / ((1/B) sum_h m_h)`` (``m_g`` = the group's mean of
``min(w, C)``) approaches B when the other groups' ratios are small: a single group can be
scaled up to ``B`` times, ``||g_hat_g|| < B M``, and the scheme is outside C_eps for every
``B > 1 + eps``. With ``B = 1`` it is SNIS of the truncated ratios (mass exactly 1).
"""
from __future__ import annotations

import math

from .params import Param
from .records import Style, interval_check
from .schemes import register_scheme


@register_scheme("topr", family="peer", in_class=True, needs_advantages=True, sup_mass=lambda eps, B: 1.0,
                 label="TOPR", style=Style("#44AA99", "h", 9))
def topr_log_weights(log_ratio, eps, advantages, ops):
    """TOPR (Le Roux et al., arXiv 2503.14286, eq. for grad J_TOPR, Sec. 3): trajectories with
    non-negative (baselined) return are unweighted, the others get truncated IS
    ``[pi/mu]_0^1``; the ratio is under stop-gradient. The split is on the sign of the group
    advantage A_i, the quantity that multiplies grad log pi here: TOPR writes it on R(tau)
    with its baseline c already subtracted (its Sec. 4: the baseline decides which samples
    count as negative); on the raw rewards in [0, 1] of this toolkit every trajectory would be
    'positive' and TOPR would reduce to ``stale``."""
    neg = advantages < 0
    return ops.where(neg, ops.clamp_max(log_ratio, 0.0), ops.full_like(log_ratio, 0.0))


@register_scheme("seq_tis", family="peer", in_class=False, sup_mass=lambda eps, B, C: float(C),
                 params=(Param("C", 2.0, "C", "seq_tis: truncation level of the sequence ratio, c = min(w, C) "
                               "(verl's rollout_is_threshold; VCPO's recipe uses 8)"),))
def seq_tis_log_weights(log_ratio, eps, advantages, ops, C):
    """verl rollout correction, sequence-level truncated IS without normalisation
    (``rollout_is="sequence"``, ``rollout_is_threshold=C``; ``compute_rollout_correction_weights``
    in verl/trainer/ppo/rollout_corr_helper.py), the weight VCPO trains with (C = 8,
    mit-han-lab/vcpo ``recipe/fully_async_policy/shell/vcpo/math/vcpo_k=10.sh``):
    ``c_i = min(w_i, C)``. Group mass at most C: a member of C_eps exactly when C <= 1+eps."""
    return ops.clamp_max(log_ratio, math.log(C))


def _tis_bn_sup(eps, B, C):
    return float(B)


@register_scheme("seq_tis_bn", family="peer", in_class=False, batch_coupled=True, sup_mass=_tis_bn_sup,
                 label="seq. TIS + batch norm", style=Style("#117733", "p", 10),
                 params=(Param("C", 2.0, "C", "seq_tis_bn: truncation level of the sequence ratio before the batch "
                               "normalisation"),))
def seq_tis_bn_log_weights(log_ratio, eps, advantages, ops, C):
    """verl rollout correction, sequence-level truncated IS with batch normalisation
    (``rollout_is="sequence"``, ``rollout_is_threshold=C``, ``rollout_is_batch_normalize=True``;
    ``compute_rollout_correction_weights`` in verl/trainer/ppo/rollout_corr_helper.py):
    ``c_i = min(w_i, C) / mean_batch min(w, C)``. The batch is the **whole array passed**
    (every group of every row), not one group. Computed in log space, so no ratio is clamped
    at exp(+-20) as verl does, and the mean is never skipped (verl skips it below 1e-8)."""
    t = ops.clamp_max(log_ratio, math.log(C))
    n = log_ratio.shape[0] * log_ratio.shape[1]
    glse = ops.logsumexp(ops.logsumexp(t).T)  # (1, 1): log of the sum over the batch
    return t - (glse - math.log(n))


@register_scheme("seq_mis", family="peer", in_class=False, sup_mass=lambda eps, B, lo, hi: float(hi),
                 label="seq. MIS", style=Style("#999933", "d", 11), knob_check=interval_check(strict=True),
                 params=(Param("lo", 0.5, "w_lo", "seq_mis: keep a sequence when w_lo <= w <= w_hi", lo_open=False),
                         Param("hi", 2.0, "w_hi", "seq_mis: upper end of the kept ratio interval")))
def seq_mis_log_weights(log_ratio, eps, advantages, ops, lo, hi):
    """Sequence-level masked IS (verl rollout correction ``rollout_is="sequence"`` with
    rejection ``rollout_rs="seq_sum_k1"``, ``rollout_rs_threshold="lo_hi"``; IcePop's mask
    applied to the sequence ratio): ``c_i = w_i 1{lo <= w_i <= hi}``. Group mass at most hi:
    a member of C_eps exactly when hi <= 1+eps."""
    log_lo = math.log(lo) if lo > 0 else -math.inf
    keep = (log_ratio >= log_lo) & (log_ratio <= math.log(hi))
    return ops.where(keep, log_ratio, ops.full_like(log_ratio, -math.inf))
