"""``python -m simulators.tuned_sweep [--out DIR] [--force]``: Corollary 3's tuned delay term, numerically.

For each scheme with a fourth-order delay term (GMC, TIC-mask, TIC-trunc), each eps and
each group size G of :data:`SETTINGS`, the step size is tuned numerically:
:func:`bounds.tuning.tune_step_size` minimises the twin of ``a/(eta T) + D eta^4`` over
``log eta`` (the delay-dominated regime, B = 0), where ``D`` is the scheme's Theorem 2 term
(``bounds.delay``, lambdified) at ``eta = 1``. Beside each tuned value it stores Corollary 3's closed form
``(5/4) 4^{1/5} a^{4/5} D^{1/5} T^{-4/5}`` and ``eta_D`` (both numeric twins), so figure F3
draws the theory line and the numerically tuned points from one file.

Writes ``results/sim/tuned_delay/config.json`` and ``results.parquet`` (one row per
(scheme, eps, G)). Seconds to run. An existing result made with the same settings is kept
(nothing to do); one made with other settings is refused unless ``--force`` moves it aside.
The bounds are THEORY.md's reconstruction ([R]), not the paper's text.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bounds.tuning import CONSTANTS, LOG_ETA_BOUNDS, XATOL
from schema.io import same_settings_or_move_aside, write_json, write_parquet
from schema.log import cli_logging
from schema.results import results_root


def default_out() -> Path:
    """``sim/tuned_delay`` under the results root (``GMC_RESULTS`` or ``results/``)."""
    return results_root() / "sim" / "tuned_delay"


SETTINGS = {
    "schemes": ["gmc", "tic_mask", "tic_trunc"],
    "G": [2**k for k in range(1, 12)],
    "eps": [0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.4, 1.0],
    # the constants of claim 12's numeric check (bounds.tuning.CONSTANTS)
    "fixed": dict(CONSTANTS),
    "log_eta_bounds": list(LOG_ETA_BOUNDS),
    "xatol": XATOL,
}

COLUMNS = {
    "scheme": "weighting scheme (delay term of bounds.delay.DELAY_TERMS)",
    "G": "group size", "eps": "cap 1+eps", "a": "2 DeltaJ", "T": "steps", "d": "delay",
    "C2": "A5 constant", "C4": "A5 constant", "r0": "A5 radius", "M": "score bound",
    "D": "Theorem 2's delay term at eta = 1 (its eta^4 coefficient)",
    "eta_tuned": "argmin over eta of a/(eta T) + D eta^4 (minimize_scalar on log eta)",
    "tuned_delay_term": "the minimum value: the numerically tuned delay term",
    "closed_form": "Corollary 3: (5/4) 4^(1/5) a^(4/5) D^(1/5) T^(-4/5)",
    "eta_D": "Corollary 3: (a / (4 D T))^(1/5)",
    "rel_err": "tuned_delay_term / closed_form - 1",
}


def run(settings: dict = SETTINGS, progress: bool = True) -> pd.DataFrame:
    from tqdm import tqdm

    from bounds import delay
    from bounds.numeric import lambdify_bound, twin
    from bounds.tuning import tune_step_size

    fx = settings["fixed"]
    closed, eta_d = twin("cor3_delay_part"), twin("eta_D")
    grid = [(s, e, g) for s in settings["schemes"] for e in settings["eps"] for g in settings["G"]]
    terms = {s: lambdify_bound(delay.delay_term(s)) for s in settings["schemes"]}
    rows = []
    for estimator, eps, G in tqdm(grid, desc="tuned_delay", disable=not progress, unit="setting"):
        D_fn = terms[estimator]
        vals = {**fx, "eta": 1.0, "G": float(G), "eps": float(eps)}
        D = float(D_fn(**{k: vals[k] for k in D_fn.params}))
        eta_t, fmin = tune_step_size(fx["a"], D, fx["T"], log_eta_bounds=settings["log_eta_bounds"],
                                     xatol=settings["xatol"])
        cf = float(closed(a=fx["a"], D=D, T=fx["T"]))
        rows.append({"scheme": estimator, "G": G, "eps": eps, **fx, "D": D, "eta_tuned": eta_t,
                     "tuned_delay_term": fmin, "closed_form": cf,
                     "eta_D": float(eta_d(a=fx["a"], D=D, T=fx["T"])), "rel_err": fmin / cf - 1})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulators.tuned_sweep", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="output folder (default results/sim/tuned_delay)")
    p.add_argument("--force", action="store_true", help="move aside a result made with other settings")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    cli_logging()
    out = a.out if a.out is not None else default_out()
    cfg = {"sweep": "tuned_delay", "description": __doc__.split("\n\n")[1], "settings": SETTINGS, "columns": COLUMNS}
    cfg_path, res_path = out / "config.json", out / "results.parquet"
    try:
        same = same_settings_or_move_aside(out, cfg, ("settings",), a.force)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if same and res_path.exists():
        print(f"tuned_delay: {res_path} is up to date (same settings); nothing to do")
        return 0
    t0 = time.perf_counter()
    df = run(SETTINGS, progress=not a.no_progress)
    out.mkdir(parents=True, exist_ok=True)
    write_json(cfg_path, cfg, indent=1)
    write_parquet(res_path, df)
    worst = float(np.abs(df["rel_err"]).max())
    print(f"tuned_delay: {res_path} ({len(df)} rows, max |tuned/closed - 1| = {worst:.1e}, "
          f"{time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
