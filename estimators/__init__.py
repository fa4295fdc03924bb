"""One definition of every weighting scheme of THEORY.md §2, for numpy and torch.

>>> import numpy as np, estimators
>>> estimators.weights("gmc", np.log([[3.0, 1.0, 1.0, 1.0]]), 0.2).round(12).tolist()
[[2.4, 0.8, 0.8, 0.8]]
"""
import importlib as _importlib
import pkgutil as _pkgutil

PROGRAMS = ("bench",)
"""Modules of the package that are programs (``python -m estimators.bench``), not imported with it."""


def _discover() -> None:
    """Import every module of the package (in name order): each registers its estimators and their
    records, so a new estimator is one new module and no list names it."""
    for info in sorted(_pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_") and info.name not in PROGRAMS:
            _importlib.import_module(f"{__name__}.{info.name}")


_discover()
from .advantages import ADVANTAGE_KINDS, advantages
from .diagnostics import diagnostics
from .params import PARAMS, Param
from .schemes import (
    SCHEMES,
    Scheme,
    get_scheme,
    gmc_lambda,
    log_weights,
    register_scheme,
    scheme_names,
    weights,
)


def __getattr__(name):  # torch-only parts load lazily so numpy users need not import torch
    if name in {"policy_loss", "trajectory_loss", "token_clip_loss", "gspo_loss", "loss_names",
                "trajectory_log_ratio", "LossOutput", "TOKEN_LEVEL",
                "TOKEN_LOSSES", "m2po_loss", "cispo_loss", "opsm_loss"}:
        from . import losses

        return getattr(losses, name)
    raise AttributeError(name)


__all__ = [
    "ADVANTAGE_KINDS",
    "PARAMS",
    "SCHEMES",
    "LossOutput",
    "Param",
    "Scheme",
    "advantages",
    "diagnostics",
    "get_scheme",
    "gmc_lambda",
    "gspo_loss",
    "log_weights",
    "loss_names",
    "policy_loss",
    "register_scheme",
    "scheme_names",
    "token_clip_loss",
    "trajectory_log_ratio",
    "trajectory_loss",
    "weights",
]
