"""Optimisers of the asynchronous simulators, on numpy arrays batched over runs (gradient *ascent*).

* ``sgd``: ``theta + eta g`` (THEORY §4's learner: Lemma 3 and Theorem 2 are about it);
* ``adam``: Adam on ``-g`` (the update practice uses);
* ``adam_clip``: Adam after clipping ``g`` to norm at most ``clip_norm``;
* ``adamw_clip``: AdamW (decoupled weight decay ``weight_decay``, 0.01) after the same clipping.

Adam, AdamW and the clipping follow PyTorch 2.13.0 (pytorch/pytorch, tag v2.13.0):
``torch/optim/adam.py`` (``_single_tensor_adam``: bias corrections ``1 - beta^t``, denominator
``sqrt(v) / sqrt(1 - beta2^t) + eps``; with ``decoupled_weight_decay`` the parameter is first
multiplied by ``1 - lr * weight_decay``) and ``torch/nn/utils/clip_grad.py``
(``clip_grad_norm_``: ``g *= min(1, max_norm / (||g|| + 1e-6))``, the norm over all parameters of
one run). Each run (a row) is one model: the norm is taken per row.

The clip norm is a knob because the natural scale of ``||g_hat||`` in the simulators differs from
an LLM's; :func:`clip_at_quantile` states the other way to set it, a quantile of the gradient
norms of the unclipped (``adam``) run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPTIMIZERS = ("sgd", "adam", "adam_clip", "adamw_clip")
CLIP_GUARD = 1e-6  # torch.nn.utils.clip_grad_norm_'s guard in max_norm / (total_norm + 1e-6)


@dataclass(frozen=True)
class OptimizerConfig:
    """One optimiser; ``lr`` is its step size (SGD's eta)."""

    kind: str = "sgd"
    lr: float = 0.5
    clip_norm: float = 1.0  # *_clip: max ||g|| per run
    weight_decay: float = 0.01  # adamw_clip
    beta1: float = 0.9
    beta2: float = 0.999
    adam_eps: float = 1e-8

    def __post_init__(self):
        if self.kind not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.kind!r}")
        for name in ("lr", "clip_norm", "adam_eps"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if not (np.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not (0 <= v < 1):
                raise ValueError(f"{name} must be in [0, 1), got {v!r}")

    @property
    def clips(self) -> bool:
        return self.kind.endswith("_clip")


def clip_rows(g: np.ndarray, max_norm: float) -> np.ndarray:
    """``g`` (runs, ...) with each run's norm clipped as ``clip_grad_norm_`` does."""
    flat = g.reshape(g.shape[0], -1)
    norm = np.sqrt((flat**2).sum(-1))
    coef = np.minimum(max_norm / (norm + CLIP_GUARD), 1.0)
    return g * coef.reshape((-1,) + (1,) * (g.ndim - 1))


def clip_at_quantile(grad_norms, q: float) -> float:
    """The clip norm at quantile ``q`` of the (finite, positive) gradient-estimate norms of an unclipped run."""
    if not (0 < q <= 1):
        raise ValueError(f"clip quantile must be in (0, 1], got {q!r}")
    x = np.asarray(grad_norms, dtype=np.float64).ravel()
    x = x[np.isfinite(x) & (x > 0)]
    if not len(x):
        raise ValueError("no finite positive gradient norm to take a quantile of")
    return float(np.quantile(x, q))


class Optimizer:
    """State of one optimiser for a batch of runs; :meth:`step` returns the new parameters."""

    def __init__(self, cfg: OptimizerConfig, theta: np.ndarray):
        self.cfg = cfg
        self.t = 0
        if cfg.kind != "sgd":
            self.m = np.zeros_like(theta, dtype=np.float64)
            self.v = np.zeros_like(theta, dtype=np.float64)

    def step(self, theta: np.ndarray, g: np.ndarray) -> np.ndarray:
        """One ascent step along the gradient estimate ``g`` (same shape as ``theta``)."""
        c = self.cfg
        if c.kind == "sgd":
            return theta + c.lr * g
        if c.clips:
            g = clip_rows(g, c.clip_norm)
        self.t += 1
        d = -g  # torch minimises: the gradient of the loss -J
        self.m = c.beta1 * self.m + (1 - c.beta1) * d
        self.v = c.beta2 * self.v + (1 - c.beta2) * d * d
        bc1 = 1 - c.beta1**self.t
        bc2_sqrt = np.sqrt(1 - c.beta2**self.t)
        out = theta * (1 - c.lr * c.weight_decay) if c.kind == "adamw_clip" else theta
        return out - (c.lr / bc1) * self.m / (np.sqrt(self.v) / bc2_sqrt + c.adam_eps)


__all__ = ["OPTIMIZERS", "Optimizer", "OptimizerConfig", "clip_at_quantile", "clip_rows"]
