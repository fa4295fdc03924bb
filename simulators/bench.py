"""Benchmark of the simulators (``python -m simulators.bench``, part of ``make bench``).

Prints:

* the time of E1's exact enumeration with K = 4, G = 64 (47,905 count vectors) for every
  scheme of :data:`estimators.SCHEMES` (one shared enumeration), cold (first call, builds
  the count vectors) and warm, and the same through the one-scheme API in a loop;
* ``mc_vs_sampling_ratio: <x>``: the time of :func:`simulators.bandit.mc_moments` on E1
  divided by the time of only drawing its samples (``rng.multinomial`` count vectors of the
  same size), measured in the same run (best of several repeats each).
"""
from __future__ import annotations

import time

import numpy as np

import estimators

from .bandit import SoftmaxBandit, exact_all, exact_moments, mc_moments
from .bandit.sweeps import INSTANCES

K, G_EXACT = 4, 64
MC = {"G": 16, "n_groups": 200_000, "scheme": "gmc", "seed": 0}


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None):
    import argparse

    argparse.ArgumentParser(prog="python -m simulators.bench", description=__doc__.split("\n\n")[0]).parse_args(argv)
    inst = INSTANCES["mild"]
    th, tb, r = (np.array(inst[k]) for k in ("theta", "theta_b", "rewards"))
    estimator_names = [s for s, spec in estimators.SCHEMES.items() if not spec.batch_coupled]
    t0 = time.perf_counter()
    exact_all(th, tb, r, G_EXACT, 0.2, estimator_names)
    cold = time.perf_counter() - t0
    warm = _best(lambda: exact_all(th, tb, r, G_EXACT, 0.2, estimator_names), 3)
    loop = _best(lambda: [exact_moments(th, tb, r, G_EXACT, 0.2, s) for s in estimator_names], 2)
    print(f"exact_enumeration_K{K}_G{G_EXACT}_all_schemes_s: {cold:.3f} (cold, {len(estimator_names)} schemes)")
    print(f"exact_enumeration_K{K}_G{G_EXACT}_all_schemes_warm_s: {warm:.3f}")
    print(f"exact_moments_loop_K{K}_G{G_EXACT}_all_schemes_s: {loop:.3f} (one call per scheme)")

    G, n, estimator, seed = MC["G"], MC["n_groups"], MC["scheme"], MC["seed"]
    p_b = np.exp(SoftmaxBandit.log_probs(tb))
    t_mc = _best(lambda: mc_moments(th, tb, r, G, 0.2, estimator, n, seed))
    t_draw = _best(lambda: np.random.default_rng(seed).multinomial(G, p_b, size=n))
    print(f"mc_moments_s: {t_mc:.4f} (E1 K={K}, G={G}, {n} groups, {estimator})")
    print(f"sampling_only_s: {t_draw:.4f} (rng.multinomial of the same {n} groups)")
    print(f"mc_vs_sampling_ratio: {t_mc / t_draw:.2f}")


if __name__ == "__main__":
    main()
