"""Input checks of the simulators' public entry points.

Bad input raises ``ValueError`` naming the argument and the bad value (STYLE.md);
``eps`` reuses the check of :mod:`estimators` so both parts refuse the same values.
"""
from __future__ import annotations

from numbers import Integral

import numpy as np

from estimators._validate import check_eps  # noqa: F401  (re-exported: one rule for eps)

PROB_ATOL = 1e-9
"""Tolerance on ``sum(p) == 1`` for probability vectors given by the caller."""


def check_G(G) -> int:
    """Group size: an integer >= 1."""
    if isinstance(G, bool) or not isinstance(G, Integral):
        raise ValueError(f"G (group size) must be an integer >= 1, got {G!r}")
    if G < 1:
        raise ValueError(f"G (group size) must be >= 1, got G = {G}")
    return int(G)


def check_positive_int(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, Integral) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def finite_array(x, name: str, ndim: tuple[int, ...] | None = None) -> np.ndarray:
    """``x`` as a float64 array; rank in ``ndim`` (if given) and every entry finite."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}") from exc
    if ndim is not None and arr.ndim not in ndim:
        raise ValueError(f"{name} must have rank {' or '.join(map(str, ndim))}, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    bad = np.argwhere(~np.isfinite(arr))
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        raise ValueError(f"{name} contains a non-finite value ({arr[idx]}) at index {idx}")
    return arr


def check_probs(p, name: str) -> np.ndarray:
    """A probability vector (last axis): entries >= 0 summing to 1 within 1e-9."""
    p = finite_array(p, name)
    if (p < 0).any():
        idx = tuple(int(i) for i in np.argwhere(p < 0)[0])
        raise ValueError(f"{name} has a negative probability {p[idx]} at index {idx}")
    total = p.sum(-1)
    off = np.abs(total - 1.0)
    if (off > PROB_ATOL).any():
        i = int(np.argmax(off))
        raise ValueError(
            f"{name} must sum to 1 along its last axis, got sum {np.ravel(total)[i]!r} "
            f"(off by {np.ravel(off)[i]:.3g} > {PROB_ATOL})"
        )
    return p


def check_rewards(r, shape: tuple[int, ...], name: str = "rewards", r_max: float = 1.0) -> np.ndarray:
    """Rewards of shape ``shape`` (or broadcastable to it) in [0, r_max] (THEORY A1)."""
    r = finite_array(r, name)
    try:
        r = np.broadcast_to(r, shape).astype(np.float64)
    except ValueError:
        raise ValueError(f"{name} must have shape {shape}, got {np.shape(r)}") from None
    if (r < 0).any() or (r > r_max).any():
        bad = float(r[(r < 0) | (r > r_max)][0])
        raise ValueError(f"{name} must lie in [0, {r_max:g}] (THEORY A1), got {bad!r}")
    return r
