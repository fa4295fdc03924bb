"""E2 instances as data (used by the delay sweeps)."""
from __future__ import annotations

import numpy as np

from .env import TokenTreeMDP, reward_vector

INSTANCES = {
    # V = 2, H = 4, position-factorised logits; reward 1{sum_h o_h >= 3}
    "threshold": {"V": 2, "H": 4, "param": "position", "reward": {"kind": "threshold"},
                  "theta": [[0.3, -0.2], [0.0, 0.4], [-0.5, 0.1], [0.2, 0.2]],
                  "theta_b": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
                  "direction": [[-0.5, 0.5], [0.3, -0.3], [0.4, -0.4], [-0.2, 0.2]]},
    # V = 2, H = 4, target sequence (1,1,1,1): pi(target) = 1/16 at theta = 0
    "target": {"V": 2, "H": 4, "param": "position", "reward": {"kind": "target", "target": [1, 1, 1, 1]},
               "theta": [[0.0, 0.0]] * 4, "theta_b": [[0.0, 0.0]] * 4, "direction": [[1.0, -1.0]] * 4},
}
"""E2 instances (THEORY §6): 16 sequences each."""


def instance(name: str):
    """``(env, theta, theta_b, direction)`` of an E2 instance."""
    if name not in INSTANCES:
        raise ValueError(f"unknown E2 instance {name!r}; valid: {', '.join(INSTANCES)}")
    d = INSTANCES[name]
    r = reward_vector(V=d["V"], H=d["H"], **d["reward"])
    env = TokenTreeMDP(d["V"], d["H"], d["param"], r)
    return env, np.array(d["theta"], float), np.array(d["theta_b"], float), np.array(d["direction"], float)
