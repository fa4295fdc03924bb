"""Mechanism diagnostics of one update (the ``mech/`` columns, :data:`schema.metrics.MECHANISM`).

They answer *how* an estimator's update differs from plain IS's on the same batch, without a
second rollout or a second forward pass over the batch:

* ``mech/cos_is``: the batch's log-probs are differentiated twice, once through the run's loss
  (the update) and once through the IS surrogate ``-(1/N) sum_i sg(w_i / w_max) A_i log pi(o_i)``
  (``retain_graph`` keeps the forward). Dividing every weight by the batch's largest ``w_max``
  changes the IS gradient's length, not its direction, and keeps it finite for any ratio.
* ``mech/heavy_share``: the trajectory with the largest total ``|d loss / d log pi(o_t)|`` (for a
  trajectory scheme ``|c_i A_i|`` times its length) is run forward again on its own group and its
  gradient ``sum_t (d loss / d log pi(o_t)) grad log pi(o_t)`` compared in norm with the batch's.
* ``mech/lambda_min``, ``mech/kl``: from the ratios the update already has
  (:func:`llm_runs.theory.ratio_mechanism`, which the verl plugin and the TRL adapter log too).
* ``mech/step_norm``, ``mech/step_cos_grad``: from the parameters before and after the step
  (:class:`llm_runs.theory.DirectionTracker`).

Nothing here changes the update: the run's gradient, the optimiser step and every other column
are the same bits with and without the diagnostics (a test checks it).
"""
from __future__ import annotations

import math

import torch

from .rollout import completion_logprobs
from .theory import _cos


def is_direction_loss(logp, seq_log_ratio, mask, adv_rows, log_scale: float) -> torch.Tensor:
    """``-(1/N) sum_i sg(exp(l_i - log_scale)) A_i sum_t log pi(o_it)``: a surrogate whose gradient
    is the IS gradient estimate divided by ``exp(log_scale)`` (``l_i = seq_log_ratio[i]``, detached)."""
    sel = mask.bool()
    coef = (torch.exp(seq_log_ratio - log_scale) * adv_rows.double()).to(logp.dtype)
    return -(coef * torch.where(sel, logp, 0.0).sum(-1)).sum() / logp.shape[0]


def _flat(tensors, params) -> torch.Tensor:
    return torch.cat([(t if t is not None else torch.zeros_like(p)).detach().reshape(-1).double()
                      for t, p in zip(tensors, params)])


class MechanismProbe:
    """Collects what the ``mech/`` columns need over an update's micro-batches.

    Per chunk, after the run's ``loss.backward(retain_graph=True)``: :meth:`chunk` (the IS
    direction's gradient of the chunk, its per-token loss coefficients); after the last chunk and
    before the optimiser step: :meth:`finish` (cosines and norms against the accumulated ``.grad``).
    """

    def __init__(self, model):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.is_parts: list[tuple[float, torch.Tensor]] = []  # (log scale, flat IS-direction gradient) per chunk
        self.heavy: tuple[float, object, int, torch.Tensor] | None = None  # (size, group batch, row, coef row)

    def chunk(self, loss, logp, part, adv_rows, share: float) -> None:
        sel = part.completion_mask.bool()
        coef = torch.autograd.grad(loss * share, logp, retain_graph=True)[0].detach()
        size = torch.where(sel, coef.abs(), 0.0).sum(-1)
        k = int(size.argmax())
        if self.heavy is None or float(size[k]) > self.heavy[0]:
            G = part.group_size
            g = k // G
            self.heavy = (float(size[k]), part.groups(g, g + 1), k - g * G, coef[k].clone())
        lr = torch.where(sel, logp.detach().double() - part.behaviour_logp.double(), 0.0).sum(-1)
        log_scale = float(lr.max())
        surrogate = is_direction_loss(logp, lr, part.completion_mask, adv_rows, log_scale) * share
        grads = torch.autograd.grad(surrogate, self.params, allow_unused=True)
        self.is_parts.append((log_scale, _flat(grads, self.params)))

    def finish(self, temperature: float) -> dict:
        """``mech/cos_is`` and ``mech/heavy_share`` against the gradient now in ``.grad``."""
        grad = _flat([p.grad for p in self.params], self.params)
        top = max(s for s, _ in self.is_parts)
        g_is = sum(math.exp(s - top) * v for s, v in self.is_parts)
        out = {"mech/cos_is": _cos(grad, g_is), "mech/heavy_share": math.nan}
        if self.heavy is not None:
            _, group, row, coef = self.heavy
            logp = completion_logprobs(self.model, group.prompt_ids, group.prompt_mask, group.completion_ids,
                                       temperature, group.group_size)
            sel = group.completion_mask[row].bool()
            gk = torch.autograd.grad(torch.where(sel, coef * logp[row], 0.0).sum(), self.params, allow_unused=True)
            norm = float(grad.norm())
            if norm > 0 and math.isfinite(norm):
                out["mech/heavy_share"] = float(_flat(gk, self.params).norm()) / norm
        return out
