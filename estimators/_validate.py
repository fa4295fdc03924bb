"""Input checks shared by every public entry point of :mod:`estimators`.

Each check raises ``ValueError`` naming the argument, the bad value and, for
arrays, the index of the first offending entry: never a NaN or a traceback
from deep inside numpy or torch.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from ._backend import is_torch, torch


def as_array(x: Any, name: str):
    """numpy arrays and torch tensors pass through; lists/scalars become float64 numpy.

    Complex input is refused (a log-ratio is real; dropping the imaginary part would hide a bug)."""
    if is_torch(x):
        if torch.is_complex(x):
            raise ValueError(f"{name} must be real, got a complex tensor (dtype {x.dtype})")
        if not torch.is_floating_point(x):
            x = x.to(torch.float64)
        return x
    if isinstance(x, np.ndarray):
        if np.iscomplexobj(x):
            raise ValueError(f"{name} must be real, got a complex array (dtype {x.dtype})")
        if not np.issubdtype(x.dtype, np.floating):
            if x.dtype == object or not np.issubdtype(x.dtype, np.number):
                raise ValueError(f"{name} must be a numeric array, got dtype {x.dtype}")
            x = x.astype(np.float64)
        return x
    try:
        is_complex = np.iscomplexobj(np.asarray(x))
    except (TypeError, ValueError):
        is_complex = False
    if is_complex:
        raise ValueError(f"{name} must be real, got complex values")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array (numpy or torch), got {type(x).__name__}") from exc
    return arr


def _first_bad_index(x) -> tuple[tuple[int, ...], float]:
    if is_torch(x):
        arr = x.detach().to("cpu", torch.float64).numpy()
    else:
        arr = np.asarray(x, dtype=np.float64)
    bad = np.argwhere(~np.isfinite(arr))
    idx = tuple(int(i) for i in bad[0])
    return idx, float(arr[idx])


def check_finite(x, name: str) -> None:
    """One cheap pass: a sum is finite iff no entry is NaN/inf (barring overflow)."""
    total = x.sum()
    total = float(total.item() if is_torch(total) else total)
    if math.isfinite(total):
        return
    arr_has_bad = (
        bool((~torch.isfinite(x)).any().item()) if is_torch(x) else not bool(np.isfinite(x).all())
    )
    if arr_has_bad:
        idx, val = _first_bad_index(x)
        raise ValueError(f"{name} contains a non-finite value ({val}) at index {idx}")


def check_groups(x, name: str = "log_ratio"):
    """Check rank 2 ``(prompts_per_step, G)`` with G >= 1 and prompts_per_step >= 1, and finiteness."""
    x = as_array(x, name)
    if x.ndim != 2:
        raise ValueError(
            f"{name} must have shape (prompts_per_step, G) (rank 2), got rank {x.ndim} with shape {tuple(x.shape)}"
        )
    if x.shape[1] < 1:
        raise ValueError(f"{name} has an empty group: G = {x.shape[1]} (need G >= 1), shape {tuple(x.shape)}")
    if x.shape[0] < 1:
        raise ValueError(f"{name} has no groups: shape {tuple(x.shape)}")
    check_finite(x, name)
    return x


def check_eps(eps: Any, name: str = "eps") -> float:
    """``eps`` (or the threshold ``name``, e.g. ``eps_high``) as a finite float > 0, else a ValueError naming it."""
    if isinstance(eps, bool) or not isinstance(eps, Real):
        if is_torch(eps) and eps.numel() == 1:
            eps = float(eps.item())
        elif isinstance(eps, np.ndarray) and eps.size == 1:
            eps = float(eps)
        else:
            raise ValueError(f"{name} must be a positive real number, got {eps!r}")
    eps = float(eps)
    if not math.isfinite(eps):
        raise ValueError(f"{name} must be a finite positive real number (the cap is 1+{name}), got {name} = {eps!r}")
    if not eps > 0:
        raise ValueError(f"{name} must be > 0 (the cap is 1+{name}), got {name} = {eps!r}")
    return eps


def check_fits_dtype(owner: str, values: dict, dtype) -> None:
    """Every real number of ``values`` (knob name -> value; None and strings skipped) is at most the largest
    finite number of ``dtype`` (a torch or numpy floating dtype) in magnitude, else a ValueError naming
    ``owner``, the knob, its value and the dtype: a knob the computation's dtype cannot hold would become
    ``inf`` there, or a raw error of the library that casts it."""
    big = float(torch.finfo(dtype).max) if is_torch_dtype(dtype) else float(np.finfo(dtype).max)
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, Real):
            continue
        if math.isfinite(float(v)) and abs(float(v)) > big:
            raise ValueError(f"{owner}: {name} = {v!r} overflows {dtype} (largest finite {big:g}), the dtype the "
                             f"loss computes in: choose a smaller {name}, or pass log-probs of a wider dtype")


def is_torch_dtype(dtype) -> bool:
    return torch is not None and isinstance(dtype, torch.dtype)


def check_same_shape(a, b, name_a: str, name_b: str) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{name_b} must have the shape of {name_a} {tuple(a.shape)}, got {tuple(b.shape)}")


def match_like(ref, x, name: str):
    """Convert ``x`` to the array type (and dtype/device) of ``ref``."""
    x = as_array(x, name)
    if is_torch(ref):
        if not is_torch(x):
            x = torch.as_tensor(np.asarray(x), dtype=ref.dtype, device=ref.device)
        return x.to(dtype=ref.dtype, device=ref.device)
    if is_torch(x):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=ref.dtype)


def check_group_size(group_size: Any, name: str = "group_size G", least: int = 1) -> int:
    """``group_size`` as a Python int: any integral number (``int``, ``numbers.Integral``, numpy integers,
    a 0-d or one-element integer tensor or array) >= ``least``; a bool, a float or anything else is a
    ValueError naming the value."""
    value = group_size
    if is_torch(value) and value.numel() == 1 and not torch.is_floating_point(value) \
            and value.dtype != torch.bool and not torch.is_complex(value):
        value = int(value.item())
    elif isinstance(value, np.ndarray) and value.size == 1 and np.issubdtype(value.dtype, np.integer):
        value = int(value.reshape(()))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or int(value) < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {group_size!r}")
    return int(value)
