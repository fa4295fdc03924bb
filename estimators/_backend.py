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
    global_max = staticmethod(lambda x: float(x.max()))
    rowsum = staticmethod(lambda x: x.sum(-1, keepdim=True))
    scale_ = staticmethod(lambda x, s: x.mul_(s))



def ops_for(x: Any):
    return TorchOps if is_torch(x) else NumpyOps


def log1p_scalar(eps: float) -> float:
    return math.log1p(eps)
