"""The asynchronous simulator part: H = 16, d in {0, 64}, SGD, Adam, Adam + clip and AdamW + clip.

The committed ``async_optimizers`` sweep (:mod:`simulators.optimizer_sweeps`, claim 19) holds GMC,
TIC-trunc and TOPR (and the theory's other schemes). A correction it holds is read from
``results/sim/async_optimizers``; any other trajectory scheme is run with
:func:`simulators.optimizer_sweeps.run_setting` at the committed H = 16 setting itself (every
delay of it, 0, 4, 16 and 64, and its 20 seeds: the clipped optimisers clip at a quantile of the
setting's own unclipped Adam norms over every delay, and seed s has the same generators under
every scheme, so the new runs are paired with the committed ones). The card shows d = 0 and 64.
Paired differences in final J: :func:`claims.optimizers.paired_interval` (t-interval, 95%).
"""
from __future__ import annotations

import json

import pandas as pd

from .load import Correction

H = 16
DELAYS = (0, 64)
PEERS = ("gmc", "tic_trunc", "topr")
OPTIMIZERS = ("sgd", "adam", "adam_clip", "adamw_clip")


def committed() -> tuple[pd.DataFrame, dict, list[int]]:
    """The committed sweep's rows, its H = 16 setting (less the scheme) and its seeds."""
    from schema.results import Sim, read_sim, results_root

    df = read_sim(Sim("async_optimizers"))
    cfg = json.loads((results_root() / "sim" / "async_optimizers" / "config.json").read_text())
    setting = next(s for s in cfg["settings"] if s["H"] == H)
    setting = {k: v for k, v in setting.items() if k != "scheme"}
    return df, setting, list(cfg["seeds"])


def run(corr: Correction, cache=None, seeds: list[int] | None = None) -> dict:
    """The part's table and comparisons (``applies`` False for a token-level loss). ``seeds``: a subset
    of the committed seeds for a new correction's runs (a test's; the card says which ran)."""
    if corr.level != "trajectory":
        return {"applies": False, "why": "the asynchronous simulator (simulators.async_factorised) weights "
                                         "trajectories with a registered scheme; a token-level loss has no form there"}
    df, setting, all_seeds = committed()
    seeds = list(all_seeds) if seeds is None else [s for s in seeds if s in all_seeds]
    df = df[df["H"] == H]
    if corr.name in set(df["scheme"]) and not corr.is_new:
        mine, source = df[df["scheme"] == corr.name], "results/sim/async_optimizers (committed)"
        seeds = list(all_seeds)
    else:
        from simulators.optimizer_sweeps import run_setting

        key = {"setting": {**setting, "scheme": corr.name}, "seeds": seeds, "digest": corr.digest}
        mine = cache.get("async", key) if cache is not None else None
        if mine is None:
            mine, _ = run_setting({**setting, "scheme": corr.name}, seeds)
            mine = mine.assign(H=H)
            if cache is not None:
                cache.put("async", key, mine)
        source = ("computed for this card (simulators.optimizer_sweeps.run_setting, the committed H = 16 setting"
                  + (")" if seeds == list(all_seeds) else f", seeds {seeds} only: a smaller setting than the "
                     "committed one, whose clip quantile is taken over these seeds' Adam norms)"))
    return {"applies": True, "source": source, "seeds": seeds, "setting": setting,
            "table": table(mine, df, corr.name), "differences": differences(mine, df, corr.name)}


def table(mine: pd.DataFrame, df: pd.DataFrame, name: str) -> list[dict]:
    rows = []
    both = pd.concat([mine.assign(scheme=name), df[df["scheme"].isin([p for p in PEERS if p != name])]])
    for opt in OPTIMIZERS:
        for d in DELAYS:
            for s in [name, *[p for p in PEERS if p != name]]:
                g = both[(both["optimizer"] == opt) & (both["d"] == d) & (both["scheme"] == s)]
                if not len(g):
                    continue
                rows.append({"optimizer": opt, "d": d, "scheme": s, "n": len(g),
                             "final_J": float(g["final_J"].mean()), "collapsed": int(g["collapsed"].sum()),
                             "avg_grad_sq": float(g["avg_grad_sq"].mean()), "J0": float(g["J0"].iloc[0])})
    return rows


def differences(mine: pd.DataFrame, df: pd.DataFrame, name: str) -> list[dict]:
    from claims.optimizers import paired_interval

    out = []
    for opt in OPTIMIZERS:
        for d in DELAYS:
            a = mine[(mine["optimizer"] == opt) & (mine["d"] == d)].set_index("seed")["final_J"]
            for p in PEERS:
                if p == name:
                    continue
                b = df[(df["scheme"] == p) & (df["optimizer"] == opt) & (df["d"] == d)].set_index("seed")["final_J"]
                common = a.index.intersection(b.index)
                m, lo, hi, n = paired_interval(a[common].to_numpy(), b[common].to_numpy())
                out.append({"optimizer": opt, "d": d, "vs": p, "mean": m, "low": lo, "high": hi, "n": n})
    return out
