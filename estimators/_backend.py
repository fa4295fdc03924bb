"""Array-backend shim: the scheme functions are written once against this tiny
namespace and run unchanged on numpy arrays and torch tensors.

Only the handful of operations the schemes need are exposed. Every operation
keeps the input's array type, dtype and device.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

try:  # torch is a runtime dependency, but keep numpy-only callers light.
    import torch
except ImportError:  # pragma: no cover - torch is pinned in pyproject
    torch = None  # type: ignore[assignment]


def is_torch(x: Any) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


class NumpyOps:
    name = "numpy"

    @staticmethod
    def exp(x):
        with np.errstate(over="ignore"):
            return np.exp(x)

    @staticmethod
    def log(x):
        with np.errstate(divide="ignore"):
            return np.log(x)

    @staticmethod
    def clamp_max(x, hi):
        return np.minimum(x, hi)

    @staticmethod
    def where(cond, a, b):
        return np.where(cond, a, b)

    @staticmethod
    def full_like(x, value):
        return np.full_like(x, value)

    @staticmethod
    def global_max(x) -> float:
        return float(x.max())

    @staticmethod
    def rowmax(x):
        return np.max(x, axis=-1, keepdims=True)

    @staticmethod
    def log_max(x) -> float:
        """log of the largest finite value of x's dtype (exp overflows above it)."""
        return math.log(float(np.finfo(x.dtype).max))

    @staticmethod
    def rowsum(x):
        # a matrix-vector product: one BLAS pass, much faster than a reduction over a short last axis
        return (x @ np.ones(x.shape[-1], dtype=x.dtype))[:, None]

    @staticmethod
    def scale_(x, s):
        x *= s
        return x

    @staticmethod
    def logsumexp(x, axis=-1):
        m = np.max(x, axis=axis, keepdims=True)
        with np.errstate(under="ignore"):
            return m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


class TorchOps:
    name = "torch"

    exp = staticmethod(lambda x: torch.exp(x))
    log = staticmethod(lambda x: torch.log(x))
    clamp_max = staticmethod(lambda x, hi: torch.clamp(x, max=hi))
    where = staticmethod(lambda cond, a, b: torch.where(cond, a, b))
    full_like = staticmethod(lambda x, value: torch.full_like(x, value))
    logsumexp = staticmethod(lambda x, axis=-1: torch.logsumexp(x, dim=axis, keepdim=True))
    global_max = staticmethod(lambda x: float(x.detach().max()))
    rowmax = staticmethod(lambda x: x.amax(-1, keepdim=True))
    log_max = staticmethod(lambda x: math.log(torch.finfo(x.dtype).max))
    rowsum = staticmethod(lambda x: x.sum(-1, keepdim=True))
    @staticmethod
    def scale_(x, s):
        """``x * s``, in place unless autograd records the input (an in-place op on a tensor an
        earlier op saved for its backward breaks ``backward()``)."""
        return x * s if x.requires_grad else x.mul_(s)



def ops_for(x: Any):
    return TorchOps if is_torch(x) else NumpyOps


def widen(x: Any):
    """``(x in the compute dtype, cast-back function)``.

    Weights are computed in float64 whatever the input dtype (float32 on a torch device without
    float64, e.g. MPS) and cast back once, so a float32 / bfloat16 / float16 result is the
    float64 answer rounded to its dtype, and no intermediate (w = exp(log w), a group sum) can
    overflow the narrow dtype. Trajectory log-ratios are one number per sequence, so the
    upcast is cheap; float64 input is passed through untouched (the fast path).
    """
    if is_torch(x):
        if x.dtype == torch.float64:
            return x, _identity
        wide = torch.float32 if x.device.type == "mps" else torch.float64
        if x.dtype == wide:
            return x, _identity
        return x.to(wide), lambda y, dt=x.dtype: y.to(dt)
    if x.dtype == np.float64 or np.finfo(x.dtype).bits > 64:
        return x, _identity
    return x.astype(np.float64), lambda y, dt=x.dtype: y.astype(dt, copy=False)


def _identity(y):
    return y


def log1p_scalar(eps: float) -> float:
    return math.log1p(eps)
