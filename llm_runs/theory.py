"""Theory in the loop: THEORY §3's quantities estimated from every update's own ratios.

Per update (columns of :data:`llm_runs.metrics.COLUMNS`):

* ``stale/chi2``: the trajectory chi^2 estimate ``mean w^2 - 1`` over the batch's B*G
  completions (w drawn from the behaviour policy, so E_b w^2 - 1 = chi^2(pi_theta || pi_b) =
  sigma^2 of THEORY §1); ``stale/mu4`` the fourth central moment ``mean (w - 1)^4``;
  ``stale/chi2_token`` the same chi^2 per token (``mean r_t^2 - 1`` over completion tokens,
  r_t the token ratio). The ESS of the group ratios is ``stale/ess``
  (:func:`estimators.diagnostics`).
* ``stale/mass_bias``: the realised mass bias of the run's weights c, the mean over groups of
  ``beta_1(c; w) = (1/G) sum_i |w_i - c_i|`` (:func:`bounds.bias.beta_1`; = mean w - mean c for
  every scheme with c <= w: GMC, TIC-mask, TIC-trunc), an unbiased estimate of THEORY §3's m.
  Empty for losses that have no trajectory weight (token-level baselines).
* ``stale/mass_bias_bound``: THEORY §3's bound on that m evaluated at the estimated chi^2 (and
  mu_4): the one table :data:`bounds.MASS_BOUNDS` in its :data:`BOUND_FORM` form (Theorem 2's
  bounds; :data:`SCHEME_BOUNDS` lists the twin per scheme). Empty for schemes without one (IS:
  m = 0 exactly). The plug-in chi^2 of a batch can be negative (a heavy right tail under-sampled);
  the bound is then evaluated at 0, so such a batch with a positive realised mass bias counts as
  one where the plug-in bound fails.
* ``train/grad_cos``: cosine between this update's gradient estimate and the previous one's;
  ``train/update_cos``: cosine between consecutive parameter changes theta_{t+1} - theta_t
  (the optimiser's actual steps). Both are empty on the first update and around a skipped
  one. The gradient norm is ``train/grad_norm``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

import estimators
from bounds import MASS_BOUNDS, mass_bound

BOUND_FORM = "theorem2"
"""The column of :data:`bounds.MASS_BOUNDS` that ``stale/mass_bias_bound`` evaluates.

Theorem 2's form (the quadratic ``sigma^2/(4 G eps)`` and ``sigma^2/(4 eps)`` for GMC and
TIC-trunc; Markov for TIC-mask; ``sigma`` for c = 1), not the tighter Scarf form, for two
reasons. It is the bound the convergence theorem is built from (``bounds.delay.DELAY_TERMS``
composes exactly these), so a batch above it is a batch where Theorem 2's accounting of the
bias fails; and it is what every committed run has logged since the column exists, so runs
replay byte for byte. The tight form is evaluated from the same raw columns (``stale/chi2``,
``stale/mu4``, ``stale/mass_bias``) afterwards, by ``grids.bound_table.bound_table``.
"""

SCHEME_BOUNDS = {s: forms[BOUND_FORM] for s, forms in MASS_BOUNDS.items()}
"""Scheme -> the registered bound this column evaluates (a view of :data:`bounds.MASS_BOUNDS`)."""


def mass_bias_bound(estimator: str, chi2: float, mu4: float, G: int, eps: float) -> float:
    """THEORY §3's bound (:data:`BOUND_FORM`) on the mass bias of ``estimator`` at (chi^2, mu_4);
    NaN if it has none (IS, whose m is 0 exactly, logs no bound)."""
    if estimator not in MASS_BOUNDS or not math.isfinite(chi2):
        return math.nan
    chi2 = max(chi2, 0.0)  # a negative estimate (few samples, heavy tail) is clamped: the bound is then 0
    from bounds.numeric import twin

    if "mu4" in twin(SCHEME_BOUNDS[estimator]).params and not (math.isfinite(mu4) and mu4 >= 0):
        return math.nan
    return float(mass_bound(estimator, chi2, mu4, G, eps, form=BOUND_FORM))


def ratio_metrics(seq_log_ratio: torch.Tensor, weights: torch.Tensor | None, token_log_ratio: torch.Tensor,
                  token_mask: torch.Tensor, estimator: str, eps: float) -> dict:
    """The ``stale/`` theory columns of one batch.

    Args:
        seq_log_ratio: (prompts_per_step, G) trajectory log-ratios log w (detached).
        weights: (prompts_per_step, G) the estimator's weights c, or None (no trajectory weight).
        token_log_ratio: (N, T) per-token log pi_theta - log mu; token_mask: (N, T) 1 on completion tokens.
        estimator: the run's estimator name; eps: its threshold.
    """
    from bounds.bias import beta_1

    lr = seq_log_ratio.detach().double().cpu().numpy()
    if lr.ndim != 2:
        raise ValueError(f"seq_log_ratio must be (prompts_per_step, G), got shape {lr.shape}")
    G = lr.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(lr)
        chi2 = float(np.mean(w**2) - 1.0)  # inf (never NaN) when a ratio overflows float64
        mu4 = float(np.mean((w - 1.0) ** 4))
        m = token_mask.detach().double().cpu()
        tok = token_log_ratio.detach().double().cpu()
        chi2_token = float(((torch.exp(2 * tok) - 1.0) * m).sum() / m.sum())
        row = {"stale/chi2": chi2, "stale/mu4": mu4, "stale/chi2_token": chi2_token}
        if weights is not None:
            c = weights.detach().double().cpu().numpy().reshape(lr.shape)
            row["stale/mass_bias"] = float(np.mean(beta_1(c, w)))
            row["stale/mass_bias_bound"] = mass_bias_bound(estimator, chi2, mu4, G, eps)
    return row


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def _cos(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return math.nan
    na, nb = float(a.norm()), float(b.norm())
    if not (na > 0 and nb > 0 and math.isfinite(na) and math.isfinite(nb)):
        return math.nan
    return float(torch.dot(a, b)) / (na * nb)


class DirectionTracker:
    """Cosines between consecutive gradient estimates and consecutive parameter steps.

    ``before(model)`` just before an update, ``after(model, skipped)`` just after it (the
    gradient is still in ``.grad``); the previous vectors travel in ``state_dict`` so that a
    resumed run logs the same cosines as an uninterrupted one.
    """

    def __init__(self):
        self.prev_grad: torch.Tensor | None = None
        self.prev_step: torch.Tensor | None = None
        self._theta: torch.Tensor | None = None

    def before(self, model) -> None:
        self._theta = _flat(model.parameters())

    def after(self, model, skipped: bool, mechanism: bool = False) -> dict:
        """The cosines with the previous update; with ``mechanism`` also ``mech/step_norm`` and
        ``mech/step_cos_grad`` (:data:`schema.metrics.MECHANISM`)."""
        params = list(model.parameters())
        if skipped or self._theta is None or any(p.grad is None for p in params):
            self.prev_grad = self.prev_step = None
            return {}
        grad = _flat(p.grad for p in params)
        step = _flat(params) - self._theta
        out = {"train/grad_cos": _cos(grad, self.prev_grad), "train/update_cos": _cos(step, self.prev_step)}
        if mechanism:
            out.update({"mech/step_norm": float(step.double().norm()), "mech/step_cos_grad": _cos(step, -grad)})
        self.prev_grad, self.prev_step, self._theta = grad, step, None
        return out

    def state_dict(self) -> dict:
        return {"prev_grad": self.prev_grad, "prev_step": self.prev_step}

    def load_state_dict(self, state: dict) -> None:
        self.prev_grad, self.prev_step = state["prev_grad"], state["prev_step"]


VERL_SAFETY_BOUND = 20.0
"""verl clamps a sequence's summed log-ratio to +-20 before exponentiating it (``SAFETY_BOUND`` in
``verl/trainer/ppo/rollout_corr_helper.py``, verl-project/verl at 20c30bf8)."""


def verl_chi2_seq(seq_log_ratio: torch.Tensor) -> float:
    """verl's ``rollout_corr/chi2_seq`` on the same ratios: ``mean(exp(2 clamp(log w, -20, 20))) - 1``
    over the sequences (``compute_offpolicy_metrics`` in ``verl/trainer/ppo/rollout_corr_helper.py``).
    It equals ``stale/chi2`` unless some |log w| > 20, where verl's clamp caps the tail."""
    lr = seq_log_ratio.detach().double().reshape(-1).clamp(-VERL_SAFETY_BOUND, VERL_SAFETY_BOUND)
    return float(torch.exp(2.0 * lr).mean() - 1.0)


def batch_metrics(out, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, estimator: str,
                  eps: float, diagnostics: dict | None = None) -> dict:
    """The per-batch ratio diagnostics a training stack logs with the trainer's names, from one
    :class:`estimators.losses.LossOutput` and the log-probs it was computed from: the raw-ratio
    diagnostics (:func:`estimators.diagnostics`: ``stale/ess``, ``stale/mass_cap_frac``, ...), the
    theory columns (:func:`ratio_metrics`: ``stale/chi2``, ``stale/chi2_token``, ``stale/mass_bias``,
    ``stale/mass_bias_bound``), the weights' range (``train/weight_mean|min|max``, trajectory
    schemes), verl's own sequence chi^2 beside ours (``stale/chi2_seq_verl``,
    :func:`verl_chi2_seq`) and the two mechanism diagnostics that need only the ratios
    (:func:`ratio_mechanism`: ``mech/lambda_min``, ``mech/kl``). The verl plugin and the TRL
    adapter call it on every loss call; a caller that already has
    ``estimators.diagnostics(out.seq_log_ratio, eps)`` passes it as ``diagnostics``."""
    from estimators.losses import masked_token_log_ratio
    from schema.metrics import stale_metrics

    row = stale_metrics(diagnostics if diagnostics is not None else estimators.diagnostics(out.seq_log_ratio, eps))
    tok = masked_token_log_ratio(logp.detach(), old_logp.detach(), mask)
    row.update(ratio_metrics(out.seq_log_ratio, out.weights, tok, mask, estimator, eps))
    row.update(ratio_mechanism(out.seq_log_ratio.detach(), tok, mask, eps))
    if out.weights is not None:
        c = out.weights
        row.update({"train/weight_mean": float(c.mean()), "train/weight_min": float(c.min()),
                    "train/weight_max": float(c.max())})
    row["stale/chi2_seq_verl"] = verl_chi2_seq(out.seq_log_ratio)
    return row


def ratio_mechanism(seq_log_ratio: torch.Tensor, token_log_ratio: torch.Tensor, mask: torch.Tensor,
                    eps: float) -> dict:
    """``mech/lambda_min`` (GMC's smallest group scale on the raw ratios) and ``mech/kl`` (the k3
    estimate of KL(pi_b || pi_theta) per completion token) from an update's detached log-ratios."""
    lam = estimators.gmc_lambda(seq_log_ratio.double(), eps)
    return {"mech/lambda_min": float(lam.min()), "mech/kl": kl_per_token(token_log_ratio, mask)}


def kl_per_token(token_log_ratio: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(pi_b || pi_theta) per completion token, the k3 estimate mean((r_t - 1) - log r_t) over the
    masked tokens (NaN without any)."""
    sel = mask.bool()
    x = token_log_ratio.double()
    k3 = torch.where(sel, torch.expm1(x) - x, 0.0)
    n = int(sel.sum())
    return float(k3.sum()) / n if n else math.nan


def drift_metrics(seq_log_ratio: torch.Tensor, token_log_ratio: torch.Tensor, mask: torch.Tensor) -> dict:
    """The ``drift/`` columns of one update from its detached log-ratios: KL per token, VCPO's sequence
    ESS ratio over the whole batch, and the median |log w| of the trajectories."""
    from .stepsize import ess_ratio

    lr = seq_log_ratio.detach().double().reshape(-1)
    return {"drift/kl": kl_per_token(token_log_ratio, mask), "drift/ess_ratio": ess_ratio(torch.exp(lr)),
            "drift/abs_log_w_median": float(lr.abs().median()) if lr.numel() else math.nan}
