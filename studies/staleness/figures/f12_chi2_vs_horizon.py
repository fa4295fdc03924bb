"""F12: the trajectory and per-token chi^2 against the horizon H at a fixed delay (THEORY §5,
claim 18 at LLM scale: E_b w^2 = prod_h E_b rho_h^2, so log(1 + chi^2) grows linearly in H when
the token ratios are independent and alike).

From the horizon grid (``python -m studies.run --grid horizon``: GMC at delay 16 on the
scratchpad task with 2..7 operands, H = 3..18 tokens). Each run contributes the median over
its updates t >= d (the delay pipeline full: every batch d versions stale) of ``stale/chi2``
(mean w^2 - 1 over the batch, w the trajectory ratio under the behaviour policy) and of
``stale/chi2_token`` (the same per token, pooled over positions). Left: 1 + chi^2 of the
trajectory, measured (points: seeds; line: their mean) and the independence prediction
(1 + chi^2_token)^H of the same runs (dashed). Right: the per-token chi^2. Open markers: the
primary study's GMC runs at the same delay (short: the arithmetic task, completions of at
most 3 tokens, placed at H = 3; long: H = 18), when present. Log y-axes. Whether the prediction
holds is :func:`claims.horizon.independence_verdict`'s; this module reads and draws.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from claims.horizon import AGREE_FACTOR, agrees, independence_verdict
from figures import style
from grids.folders import STUDY, STUDY_HORIZON
from grids.run_table import PRIMARY, read_traces
from schema.results import source_note

NAME = "f12_chi2_vs_horizon"
TITLE = "F12. Trajectory and per-token chi-square against the horizon (delay 16)"
SOURCES = [STUDY_HORIZON]
COLUMNS = ("stale/chi2", "stale/chi2_token")


def run_medians(traces: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its H, delay, seed, the number of updates t >= delay and the medians over
    them of :data:`COLUMNS`, with the prediction ``pred = (1 + median chi2_token)^H - 1``."""
    rows = []
    for run, g in traces.groupby("run", sort=True):
        d = int(g["delay"].iloc[0])
        full = g[g["step"] >= d]
        row = {"run": run, "H": int(g["H"].iloc[0]), "horizon": g["horizon"].iloc[0],
               "estimator": g["estimator"].iloc[0],
               "delay": d, "seed": int(g["seed"].iloc[0]), "updates": len(full)}
        for c in COLUMNS:
            row[c] = float(np.nanmedian(full[c])) if full[c].notna().any() else np.nan
        row["pred"] = (1.0 + row["stale/chi2_token"]) ** row["H"] - 1.0
        rows.append(row)
    return pd.DataFrame(rows)


def load() -> pd.DataFrame:
    """Per-run medians of the horizon grid (``source = "horizon"``) and, when the study is
    there, of its GMC runs at the horizon grid's delay (``source = "study"``)."""
    root = STUDY_HORIZON.require()
    grid = run_medians(read_traces(root, COLUMNS, "horizon")).assign(source="horizon")
    frames, srcs = [grid], [str(root)]
    study = STUDY.find()
    if study is not None:
        tr = read_traces(study, COLUMNS, PRIMARY)
        tr = tr[(tr["estimator"] == "gmc") & tr["delay"].isin(grid["delay"].unique())]
        if len(tr):
            frames.append(run_medians(tr).assign(source="study"))
            srcs.append(str(study))
    df = pd.concat(frames, ignore_index=True)
    df.attrs["source"] = srcs
    return df


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per source and H: seeds, mean / min / max over seeds of the run medians, the predicted
    1 + chi^2 and the ratio measured / predicted (of 1 + chi^2, means over seeds)."""
    rows = []
    for (src, h, hl), g in df.groupby(["source", "H", "horizon"], sort=True):
        row = {"source": src, "H": int(h), "horizon": hl, "delay": int(g["delay"].iloc[0]), "n": len(g),
               "updates": int(g["updates"].min())}
        for c, k in (("stale/chi2", "chi2"), ("stale/chi2_token", "chi2_token"), ("pred", "pred")):
            row[k], row[k + "_min"], row[k + "_max"] = float(g[c].mean()), float(g[c].min()), float(g[c].max())
        row["ratio"] = (1 + row["chi2"]) / (1 + row["pred"])
        rows.append(row)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, ax=None):
    fig, (a, b) = style.panels(2, ax, width=4.0, height=3.3)
    tab = table(df)
    lk = style.line_kw("gmc")
    grid = tab[tab["source"] == "horizon"].sort_values("H")
    pts = df[df["source"] == "horizon"]
    a.scatter(pts["H"], 1 + pts["stale/chi2"], color=lk["color"], s=12, alpha=0.6, zorder=2)
    b.scatter(pts["H"], pts["stale/chi2_token"], color=lk["color"], s=12, alpha=0.6, zorder=2)
    ln, = a.plot(grid["H"], 1 + grid["chi2"], color=lk["color"], marker=lk["marker"], linewidth=lk["linewidth"],
                 label=r"measured $1+\chi^2$ (trajectory)")
    style.mark(ln, "chi2", "measured")
    ln, = a.plot(grid["H"], 1 + grid["pred"], color="0.2", label=r"independence: $(1+\chi^2_{\rm token})^H$",
                 **style.THEORY_KW)
    style.mark(ln, "chi2", "predicted")
    ln, = b.plot(grid["H"], grid["chi2_token"], color=lk["color"], marker=lk["marker"], linewidth=lk["linewidth"],
                 label=r"measured $\chi^2_{\rm token}$")
    style.mark(ln, "chi2_token", "measured")
    for r in tab[tab["source"] == "study"].itertuples():
        lab = f"primary study, {r.horizon} ($d = {r.delay}$, {r.n} seeds)"
        mk = "s" if r.horizon == "short" else "D"
        p, = a.plot([r.H], [1 + r.chi2], linestyle="none", marker=mk, markerfacecolor="white", color="0.1", label=lab)
        style.mark(p, "chi2", "study", r.horizon)
        p, = b.plot([r.H], [r.chi2_token], linestyle="none", marker=mk, markerfacecolor="white", color="0.1", label=lab)
        style.mark(p, "chi2_token", "study", r.horizon)
    for x in (a, b):
        x.set_yscale("log")
        x.set_xlabel(r"horizon $H$ (completion tokens)")
        x.set_xticks(sorted(grid["H"].unique()) if len(grid) else [])
    a.set_ylabel(r"$1+\chi^2$ of the trajectory ratio")
    b.set_ylabel(r"per-token $\chi^2$")
    d = int(grid["delay"].iloc[0]) if len(grid) else 0
    n = int(grid["n"].max()) if len(grid) else 0
    fig.suptitle(f"GMC, delay {d}: medians over updates $t \\geq d$, {n} seeds per $H$", fontsize=10)
    style.legend(fig, [a, b], ncol=2)
    return fig


def caption(df: pd.DataFrame) -> str:
    tab = table(df)
    v = independence_verdict(tab)
    g = tab[tab["source"] == "horizon"].sort_values("H")
    per_h = "; ".join(f"H = {r.H}: chi^2 {r.chi2:.3g} (seeds {r.chi2_min:.3g}..{r.chi2_max:.3g}), chi^2_token "
                      f"{r.chi2_token:.3g}, predicted {r.pred:.3g}" for r in g.itertuples())
    study = "; ".join(f"{r.horizon} (H = {r.H}, {r.n} seeds): chi^2 {r.chi2:.3g}, chi^2_token {r.chi2_token:.3g}"
                      for r in tab[tab["source"] == "study"].itertuples())
    ratios = ", ".join(f"{r:.2f}" for r in v["ratios"].values())
    word = "holds" if v["holds"] else "does not hold"
    ok = [h for h, r in v["ratios"].items() if agrees(r)]
    bad = [h for h in v["ratios"] if h not in ok]
    where = (f" (it holds at H = {', '.join(map(str, ok)) or 'none'}; measured "
             f"{'below' if all(v['ratios'][h] < 1 for h in bad) else 'off'} the prediction at H = "
             f"{', '.join(map(str, bad))})" if bad else "")
    return ("Theory (THEORY §5, claim 18): with independent token ratios, 1 + chi^2 of the trajectory is the product "
            "of the per-token factors, so log(1 + chi^2) grows linearly in H. Measured (seed means of per-run medians "
            f"over updates t >= d): {per_h}. The independence prediction {word} within a factor {AGREE_FACTOR:g} at "
            f"every H{where} (measured / predicted 1 + chi^2: {ratios}); the slope of log(1 + chi^2) in H is "
            f"{v['slope_measured']:.3g} per token measured and {v['slope_predicted']:.3g} predicted."
            + (f" Primary study at the same delay: {study}." if study else "") + " " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
