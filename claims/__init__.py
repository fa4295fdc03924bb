"""Every claim check of THEORY.md §5, the claims registry, and the verdicts on the abstract.

``python -m claims`` (``make verify-bounds``) runs every registered claim, prints one table and writes
``results/verify/claims.json`` and ``claims.md``; ``python -m claims.abstract`` turns the
claims and the committed results into ``results/verify/abstract.json``, which the report renders.

* :mod:`claims.result`           the one :class:`Result` type every check returns
* :mod:`claims.registry`         the registered claims (:data:`CLAIMS`), :func:`run_claims`
* :mod:`claims.class_optimality` claims 1-4; :mod:`claims.closed_forms` 5, 6, 10, 15;
  :mod:`claims.delay_terms` 11, 12, 13, 17; :mod:`claims.enumeration` 7, 8, 9, 14, 16, 18;
  :mod:`claims.optimizers` 19 (from the saved async_optimizers sweep), :mod:`claims.normalised` 20-22 (§8);
  :mod:`claims.prefix` 23 (CTPO's claim), :mod:`claims.trm_bounds` 25 (Trust Region Masking's bounds)
* :mod:`claims.measures`         what the results files say (slopes, summaries, rankings), computed once
  for the abstract's verdicts and the figures' captions
* :mod:`claims.abstract`         the verdict on each claim of the abstract

The bounds checked are THEORY.md's reconstruction ([R]), not the paper's text.
"""
from .result import STATUSES, Result, combine, jsonable

_REGISTRY = ("BY_ID", "CLAIMS", "KEYS", "KINDS", "Claim", "get_claim", "run_claims")
__all__ = ["BY_ID", "CLAIMS", "KEYS", "KINDS", "STATUSES", "Claim", "Result", "combine", "get_claim", "jsonable",
           "run_claims"]


def __getattr__(name):
    # the registry imports every check (and so the simulators): loaded on first use, so that
    # readers of claims.measures (the figures) do not import them
    if name in _REGISTRY:
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'claims' has no attribute {name!r}")
