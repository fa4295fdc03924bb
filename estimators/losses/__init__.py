"""Torch surrogate losses over per-token log-probs.

Every trajectory-level scheme of :mod:`estimators.schemes` gets one surrogate whose
autograd gradient is exactly (minus) THEORY §2's estimator, averaged over groups:

    grad(-loss) = (1/prompts_per_step) sum_g (1/G) sum_i c_gi A_gi grad log pi_theta(o_gi | q_g)

with c = :func:`estimators.weights` evaluated on the detached trajectory log-ratios.
Stop-gradients sit where THEORY §2 puts them:

The surrogate is a property of the registered scheme (``Scheme.surrogate``,
:data:`estimators.schemes.SURROGATES`):

* ``clamp`` (``tic_mask``): the clamped surrogate ``min(w, 1+eps) A``: clamped trajectories
  get zero gradient (computed as ``exp(min(log w, log(1+eps)))``, finite for any log-ratio).
* ``detached`` (every other scheme): ``sg(c) * exp(l - sg(l)) * A`` with ``l`` the trajectory
  log-ratio: its value is ``c A`` and its gradient ``c A grad l``. For GMC this equals
  ``sg(lambda) w(theta) A`` in value and gradient, but never overflows.

Token-level losses users compare against (not members of the class), registered in
:data:`TOKEN_LOSSES` with their knobs in :data:`estimators.params.PARAMS`:

* ``token_clip``: GRPO/PPO per-token clip, ``min(r_t A, clip(r_t, 1-eps_low, 1+eps_high) A)``,
  aggregated per sequence (``1/|o|``) then averaged (``seq-mean-token-mean``) or over all
  tokens (``token-mean``).
* ``gspo``: sequence geometric-mean ratio ``s = exp(mean_t log r_t)``, PPO-clipped at its own
  range (``eps_low``, ``eps_high``; the paper's 3e-4 / 4e-4).
* ``cispo``, ``m2po``, ``opsm``: see their functions (:mod:`estimators.losses.reference`);
  ``icepop``, ``sapo``, ``dppo_tv``: :mod:`estimators.losses.corrections_2025`; the 2026
  corrections: :mod:`estimators.losses.corrections_2026`.

Padding and extremes, for every loss and dtype: log-ratios are formed by
:func:`masked_token_log_ratio`, which *selects* 0 outside the mask, so ``-inf`` or NaN padding
never reaches a value or a gradient; float16 / bfloat16 log-probs are widened to float32 for the
loss; PPO-clipped terms are selected (:func:`ppo_clip_objective`), never ``0 * inf``. Bounded
losses (:func:`is_bounded`) give a finite value and gradient for every finite input. The
unbounded ones: ``token_clip``, ``gspo``, ``opsm`` give ``+inf`` where A < 0 and a ratio
overflows (never NaN); ``is`` and ``tic_ppo`` refuse, with a ValueError naming the trajectory,
a surrogate or gradient that overflows the log-probs' dtype.

No loss computes the ratio diagnostics (:func:`estimators.diagnostics`): a caller computes
them once per update from :attr:`LossOutput.seq_log_ratio`. ``metrics`` holds only what the
loss alone knows: ``token_clip_frac`` (token_clip, cispo: tokens whose ratio was clipped;
m2po: tokens masked), ``seq_clip_frac`` (gspo: sequences clipped; opsm: sequences dropped),
``m2po_m2`` (m2po: the batch M2 before masking).

Rows of the batch are groups laid out contiguously: rows ``g*G .. g*G+G-1`` are the G
completions of prompt g.

The package's modules: :mod:`~estimators.losses.registry` (:class:`LossOutput`, the token-loss
registry), :mod:`~estimators.losses.batch` (checks, masked log-ratios, PPO's clip, aggregations),
:mod:`~estimators.losses.trajectory` (the schemes' surrogate), the token losses
(:mod:`~estimators.losses.reference`, :mod:`~estimators.losses.corrections_2025`,
:mod:`~estimators.losses.corrections_2026`, imported here in that order, which is the order of
:data:`TOKEN_LOSSES`) and :mod:`~estimators.losses.dispatch` (:func:`policy_loss`).
"""
# isort: off
# The token losses register in the order their modules are imported: that order is TOKEN_LOSSES's.
from .batch import masked_token_log_ratio, ppo_clip_objective, trajectory_log_ratio
from .registry import TOKEN_LOSSES, LossOutput, TokenLoss, is_batch_coupled, is_bounded, loss_names, register_token_loss
from .trajectory import trajectory_loss
from .reference import cispo_loss, gspo_loss, m2po_keep_mask, m2po_loss, opsm_loss, token_clip_loss
from .corrections_2025 import LOGPROB_LOSSES, dppo_tv_loss, icepop_loss, sapo_loss
from .corrections_2026 import (
    CORRECTIONS_2026,
    P3O_ESS_GUARD,
    P3O_KL_EXP_CLAMP,
    SEQUENCE_SUM_LOSSES,
    TRM_SAFETY_BOUND,
    batch_token_ess,
    ctpo_loss,
    dispo_loss,
    minpro_loss,
    oapl_loss,
    oapl_optimal_advantages,
    p3o_loss,
    prefix_log_ratio,
    trm_k2_loss,
    trm_k3_loss,
    trm_keep_rows,
    trm_token_divergence,
)
from .dispatch import check_options, policy_loss
# isort: on

TOKEN_LEVEL = tuple(TOKEN_LOSSES)
"""Names of the token-level losses (not members of the trajectory family)."""

__all__ = [
    "CORRECTIONS_2026", "LOGPROB_LOSSES", "P3O_ESS_GUARD", "P3O_KL_EXP_CLAMP", "SEQUENCE_SUM_LOSSES", "TOKEN_LEVEL",
    "TOKEN_LOSSES", "TRM_SAFETY_BOUND", "LossOutput", "TokenLoss", "batch_token_ess", "check_options", "cispo_loss",
    "ctpo_loss", "dispo_loss", "dppo_tv_loss", "gspo_loss", "icepop_loss", "is_batch_coupled", "is_bounded",
    "loss_names", "m2po_keep_mask", "m2po_loss", "masked_token_log_ratio", "minpro_loss", "oapl_loss",
    "oapl_optimal_advantages", "opsm_loss", "p3o_loss", "policy_loss", "ppo_clip_objective", "prefix_log_ratio",
    "register_token_loss", "sapo_loss", "token_clip_loss", "trajectory_log_ratio", "trajectory_loss",
    "trm_k2_loss", "trm_k3_loss", "trm_keep_rows", "trm_token_divergence",
]
