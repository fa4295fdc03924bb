"""When a run counts as unstable, and the per-run summary and seed means the figures and claims
read. :mod:`schema.results` describes the whole contract."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

UNSTABLE_DROP = 0.10
UNSTABLE_SE = 3.0
"""A run is *unstable* if its loss or gradient norm is ever non-finite, an update was skipped
for a non-finite gradient, or its final held-out accuracy is below its own warm-start accuracy
(the evaluation at step 0) by more than max(UNSTABLE_DROP, UNSTABLE_SE binomial standard errors
of that accuracy on the held-out split), so that evaluation noise alone does not mark a run."""

UNSTABLE_RULE = (f"unstable = a non-finite loss or gradient norm (or a skipped update) at any step, or final "
                 f"held-out accuracy below the run's own step-0 (warm-start) accuracy p0 by more than "
                 f"max({UNSTABLE_DROP:.2f}, {UNSTABLE_SE:g} sqrt(p0 (1 - p0) / n_heldout))")


STABLE_FRACTION = 0.8
"""A correction is stable in a cell (horizon, delay, optimiser) when at least this fraction of its seeds' runs are
stable (:data:`UNSTABLE_RULE`): the staleness study's pre-registered rule, which every study, card and figure reads."""


def drop_threshold(acc0: float, n_heldout) -> float:
    """The accuracy drop beyond which a run is unstable, ``acc_drop`` (see :data:`UNSTABLE_RULE`)."""
    n = pd.to_numeric(n_heldout, errors="coerce")
    if not (np.isfinite(acc0) and np.isfinite(n) and n > 0):
        return UNSTABLE_DROP
    return max(UNSTABLE_DROP, UNSTABLE_SE * math.sqrt(max(acc0 * (1 - acc0), 0.0) / float(n)))


DIAGNOSTICS = {
    "stale/ess": r"ESS$/G$",
    "stale/mass_cap_frac": r"groups capped ($\bar W>1+\epsilon$)",
    "stale/clip_frac": r"trajectories clipped ($w>1+\epsilon$)",
    "stale/log_ratio_abs_mean": r"raw $|\log w|$ (mean)",
}
"""F8's diagnostics: metric column -> axis label."""


def _finite_all(s: pd.Series) -> bool:
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    return bool(np.isfinite(x).all())


def run_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: warm-start and final held-out accuracy, stability (``stable``; its parts
    ``nonfinite`` and ``acc_drop``, the accuracy drop of :data:`UNSTABLE_RULE`), mean diagnostics."""
    rows = []
    for run, g in df.groupby("run", sort=True):
        g = g.sort_values("step")
        ev = g.dropna(subset=["eval/heldout_acc"])
        upd = g[g["step"] < g["steps"].iloc[0]] if g["steps"].notna().all() else g.iloc[:-1]
        upd = upd if len(upd) else g
        nonfinite = not (_finite_all(upd.get("train/loss", pd.Series(dtype=float)))
                         and _finite_all(upd.get("train/grad_norm", pd.Series(dtype=float))))
        skipped = float(pd.to_numeric(upd.get("train/update_skipped", pd.Series([0.0])),
                                      errors="coerce").fillna(0).sum())
        acc0 = float(ev["eval/heldout_acc"].iloc[0]) if len(ev) else math.nan
        acc_end = float(ev["eval/heldout_acc"].iloc[-1]) if len(ev) else math.nan
        acc_drop = bool(acc_end < acc0 - drop_threshold(acc0, g["heldout_size"].iloc[0] if "heldout_size" in g
                                                        else None)) if len(ev) else False
        row = {k: g[k].iloc[0] for k in ("estimator", "mode", "delay", "seed", "eps", "steps", "complete")}
        row.update(run=run, acc0=acc0, acc_final=acc_end, last_step=int(g["step"].max()),
                   nonfinite=nonfinite or skipped > 0, acc_drop=acc_drop,
                   stable=not (nonfinite or skipped > 0 or acc_drop))
        for col in DIAGNOSTICS:
            row[col] = float(pd.to_numeric(upd[col], errors="coerce").mean()) if col in upd else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def mean_se(x) -> tuple[float, float, int]:
    """Mean, standard error (std / sqrt n, 0 for n = 1) and n of the finite values of ``x``."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0, n


def combine_seeds(df: pd.DataFrame, by: list[str], value: str, se: str) -> pd.DataFrame:
    """Average Monte Carlo estimates over seeds: mean of ``value``, se = sqrt(sum se^2) / n."""
    g = df.groupby(by, sort=True)
    out = g[value].mean().to_frame(value)
    out[se] = g[se].apply(lambda s: float(np.sqrt(np.nansum(np.asarray(s, float) ** 2)) / max(len(s), 1)))
    out["n_seeds"] = g[value].size()
    return out.reset_index()
