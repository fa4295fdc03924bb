"""E3, the Gaussian policy with lognormal ratios: closed forms and Monte Carlo (THEORY §6, claim 15)."""
from .env import GaussianPolicy

__all__ = ["GaussianPolicy"]
