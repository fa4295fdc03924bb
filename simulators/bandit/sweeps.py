"""E1 sweeps as data: the instances and the bias-vs-G table (figure F1)."""
from __future__ import annotations

import numpy as np

from estimators import scheme_names

from .._rows import MOMENT_COLUMNS, moment_rows
from ..sweep_spec import Sweep, derive_seed
from .env import SoftmaxBandit, rare_arm_instance

INSTANCES = {
    # name: (theta, theta_b, rewards); "direction" is the static-delay direction u (theta_b = theta - Delta u)
    "mild": {"theta": [0.5, 0.0, -0.5, 0.2], "theta_b": [0.0, 0.0, 0.0, 0.0], "rewards": [1.0, 0.0, 0.5, 0.3],
             "direction": [1.0, 0.0, -1.0, 0.5]},
    "rare_arm": dict(zip(("theta", "theta_b", "rewards"), (x.tolist() for x in rare_arm_instance(4, 0.05, 2.0))),
                     direction=[1.0, 0.0, 0.0, 0.0]),
}
"""E1 instances (K = 4): a mild policy gap, and THEORY §6's rare-arm variant (heavy ratio tail)."""


def instance(name: str):
    """``(env, theta, theta_b, direction)`` of an E1 instance."""
    if name not in INSTANCES:
        raise ValueError(f"unknown E1 instance {name!r}; valid: {', '.join(INSTANCES)}")
    d = INSTANCES[name]
    return SoftmaxBandit(d["rewards"]), np.array(d["theta"]), np.array(d["theta_b"]), np.array(d["direction"])


def run_bias_vs_G(setting: dict, seeds: list[int]):
    env, theta, theta_b, _ = instance(setting["instance"])
    return moment_rows(env, theta, theta_b, setting["G"], setting["eps"], setting["schemes"], seeds,
                       setting["n_groups"], lambda s: derive_seed(s, setting))


ALL_SCHEMES = scheme_names(family="theory")
"""THEORY §2's family (the published peers are measured by the ``peers`` sweep, simulators.peers)."""

SETTINGS = {
    "bias_vs_G": {
        "full": {"grid": {"instance": ["mild", "rare_arm"], "G": [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64],
                          "eps": [0.2]},
                 "fixed": {"env": "bandit", "schemes": ALL_SCHEMES, "n_groups": 20_000}, "seeds": [0, 1, 2]},
        "quick": {"grid": {"instance": ["mild", "rare_arm"], "G": [2, 4, 8, 16, 32], "eps": [0.2]},
                  "fixed": {"env": "bandit", "schemes": ALL_SCHEMES, "n_groups": 4_000}, "seeds": [0]},
    },
}

SWEEPS = [
    Sweep("bias_vs_G", "E1: exact and Monte Carlo bias of every scheme against the group size G (F1)",
          SETTINGS["bias_vs_G"], run_bias_vs_G,
          {**MOMENT_COLUMNS, "instance": "E1 instance (bandit.sweeps.INSTANCES)", "G": "group size",
           "eps": "cap 1+eps", "env": "environment"}),
]
