"""Throughput of the weighting schemes: ``python -m estimators.bench``.

Prints GMC weight throughput (numpy and torch) on 10^7 trajectories in groups of 8
and, in the same run, the time of one ``np.exp`` over the same array, as
``gmc_vs_exp_ratio: <x>`` (GMC should cost at most about four elementwise passes).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from .schemes import weights


def _best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10**7, help="number of trajectories (default 1e7)")
    p.add_argument("--group-size", type=int, default=8, help="G (default 8)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    if args.n % args.group_size:
        raise SystemExit(f"--n ({args.n}) must be a multiple of --group-size ({args.group_size})")
    rng = np.random.default_rng(0)
    lr = rng.normal(0.0, 0.5, size=(args.n // args.group_size, args.group_size))
    lr_t = torch.from_numpy(lr)
    t_exp = _best_of(lambda: np.exp(lr), args.repeat)
    t_np = _best_of(lambda: weights("gmc", lr, 0.2), args.repeat)
    t_torch = _best_of(lambda: weights("gmc", lr_t, 0.2), args.repeat)
    t_trunc = _best_of(lambda: weights("tic_trunc", lr, 0.2), args.repeat)
    out = {
        "n_trajectories": args.n,
        "np_exp_s": t_exp,
        "gmc_numpy_s": t_np,
        "gmc_torch_s": t_torch,
        "tic_trunc_numpy_s": t_trunc,
        "gmc_numpy_traj_per_s": args.n / t_np,
        "gmc_torch_traj_per_s": args.n / t_torch,
        "gmc_vs_exp_ratio": t_np / t_exp,
    }
    print(f"estimators bench: {args.n:.0e} trajectories in groups of {args.group_size}, float64, "
          f"torch threads {torch.get_num_threads()}, best of {args.repeat}")
    print(f"  np.exp (baseline)     {t_exp * 1e3:8.1f} ms")
    print(f"  gmc weights, numpy    {t_np * 1e3:8.1f} ms  ({args.n / t_np / 1e6:6.1f} M traj/s)")
    print(f"  gmc weights, torch    {t_torch * 1e3:8.1f} ms  ({args.n / t_torch / 1e6:6.1f} M traj/s)")
    print(f"  tic_trunc, numpy      {t_trunc * 1e3:8.1f} ms")
    print(f"gmc_vs_exp_ratio: {out['gmc_vs_exp_ratio']:.2f}")
    return out


if __name__ == "__main__":
    main()
