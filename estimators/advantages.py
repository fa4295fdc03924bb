"""Group advantages A_i (THEORY §1), shape ``(prompts_per_step, G)``, numpy or torch."""
from __future__ import annotations

import math
from numbers import Real

from ._backend import is_torch
from ._validate import check_groups

ADVANTAGE_KINDS = ("loo", "grpo", "drgrpo")


def advantages(rewards, kind: str = "loo", delta: float = 1e-6):
    """Advantages of each group's rewards.

    * ``loo``: leave-one-out, A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r) (the
      toolkit's canonical choice: Lemma 1 makes IS exactly unbiased). Needs G >= 2.
    * ``grpo``: (r_i - mean r) / (std r + delta), std with Bessel's correction (as TRL and
      verl compute it). Biased even without delay (THEORY §1). A group of equal rewards has
      advantages exactly 0 for every ``delta >= 0`` (0 included); ``delta`` must be a finite real >= 0.
    * ``drgrpo``: r_i - mean r (Dr. GRPO: no std normalisation).

    >>> import numpy as np
    >>> advantages(np.array([[1.0, 0.0, 0.0]]), "loo").tolist()
    [[1.0, -0.5, -0.5]]
    """
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"unknown advantage kind {kind!r}; valid kinds: {', '.join(ADVANTAGE_KINDS)}")
    if isinstance(delta, bool) or not isinstance(delta, Real) or not math.isfinite(delta) or delta < 0:
        raise ValueError(f"delta must be a finite real number >= 0, got {delta!r}")
    r = check_groups(rewards, "rewards")
    G = r.shape[-1]
    mean = r.mean(-1, keepdims=True) if not is_torch(r) else r.mean(-1, keepdim=True)
    centred = r - mean
    if kind == "drgrpo":
        return centred
    if G < 2:
        raise ValueError(f"advantage kind {kind!r} needs groups of G >= 2, got G = {G}")
    if kind == "loo":
        return centred * (G / (G - 1))
    std = r.std(-1, ddof=1, keepdims=True) if not is_torch(r) else r.std(-1, correction=1, keepdim=True)
    scale = std + delta
    if is_torch(r):
        import torch

        return torch.where(scale > 0, centred / torch.where(scale > 0, scale, 1.0), torch.zeros_like(centred))
    import numpy as np

    return np.where(scale > 0, centred / np.where(scale > 0, scale, 1.0), 0.0)
