"""Exact and Monte Carlo moments of the estimator family on a finite outcome space.

Every environment with finitely many outcomes (E1's arms, E2's token sequences, E4's
ratio values) reduces to the same data, one row per *instance* ``b`` (a prompt, or one
(theta, theta_b) pair of a batch):

* ``log_ratio[b, k] = log pi_theta(k) - log pi_b(k)``, shape ``(B, K)``;
* ``log_p_b[b, k] = log pi_b(k)``, shape ``(B, K)`` (every outcome sampled with p > 0);
* ``rewards[b, k]`` in [0, 1], shape ``(B, K)``;
* ``scores[b, k] = grad log pi_theta(k)``, shape ``(B, K, P)``.

A group is G iid outcomes from pi_b. The estimator of THEORY §1 is
``g_hat(c) = (1/G) sum_i c_i A_i s_{o_i}``; its weights ``c`` always come from
:func:`estimators.weights` and its advantages from :func:`estimators.advantages`,
both called once on a whole ``(rows, G)`` array.

Exact expectations (THEORY §6) sum over **count vectors** ``n`` (``|n| = G``) weighted
by the multinomial pmf: a group's estimate depends on its outcomes only through ``n``
(every scheme is permutation-equivariant), so the ``C(G+K-1, K-1)`` count vectors
replace the ``K^G`` ordered tuples. Each count vector is expanded to the sorted tuple
of its outcomes, a row of the ``(N, G)`` array handed to the estimators.

Monte Carlo draws count vectors with ``rng.multinomial`` (the same law as G iid draws)
and evaluates the estimate once per distinct count vector drawn, weighted by its
frequency.

One module per job: :mod:`.counts` (count-vector combinatorics), :mod:`.groups` (group
terms), :mod:`.exact` (exact moments), :mod:`.montecarlo` (Monte Carlo), :mod:`.env` (the
environment base class), :mod:`.ratio_laws` (mass bias of ratio laws alone); every name is
re-exported here.
"""
from __future__ import annotations

from .counts import (  # noqa: F401
    CHUNK_ENTRIES,
    MAX_ENTRIES,
    check_enumeration_size,
    configurations,
    expand_counts,
    n_count_vectors,
)
from .env import OutcomeEnv  # noqa: F401
from .exact import (  # noqa: F401
    PER_SAMPLE_SCHEMES,
    bound_M,
    exact_batch,
    per_sample_batch,
    ratio_moments,
)
from .groups import GroupTerms, group_terms  # noqa: F401
from .montecarlo import (  # noqa: F401
    MCGroups,
    check_mc_args,
    distinct_counts,
    draw_counts,
    mc_groups,
    mc_stats,
)
from .ratio_laws import exact_mass_batch, mc_mass  # noqa: F401
