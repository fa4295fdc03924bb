"""Estimator bias and second moment under controlled delay, exactly and by Monte Carlo.

The empirical half of the verification (THEORY.md §5-§6). One folder per environment:

* :mod:`simulators.bandit` (E1): softmax bandit, exact moments by count-vector enumeration;
* :mod:`simulators.token_mdp` (E2): token-level tree MDP over V^H sequences;
* :mod:`simulators.lognormal` (E3): Gaussian policy with lognormal ratios (claim 15);
* :mod:`simulators.extremal` (E4): extremal ratio laws (tightness and exponents).

Shared pieces: :mod:`simulators.core` (enumeration, Monte Carlo, the per-sample closed
forms), :mod:`simulators.delay` (static delay and asynchronous SGD),
:mod:`simulators.theory` (bounds/' numeric twins), :mod:`simulators.sweep`
(``python -m simulators.sweep NAME``), :mod:`simulators.tuned_sweep` (Corollary 3's tuned
delay term) and :mod:`simulators.bench`. The claims of ``make verify-bounds`` that use them
live in :mod:`claims`. Every weight comes from
:func:`estimators.weights`.

>>> from simulators import bandit
>>> r = bandit.exact_moments([0.5, 0.0], [0.0, 0.0], [1.0, 0.0], 4, 0.2, "gmc")
>>> sorted(k for k in r if k in ("mean_grad", "grad_J", "second_moment", "max_norm"))
['grad_J', 'max_norm', 'mean_grad', 'second_moment']
"""
