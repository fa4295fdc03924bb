"""E2, the token-level tree MDP: environment, exact and Monte Carlo moments (THEORY §6)."""
from .env import (
    PARAMS,
    TokenTreeMDP,
    exact_moments,
    mc_moments,
    n_nodes,
    outcomes,
    per_sample_moments,
    reward_vector,
)

__all__ = ["PARAMS", "TokenTreeMDP", "exact_moments", "mc_moments", "n_nodes", "outcomes", "per_sample_moments",
           "reward_vector"]
