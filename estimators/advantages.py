"""Group advantages A_i (THEORY §1), shape ``(num_groups, G)``, numpy or torch."""
from __future__ import annotations

from ._backend import is_torch
from ._validate import check_groups

ADVANTAGE_KINDS = ("loo", "grpo", "drgrpo")


def advantages(rewards, kind: str = "loo", delta: float = 1e-6):
    """Advantages of each group's rewards.

    * ``loo``: leave-one-out, A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r) (the
      toolkit's canonical choice: Lemma 1 makes IS exactly unbiased). Needs G >= 2.
    * ``grpo``: (r_i - mean r) / (std r + delta), std with Bessel's correction (as TRL and
      verl compute it). Biased even without delay (THEORY §1).
    * ``drgrpo``: r_i - mean r (Dr. GRPO: no std normalisation).

    >>> import numpy as np
    >>> advantages(np.array([[1.0, 0.0, 0.0]]), "loo").tolist()
    [[1.0, -0.5, -0.5]]
    """
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"unknown advantage kind {kind!r}; valid kinds: {', '.join(ADVANTAGE_KINDS)}")
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
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    std = r.std(-1, ddof=1, keepdims=True) if not is_torch(r) else r.std(-1, correction=1, keepdim=True)
    return centred / (std + delta)
