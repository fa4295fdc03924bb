"""The shared-parameter model's search (``results/sim/shared_collapse``, made by
``python -m simulators.sweep shared_collapse``), read: where the LLM's collapse pattern appears."""
from __future__ import annotations

import numpy as np
import pandas as pd


def pattern_table(df: pd.DataFrame, share: float = 0.5, hold: float = 0.1) -> pd.DataFrame:
    """Per (H, V, rank, d, Adam lr): the collapse shares, and whether the LLM's pattern holds there:
    IS and GMC collapse in at least ``share`` of the seeds under Adam, TOPR in at most ``hold``, and
    at some SGD step size GMC collapses in at most ``hold`` with a median drift at least Adam-GMC's."""
    keys = ["H", "V", "rank", "d"]
    out = []
    for k, cell in df.groupby(keys, sort=True):
        sgd = cell[cell["optimizer"] == "sgd"]
        for lr, ad in cell[cell["optimizer"] == "adam"].groupby("lr"):
            shares = ad.groupby("scheme")["collapsed"].mean()
            drift_gmc = float(ad[ad["scheme"] == "gmc"]["avg_drift"].median())
            g_sgd = sgd[sgd["scheme"] == "gmc"].groupby("lr").agg(share=("collapsed", "mean"),
                                                                     drift=("avg_drift", "median"))
            ok_sgd = g_sgd[(g_sgd["share"] <= hold) & (g_sgd["drift"] >= drift_gmc)]
            r = dict(zip(keys, k))
            coll = {f"collapse_{s}": float(shares.get(s, np.nan)) for s in sorted(df["scheme"].unique())}
            r.update({"adam_lr": float(lr), **coll,
                      "adam_gmc_drift": drift_gmc,
                      "sgd_gmc_hold_lrs": ",".join(f"{x:g}" for x in ok_sgd.index),
                      "sgd_gmc_best_share": float(g_sgd["share"].min()) if len(g_sgd) else np.nan})
            r["adam_part"] = bool(shares.get("is", 0) >= share and shares.get("gmc", 0) >= share
                                  and shares.get("topr", 1) <= hold)
            r["pattern"] = bool(r["adam_part"] and len(ok_sgd) > 0)
            out.append(r)
    return pd.DataFrame(out)


def chi2_levels(df: pd.DataFrame) -> pd.DataFrame:
    """The exact model's stable share on the trajectory chi^2 axis: per (optimizer, scheme, lr), pooled
    over the searched settings (H, V, rank, d) and seeds, the number of runs, the share that did not
    collapse and the median over runs of the run's mean chi^2. A step size is one level of drift, as a
    learning rate is in the LLM's drift map."""
    g = df.groupby(["optimizer", "scheme", "lr"], sort=True)
    out = g.agg(n=("collapsed", "size"), collapsed=("collapsed", "mean"), chi2=("avg_chi2", "median")).reset_index()
    out["stable_share"] = 1.0 - out.pop("collapsed").astype(float)
    return out[["optimizer", "scheme", "lr", "n", "stable_share", "chi2"]]


__all__ = ["chi2_levels", "pattern_table"]
