"""Claim 19 (THEORY §7, an addition): claim 17's ordering under the optimisers practice uses and
at long horizons, from the saved ``async_optimizers`` sweep (:mod:`simulators.optimizer_sweeps`).

Claim 17 (asynchronous SGD, fixed eta, short horizons) expects GMC's average ``||grad J||^2`` to
be at most TIC-mask's. Claim 19 asks the same at the largest delay of the sweep under each
optimiser (SGD, Adam, Adam + clip, AdamW + clip) and each horizon H: it holds in a cell unless
the paired 95% t-interval (scipy) of ``avg||grad J||^2(GMC) - avg||grad J||^2(TIC-mask)`` over
the seeds lies entirely above 0 (GMC significantly worse). An expected-behaviour claim like 17,
not a theorem: it is FAIL with its evidence where the data contradict it. The evidence also
reports, as observations, the LLM study's ordering (final J of GMC below TOPR's and TIC-trunc's)
cell by cell, and the collapse shares.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from schema.results import MissingResults, Sim, read_sim
from schema.sources import shown_path
from stats import t_interval

from .result import Result

SOURCE = Sim("async_optimizers")
LEVEL = 0.95


def paired_interval(a, b, level: float = LEVEL) -> tuple[float, float, float, int]:
    """Mean of the paired differences ``a - b`` (the finite ones) and its two-sided t-interval
    (:func:`stats.t_interval`): ``(mean, low, high, n)``, NaN bounds below two differences."""
    d = np.asarray(a, float) - np.asarray(b, float)
    m, h, n = t_interval(d[np.isfinite(d)], level)
    return m, m - h, m + h, n


def paired(df: pd.DataFrame, H: int, opt: str, d: int, a: str, b: str, metric: str):
    """The paired interval of ``metric`` between schemes ``a`` and ``b`` in one (H, optimiser, d) cell."""
    cell = df[(df["H"] == H) & (df["optimizer"] == opt) & (df["d"] == d)]
    x = cell[cell["scheme"] == a].set_index("seed")[metric]
    y = cell[cell["scheme"] == b].set_index("seed")[metric]
    seeds = x.index.intersection(y.index)
    return paired_interval(x.loc[seeds].to_numpy(), y.loc[seeds].to_numpy())


def ordering_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (optimiser, H) at the largest delay: GMC - TIC-mask in avg ||grad J||^2 (claim 19), and
    GMC - TOPR, GMC - TIC-trunc in final J (the LLM study's ordering), with paired intervals."""
    d = int(df["d"].max())
    rows = []
    for opt in sorted(df["optimizer"].unique(), key=["sgd", "adam", "adam_clip", "adamw_clip"].index):
        for H in sorted(df["H"].unique()):
            r = {"optimizer": opt, "H": int(H), "d": d}
            for key, (b, metric) in {"mask": ("tic_mask", "avg_grad_sq"), "topr_J": ("topr", "final_J"),
                                     "trunc_J": ("tic_trunc", "final_J")}.items():
                m, lo, hi, n = paired(df, H, opt, d, "gmc", b, metric)
                r.update({f"{key}_mean": m, f"{key}_low": lo, f"{key}_high": hi, "n": n})
            cell = df[(df["H"] == H) & (df["optimizer"] == opt) & (df["d"] == d)]
            for s in ("gmc", "tic_mask", "tic_trunc", "topr"):
                r[f"collapse_{s}"] = float(cell[cell["scheme"] == s]["collapsed"].mean())
            rows.append(r)
    return pd.DataFrame(rows)


def ordering_verdict(tab: pd.DataFrame) -> dict:
    """Whether the exact simulators reproduce the LLM study's ordering, from :func:`ordering_table`'s paired
    intervals at the longest horizon: ``reproduced``, the optimisers under which GMC's final J is below both
    TOPR's and TIC-trunc's (both intervals below 0); ``largest_difference``, the largest |difference| in J
    under those; ``max_collapse``, the largest share of collapsed runs of GMC, TOPR, TIC-trunc or TIC-mask
    there; ``claim17_fails``, the (optimiser, H) cells where GMC's average ||grad J||^2 is significantly
    above TIC-mask's; and the cell's ``H`` and ``d``."""
    H, d = int(tab["H"].max()), int(tab["d"].iloc[0])
    long = tab[tab["H"] == H]
    rep = long[(long["topr_J_high"] < 0) & (long["trunc_J_high"] < 0)]
    size = float(np.nanmax(np.abs(rep[["topr_J_mean", "trunc_J_mean"]].to_numpy()))) if len(rep) else float("nan")
    coll = float(np.nanmax(long[["collapse_gmc", "collapse_topr", "collapse_tic_trunc", "collapse_tic_mask"]]
                           .to_numpy())) if len(long) else float("nan")
    return {"H": H, "d": d, "reproduced": list(rep["optimizer"]), "largest_difference": size, "max_collapse": coll,
            "claim17_fails": [(r.optimizer, int(r.H)) for r in tab.itertuples() if r.mask_low > 0]}


def check_19(quick: bool = False) -> Result:
    """Claim 19 from the saved sweep (module docstring)."""
    try:
        df = read_sim(SOURCE)
    except MissingResults as e:
        return Result(None, None, None, "ERROR", str(e))
    tab = ordering_table(df)
    worse = tab[tab["mask_low"] > 0]
    better = tab[tab["mask_high"] < 0]
    undecided = tab[tab["mask_low"].isna()]

    def cell(r):
        return f"{r.optimizer} H={r.H}"

    per = "; ".join(f"{cell(r)}: {r.mask_mean:+.2e} [{r.mask_low:+.2e}, {r.mask_high:+.2e}]" for r in tab.itertuples())
    llm = "; ".join(f"{cell(r)}: GMC-TOPR {r.topr_J_mean:+.3f} [{r.topr_J_low:+.3f}, {r.topr_J_high:+.3f}], "
                    f"GMC-TIC-trunc {r.trunc_J_mean:+.3f} [{r.trunc_J_low:+.3f}, {r.trunc_J_high:+.3f}]"
                    for r in tab.itertuples())
    llm_reproduced = [cell(r) for r in tab.itertuples() if r.topr_J_high < 0 and r.trunc_J_high < 0]
    collapse = "; ".join(f"{cell(r)}: GMC {r.collapse_gmc:.0%}, TIC-mask {r.collapse_tic_mask:.0%}, "
                         f"TIC-trunc {r.collapse_tic_trunc:.0%}, TOPR {r.collapse_topr:.0%}" for r in tab.itertuples())
    d, n = int(tab["d"].iloc[0]), int(tab["n"].min())
    ok = not len(worse) and not len(undecided)
    return Result.of(
        ok, f"in no (optimiser, H) cell at d = {d} is GMC's avg ||grad J||^2 above TIC-mask's (paired 95% interval "
            "above 0)",
        f"GMC worse in {len(worse)} of {len(tab)} cells ({', '.join(map(cell, worse.itertuples())) or 'none'}); "
        f"better in {len(better)} ({', '.join(map(cell, better.itertuples())) or 'none'})",
        f"paired t-interval, {LEVEL:.0%}, {n} seeds",
        f"[expected behaviour, not a theorem] {shown_path(SOURCE.find())}"
        f"{' (QUICK grid)' if SOURCE.is_quick() else ''}; "
        f"GMC - TIC-mask in avg ||grad J||^2 at d = {d}: {per}. LLM ordering (final J of GMC below TOPR and "
        f"TIC-trunc, both intervals below 0) reproduced in: {', '.join(llm_reproduced) or 'no cell'}; {llm}. "
        f"Collapse (final J < {df['collapse_frac'].iloc[0]:g} J0) at d = {d}: {collapse}")


__all__ = ["check_19", "ordering_table", "paired_interval"]
