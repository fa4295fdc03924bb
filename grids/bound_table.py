"""The realised mass bias of the staleness study's runs against THEORY's bound on it: per horizon,
delay and trajectory scheme, how often the bound held and the ratio realised / bound
(:func:`bound_table`), with the bound as logged or recomputed from the raw columns in the one table's
forms (:func:`recomputed_bound`). Read by the staleness study's report section and its figure."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .run_table import PRIMARY, read_traces

BOUND_COLUMNS = ("stale/mass_bias", "stale/mass_bias_bound")
"""The realised mass bias and THEORY §3's bound on it, logged per update (:mod:`llm_runs.theory`)."""


def bound_ratio(realised, bound) -> np.ndarray:
    """realised / bound per update, 0/0 read as 0 (no bias, none allowed: the bound holds)."""
    r, b = np.asarray(realised, float), np.asarray(bound, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((r == 0) & (b == 0), 0.0, r / b)


RAW_BOUND_COLUMNS = ("stale/mass_bias", "stale/chi2", "stale/mu4")
"""The raw per-update columns a bound is recomputed from (:func:`recomputed_bound`)."""

BOUND_FORMS = ("logged", "tight", "theorem2")
"""``logged``: the column the trainer wrote (:data:`llm_runs.theory.BOUND_FORM`, Theorem 2's form);
``tight`` / ``theorem2``: recomputed from :data:`RAW_BOUND_COLUMNS` with :func:`bounds.mass_bound`."""


def recomputed_bound(tr: pd.DataFrame, form: str) -> np.ndarray:
    """Per row of ``tr`` (traces with :data:`RAW_BOUND_COLUMNS`, G and eps): the one table's bound
    (:func:`bounds.mass_bound`, ``form``) at the batch's plug-in chi^2 clamped at 0 and mu_4, by the
    trainer's own rule (:func:`llm_runs.theory.mass_bias_bound`: NaN where chi^2 is not finite, or
    a needed mu_4 is not finite and >= 0)."""
    from bounds import mass_bound, mass_bound_name
    from bounds.numeric import twin

    missing = [c for c in ("stale/chi2", "stale/mu4", "G", "eps", "estimator") if c not in tr]
    if missing:
        raise ValueError(f"recomputing the {form!r} bound needs the trace columns {', '.join(missing)}")
    out = np.full(len(tr), np.nan)
    chi2, mu4 = tr["stale/chi2"].to_numpy(float), tr["stale/mu4"].to_numpy(float)
    for (e, G, eps), idx in tr.groupby(["estimator", "G", "eps"], sort=False).indices.items():
        name = mass_bound_name(e, form)
        if name is None:
            continue
        ok = np.isfinite(chi2[idx])
        if "mu4" in twin(name).params:
            ok &= np.isfinite(mu4[idx]) & (mu4[idx] >= 0)
        sel = idx[ok]
        out[sel] = mass_bound(e, np.maximum(chi2[sel], 0.0), np.nan_to_num(mu4[sel]), int(G), float(eps), form=form)
    return out


def bound_table(runs_root: str | Path | pd.DataFrame, form: str = "logged") -> pd.DataFrame:
    """Per horizon, positive delay and trajectory scheme that logs both :data:`BOUND_COLUMNS`:
    the number of updates (both finite, over every complete run), the fraction where the realised
    mass bias is at most the bound, the median and maximum of realised / bound
    (:func:`bound_ratio`; above 1: the bound fails) and the fraction of updates whose bound is 0
    (the batch's plug-in chi^2 was <= 0 and is clamped, :func:`llm_runs.theory.mass_bias_bound`:
    there any positive realised bias counts as a failure, ratio inf). ``runs_root`` is the study
    folder or the frame :func:`read_traces` made of it. ``form`` (:data:`BOUND_FORMS`): the logged
    bound, or the one table's bound in that form recomputed from the raw columns (the same updates
    are counted: those where the logged bound is finite)."""
    if form not in BOUND_FORMS:
        raise ValueError(f"unknown bound form {form!r}; valid: {', '.join(BOUND_FORMS)}")
    cols = BOUND_COLUMNS + RAW_BOUND_COLUMNS[1:]
    tr = runs_root if isinstance(runs_root, pd.DataFrame) else read_traces(runs_root, cols, PRIMARY)
    real, bnd = BOUND_COLUMNS
    tr = tr[(tr["delay"] > 0) & np.isfinite(tr[real]) & np.isfinite(tr[bnd])]
    if form != "logged":
        tr = tr.assign(**{bnd: recomputed_bound(tr, form)})
        tr = tr[np.isfinite(tr[bnd])]
    rows = []
    for (h, d, e), g in tr.groupby(["horizon", "delay", "estimator"], sort=True):
        ratio = bound_ratio(g[real], g[bnd])
        rows.append({"horizon": h, "delay": int(d), "scheme": e, "runs": int(g["run"].nunique()), "updates": len(g),
                     "holds_frac": float(np.mean(g[real].to_numpy() <= g[bnd].to_numpy())),
                     "ratio_median": float(np.median(ratio)), "ratio_max": float(np.max(ratio)),
                     "bound_zero_frac": float(np.mean(g[bnd].to_numpy() == 0))})
    return pd.DataFrame(rows, columns=["horizon", "delay", "scheme", "runs", "updates", "holds_frac",
                                       "ratio_median", "ratio_max", "bound_zero_frac"])
