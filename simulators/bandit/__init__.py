"""E1, the softmax bandit: environment, exact and Monte Carlo moments, sweeps (THEORY §6)."""
from .env import (
    SoftmaxBandit,
    exact_all,
    exact_moments,
    mc_moments,
    per_sample_moments,
    rare_arm_instance,
)

__all__ = ["SoftmaxBandit", "exact_all", "exact_moments", "mc_moments", "per_sample_moments", "rare_arm_instance"]
