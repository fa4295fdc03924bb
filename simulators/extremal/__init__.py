"""E4, extremal ratio laws: exact mass-biases for the tightness and exponent claims (THEORY §3, §6).

Their closed-form worst cases are bounds/' ``m_mask_two_point``, ``scarf_bound`` and
``m_gmc_quadratic`` (numeric twins via :mod:`simulators.theory`).
"""
from .laws import RatioLaw, rare_jump, scarf, two_point_mask

__all__ = ["RatioLaw", "rare_jump", "scarf", "two_point_mask"]
