"""What the results files say, computed once: the numbers behind the abstract's verdicts
(:mod:`claims.abstract`) and the figures' captions.

Each function takes the DataFrame read by :mod:`schema.results`. Theory exponents are read
from the claims table (``results/verify/claims.json``, made by ``python -m claims``), never
typed in.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import sympy as sp

from bounds.exponents import loglog_slope
from schema.results import (
    MissingResults,
    Sim,
    mean_se,
    read_claims,
    read_sim,
    run_summary,
)

SECOND_MOMENT_SOURCES = [Sim("second_moment_vs_delay"), Sim("second_moment_vs_delay_e2")]
ASYNC_SOURCE = Sim("async_sgd")
ENV_TITLE = {"bandit": "E1 softmax bandit", "token_mdp": "E2 token tree MDP"}


def claim_row(cid: int) -> dict:
    """Claim ``cid``'s row of ``results/verify/claims.json``."""
    rows = {r["id"]: r for r in read_claims()}
    if cid not in rows:
        raise MissingResults(f"claim {cid} is not in results/verify/claims.json; make it with `python -m claims`")
    return rows[cid]


def _claim_measured(cid: int) -> dict:
    return claim_row(cid)["measured"]


def _num(x) -> float:
    return float(sp.Rational(str(x)))


def sq_bias_exponents() -> dict:
    """Exponent of eps in each scheme's squared bias as eps -> 0, from claim 10's measured row."""
    m = _claim_measured(10)
    return {"tic_mask": _num(m["squared"]["mask"]), "tic_trunc": _num(m["squared"]["trunc"]),
            "gmc": 2 * _num(m["slope"]["gmc"])}


def tuned_exponents() -> dict:
    """Corollary 3's exponents of G and eps in the tuned delay part, from claim 12's measured row
    (TIC-trunc has GMC's eps exponent and TIC-mask's G exponent: its delay term is K eps^-2 d^4 eta^4)."""
    m = _claim_measured(12)
    G, e = m["G"], m["epsilon"]
    return {"G": {"gmc": _num(G["gmc"]), "tic_mask": _num(G["tic_mask"]), "tic_trunc": _num(G["tic_mask"])},
            "eps": {"gmc": _num(e["gmc"]), "tic_mask": _num(e["tic_mask"]), "tic_trunc": _num(e["gmc"])}}


# ------------------------------------------------------------------ E1 bias against G (F1; claims 7, 8)


def bias_vs_G_summary(df: pd.DataFrame) -> dict:
    """Per instance: GMC's exact bias at the smallest and largest G, TIC's relative spread."""
    out = {}
    for inst, d in df.groupby("instance"):
        ex = d.groupby(["scheme", "G"])["bias_norm_exact"].first()
        Gs = sorted(d["G"].unique())
        gmc = ex.loc["gmc"] if "gmc" in ex.index.get_level_values(0) else None
        row = {"G_min": int(Gs[0]), "G_max": int(Gs[-1])}
        if gmc is not None:
            row.update(gmc_first=float(gmc.loc[Gs[0]]), gmc_last=float(gmc.loc[Gs[-1]]),
                       gmc_monotone=bool(np.all(np.diff(gmc.loc[Gs].to_numpy()) <= 1e-15)))
        for s in ("tic_mask", "tic_trunc"):
            if s in ex.index.get_level_values(0):
                v = ex.loc[s].to_numpy()
                row[s] = float(v.mean())
                row[s + "_spread"] = float((v.max() - v.min()) / v.mean()) if v.mean() > 0 else 0.0
        if "is" in ex.index.get_level_values(0):
            row["is_max"] = float(ex.loc["is"].abs().max())
        out[inst] = row
    return out


# ------------------------------------------------------------------ squared bias against eps (F2; claims 10, 11)

SQBIAS_SCHEMES = ["gmc", "tic_mask", "tic_trunc"]
FIT_SIGMAS = 3.0
FIT_MAX_EPS = 0.5
"""The slopes are asymptotic (sigma << eps << 1): fitted over FIT_SIGMAS sigma <= eps <= FIT_MAX_EPS."""


def worst_case(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["worst_case_law"].astype(bool) & df["scheme"].isin(SQBIAS_SCHEMES)].groupby(
        ["scheme", "law", "eps"], sort=True)[["sq_bias_exact", "bound_sq", "law_sigma2"]].first().reset_index()


def fit_range(d: pd.DataFrame) -> np.ndarray:
    sigma = float(np.sqrt(d["law_sigma2"].max()))
    return (d["eps"] >= FIT_SIGMAS * sigma) & (d["eps"] <= FIT_MAX_EPS)


def sqbias_slopes(df: pd.DataFrame) -> dict:
    """Measured log-log slope of the squared bias on each scheme's extremal law, over the fit range."""
    out = {}
    for s, d in worst_case(df).groupby("scheme"):
        r = fit_range(d)
        out[s] = {"slope": loglog_slope(d.loc[r, "eps"], d.loc[r, "sq_bias_exact"]),
                  "theory": sq_bias_exponents().get(s, np.nan),
                  "eps_lo": float(d.loc[r, "eps"].min()) if r.any() else np.nan,
                  "eps_hi": float(d.loc[r, "eps"].max()) if r.any() else np.nan, "n": int(r.sum()),
                  "law": d["law"].iloc[0]}
    return out


# ------------------------------------------------------------------ tuned delay term (F3; claim 12)

TUNED_EPS = 0.2
TUNED_G = 64
EPS_ASYMPTOTIC = 0.01
"""The eps exponents are limits as eps -> 0 (K carries (1+eps)^4): fitted over eps <= this."""


def _nearest(values, target):
    values = np.asarray(sorted(set(values)), dtype=float)
    return float(values[np.argmin(np.abs(np.log(values) - np.log(target)))])


def tuned_slices(df: pd.DataFrame) -> dict:
    """{"G": rows at eps = TUNED_EPS (nearest), "eps": rows at G = TUNED_G (nearest)}."""
    e, g = _nearest(df["eps"], TUNED_EPS), _nearest(df["G"], TUNED_G)
    return {"G": df[np.isclose(df["eps"], e)], "eps": df[np.isclose(df["G"], g)], "eps_value": e, "G_value": g}


def tuned_slopes(df: pd.DataFrame) -> dict:
    sl = tuned_slices(df)
    sl["eps"] = sl["eps"][sl["eps"]["eps"] <= EPS_ASYMPTOTIC]
    return {v: {s: {"tuned": loglog_slope(d[v], d["tuned_delay_term"]), "closed": loglog_slope(d[v], d["closed_form"]),
                    "theory": tuned_exponents()[v].get(s, np.nan)} for s, d in sl[v].groupby("scheme")}
            for v in ("G", "eps")}


# ------------------------------------------------------------------ second moment against delay (F4; claims 2, 16)

CLASS = ["stale", "tic_mask", "tic_trunc", "gmc", "snis"]
"""Members of C_eps (THEORY §2) among the schemes drawn: ``estimators.scheme_names(family="theory",
in_class=True)``, written out because the claims and figures layers import no torch (which the
registry does); a test holds the two equal."""


def load_second_moment() -> pd.DataFrame:
    frames = [read_sim(s) for s in SECOND_MOMENT_SOURCES]
    df = pd.concat(frames, ignore_index=True)
    df.attrs["source"] = [f.attrs["source"] for f in frames]
    df.attrs["quick"] = any(f.attrs["quick"] for f in frames)
    return df


def second_moment_summary(df: pd.DataFrame) -> dict:
    """Per env: the largest ratio of a class member's exact second moment to the class bound, and IS's growth."""
    out = {}
    for env, d in df.groupby("env"):
        c = d[d["scheme"].isin(CLASS)]
        ratio = c["second_moment_exact"] / c["class_second_moment_bound"]
        i = ratio.idxmax()
        isd = d[d["scheme"] == "is"].groupby("Delta", sort=True)["second_moment_exact"].first()
        bound = float(d["class_second_moment_bound"].max())
        out[env] = {"class_max_ratio": float(ratio.max()),
                    "class_argmax": (c.loc[i, "scheme"], float(c.loc[i, "Delta"])),
                    "is_first": float(isd.iloc[0]) if len(isd) else np.nan,
                    "is_last": float(isd.iloc[-1]) if len(isd) else np.nan,
                    "Delta_max": float(d["Delta"].max()), "bound": bound,
                    "is_over_bound": float(isd.iloc[-1] / bound) if len(isd) else np.nan}
    return out


# ------------------------------------------------------------------ published peers: the bias-variance frontier (F9)

PEERS_SOURCE = Sim("peers")
PEERS_2026_SOURCE = Sim("peers_2026")
"""The 2026 corrections' points (p3o, ctpo, minpro, trm_k2, trm_k3, dispo, oapl), measured by their own sweep
with the peers sweep's settings, so that the committed peers table is not rewritten."""


def load_peers(with_2026: bool = True) -> pd.DataFrame:
    """The peers table with a ``key`` per point: the scheme, or ``"scheme (B=8)"`` for a batch of B groups; with
    ``with_2026`` the 2026 corrections' rows too (:data:`PEERS_2026_SOURCE`, where committed), each row's sweep
    named in ``sweep``."""
    df = read_sim(PEERS_SOURCE).assign(sweep="peers")
    if with_2026 and PEERS_2026_SOURCE.find() is not None:
        df = pd.concat([df, read_sim(PEERS_2026_SOURCE).assign(sweep="peers_2026")], ignore_index=True)
    df = df.copy()
    df["key"] = np.where(df["batch_groups"] > 1, df["scheme"] + " (B=" + df["batch_groups"].astype(str) + ")",
                         df["scheme"])
    return df


def frontier(d: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``d`` not dominated in (second_moment, bias_norm); sorted by second moment."""
    x, y = d["second_moment"].to_numpy(), d["bias_norm"].to_numpy()
    keep = [not np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))) for i in range(len(d))]
    return d[np.array(keep, bool)].sort_values("second_moment")


def dominators(d: pd.DataFrame, key: str) -> list[str]:
    """Estimators with both a smaller-or-equal bias and second moment than ``key`` (one strictly)."""
    r = d[d["key"] == key].iloc[0]
    x, y = d["second_moment"], d["bias_norm"]
    dom = d[(x <= r["second_moment"]) & (y <= r["bias_norm"])
            & ((x < r["second_moment"]) | (y < r["bias_norm"]))]
    return list(dom["key"])


def peers_summary(df: pd.DataFrame) -> dict:
    """Per environment at the largest delay: the frontier, whether GMC is on it, who dominates GMC."""
    out = {}
    for env, d in df.groupby("env"):
        D = float(d["Delta"].max())
        dd = d[d["Delta"] == D]
        f = frontier(dd)
        cls = dd[(dd["level"] == "trajectory") & dd["in_class"].astype(bool)]
        dominated_at = {float(Dk): dominators(dk, "gmc") for Dk, dk in d.groupby("Delta")
                        if 0 < Dk != D and dominators(dk, "gmc")}  # on-policy every scheme is IS
        out[env] = {"Delta": D, "frontier": list(f["key"]), "gmc_on_frontier": "gmc" in set(f["key"]),
                    "always_zero": list(f[f["second_moment"] == 0]["key"]), "gmc_dominated_at": dominated_at,
                    "gmc_dominated_by": dominators(dd, "gmc"),
                    "class_frontier": list(frontier(cls)["key"]),
                    "gmc_on_class_frontier": "gmc" in set(frontier(cls)["key"]),
                    "gmc": dd[dd["key"] == "gmc"][["bias_norm", "second_moment"]].iloc[0].to_dict()}
    return out


# ------------------------------------------------------------------ asynchronous SGD (F5; claim 17)


def load_async() -> pd.DataFrame:
    """Per-run rows (``kind = "run"``, results.parquet) and per-step rows (``kind = "step"``) in one table."""
    runs = read_sim(ASYNC_SOURCE)
    steps = read_sim(ASYNC_SOURCE, steps=True)
    df = pd.concat([runs.assign(kind="run"), steps.assign(kind="step")], ignore_index=True)
    df.attrs.update(runs.attrs)
    return df


def theorem_check(df: pd.DataFrame) -> dict:
    """Over every setting of the file: runs whose mean squared bias is <= D (where D is defined),
    and runs with a step whose bias exceeds THEORY §3's bound at that step (``step_bound_violations``
    is -1 for schemes without a §3 bound, e.g. SNIS: counted apart as ``n_no_bound``)."""
    runs = df[df["kind"] == "run"]
    ok = runs["bias_le_D"].dropna().astype(bool)
    return {"n_le_D": int(ok.sum()), "n_checked": len(ok), "n_runs": len(runs),
            "n_step_violations": int((runs["step_bound_violations"].fillna(0) > 0).sum()),
            "n_no_bound": int((runs["step_bound_violations"].fillna(0) < 0).sum()),
            "settings": int(runs.groupby(["env", "eps"]).ngroups)}


# ------------------------------------------------------------------ LLM track (F7)


def llm_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, mode, delay): mean, se, n of the final accuracy (complete runs), stable count."""
    sm = run_summary(df)
    sm = sm[sm["complete"]]
    rows = []
    for (e, m, d), g in sm.groupby(["estimator", "mode", "delay"], sort=True):
        mean, se, n = mean_se(g["acc_final"])
        rows.append({"estimator": e, "mode": m, "delay": d, "acc": mean, "se": se, "n": n,
                     "n_stable": int(g["stable"].sum()), "acc0": float(g["acc0"].mean())})
    return pd.DataFrame(rows)


def verdict_at(tab: pd.DataFrame, delay, mode: str = "controlled") -> dict:
    """At ``delay``, among the runs of ``mode``: the estimators whose every run was stable, ranked by
    mean final accuracy, and GMC's gap to the best other stable estimator in units of the combined
    standard error (``min_n``: the fewest seeds of the two; with one seed there is no error)."""
    t = tab[(tab["delay"] == delay) & (tab["n"] > 0) & (tab["mode"] == mode)].copy()
    t["all_stable"] = t["n_stable"] == t["n"]
    stable = t[t["all_stable"]].sort_values("acc", ascending=False)
    out = {"delay": delay, "ranking": [(r.estimator, r.mode, r.acc, r.se, r.n) for r in stable.itertuples()],
           "unstable": [(r.estimator, r.mode, r.n - r.n_stable, r.n) for r in t[~t["all_stable"]].itertuples()]}
    g = stable[stable["estimator"] == "gmc"]
    others = stable[stable["estimator"] != "gmc"]
    out["gmc_stable"] = bool(len(g))
    out["gmc_present"] = bool(len(t[t["estimator"] == "gmc"]))
    if len(g) and len(others):
        b = others.iloc[0]
        gap = float(g["acc"].iloc[0] - b["acc"])
        se = float(np.hypot(g["se"].iloc[0], b["se"]))
        out.update(gmc_rank=int(list(stable.index).index(g.index[0]) + 1), n_stable=len(stable),
                   best_other=(b["estimator"], b["mode"]), gap=gap, gap_se=se, min_n=int(min(g["n"].iloc[0], b["n"])),
                   gap_z=gap / se if se > 0 else (np.inf if gap > 0 else -np.inf if gap < 0 else 0.0))
    return out
