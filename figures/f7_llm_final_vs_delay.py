"""F7: LLM track headline, final held-out accuracy against delay per estimator (the paper's
robustness claim), with every run marked stable (filled dot) or unstable (cross).

Lines with error bars: the mean over seeds of the final held-out accuracy and +-1 standard
error over seeds (complete runs only). The unstable rule is :data:`schema.results.UNSTABLE_RULE`.
Dotted grey: the mean warm-start (step 0) accuracy.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from claims.measures import llm_table as table
from claims.measures import verdict_at
from schema.results import (
    LLM,
    UNSTABLE_RULE,
    read_llm_runs,
    run_summary,
    source_note,
)

from . import style
from .f6_llm_accuracy import series

NAME = "f7_llm_final_vs_delay"
TITLE = "F7. LLM track: final held-out accuracy against the rollout delay"
SOURCES = [LLM]
DODGE = 0.06  # horizontal offset between estimators, in axis positions


def load() -> pd.DataFrame:
    return read_llm_runs()


def plot(df: pd.DataFrame, ax=None):
    fig, (a,) = style.panels(1, ax, width=5.2, height=3.4)
    sm = run_summary(df)
    sm = sm[sm["complete"]]
    tab = table(df)
    delays = sorted(sm["delay"].unique())
    pos = {d: i for i, d in enumerate(delays)}
    ser = series(sm)
    for k, (est, mode) in enumerate(ser):
        off = (k - (len(ser) - 1) / 2) * DODGE
        t = tab[(tab["estimator"] == est) & (tab["mode"] == mode)].sort_values("delay")
        x = np.array([pos[d] for d in t["delay"]]) + off
        lk = style.line_kw(est, mode)
        eb = a.errorbar(x, t["acc"], yerr=t["se"], color=lk["color"], marker=None, linestyle=lk["linestyle"],
                        linewidth=lk["linewidth"], zorder=lk["zorder"], label=style.label(est, mode))
        style.mark(eb, est, mode)
        r = sm[(sm["estimator"] == est) & (sm["mode"] == mode)]
        xs = np.array([pos[d] for d in r["delay"]]) + off
        st = r["stable"].to_numpy(bool)
        a.scatter(xs[st], r["acc_final"][st], color=lk["color"], marker=lk["marker"], s=16, zorder=lk["zorder"] + 1,
                  edgecolor="white", linewidth=0.4)
        a.scatter(xs[~st], r["acc_final"][~st], color=lk["color"], marker="x", s=30, zorder=lk["zorder"] + 1,
                  linewidth=1.4)
    if len(sm):
        a.axhline(float(sm["acc0"].mean()), color="0.5", linestyle=":", linewidth=1.0, label="warm start (mean)")
    a.scatter([], [], color="0.3", marker="o", s=16, label="run: stable")
    a.scatter([], [], color="0.3", marker="x", s=30, label="run: unstable")
    a.set_xticks(range(len(delays)), [f"{d:g}" for d in delays])
    a.set_xlabel(r"rollout delay $d$ (policy versions)")
    a.set_ylabel("final held-out accuracy")
    style.legend(fig, [a], ncol=4)
    return fig


def caption(df: pd.DataFrame) -> str:
    tab = table(df)
    sm = run_summary(df)
    sm = sm[sm["complete"]]
    if not len(tab):
        return "No complete LLM run yet. " + source_note(df)
    dmax = tab["delay"].max()
    parts = []
    for mode in sorted(set(tab["mode"]), key=lambda m: (m != "controlled", m)):
        v = verdict_at(tab, dmax, mode)
        rank = "; ".join(f"{style.label(e, m)} {a:.3f} +- {s:.3f} (n={n})" for e, m, a, s, n in v["ranking"])
        uns = "; ".join(f"{style.label(e, m)} {k}/{n} unstable" for e, m, k, n in v["unstable"]) or "none"
        parts.append(f"{mode} runs, stable estimators ranked by mean final held-out accuracy: {rank or 'none'}; "
                     f"estimators with an unstable run: {uns}")
    n_uns = int((~sm["stable"]).sum())
    return ("Paper's claim (abstract): under large rollout delays GMC-GRPO achieves the best performance among the "
            f"stable baselines. Measured at the largest delay d = {dmax:g} (async runs: maximum staleness d): "
            + ". ".join(parts) + f". Overall {n_uns} of "
            f"{len(sm)} complete runs are unstable ({UNSTABLE_RULE}). Error bars are +-1 standard error over seeds; "
            "each dot is one run (cross: unstable). " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
