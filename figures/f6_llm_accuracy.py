"""F6: LLM track, held-out accuracy against training steps; one panel per delay, one line per
estimator (mean over seeds, band +-1 standard error over seeds).

Reads every run folder of the LLM sweep (``config.json`` + metrics); ``eval/heldout_acc`` is
greedy accuracy on the held-out split, evaluated every ``eval_every`` updates.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from schema.results import LLM, mean_se, read_llm_runs, run_summary, source_note

from . import style

NAME = "f6_llm_accuracy"
TITLE = "F6. LLM track: held-out accuracy during training"
SOURCES = [LLM]


def load() -> pd.DataFrame:
    return read_llm_runs()


def series(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(estimator, mode) pairs present, controlled first, in the style order."""
    pairs = set(zip(df["estimator"], df["mode"]))
    modes = sorted({m for _, m in pairs}, key=lambda m: (m != "controlled", m))
    return [(e, m) for m in modes for e in style.ordered(e for e, mm in pairs if mm == m)]


def curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per (delay, estimator, mode, step): mean, se and n over seeds of the held-out accuracy."""
    ev = df.dropna(subset=["eval/heldout_acc"])
    rows = []
    for key, g in ev.groupby(["delay", "estimator", "mode", "step"], sort=True):
        m, se, n = mean_se(g["eval/heldout_acc"])
        rows.append(dict(zip(("delay", "estimator", "mode", "step"), key), acc=m, se=se, n=n))
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, ax=None):
    delays = sorted(df["delay"].unique())
    fig, axes = style.panels(len(delays), ax, width=2.8, height=2.7, sharey=True)
    cv = curves(df)
    for a, dl in zip(axes, delays):
        for est, mode in series(df):
            g = cv[(cv["delay"] == dl) & (cv["estimator"] == est) & (cv["mode"] == mode)]
            if not len(g):
                continue
            kw = {**style.line_kw(est, mode), "marker": None}
            style.mark(a.plot(g["step"], g["acc"], label=style.label(est, mode), **kw), f"d{dl}", est, mode)
            a.fill_between(g["step"], g["acc"] - g["se"], g["acc"] + g["se"], color=kw["color"], alpha=0.13, lw=0)
        a.set_title(f"delay $d={dl:g}$")
        a.set_xlabel(r"update $t$")
    axes[0].set_ylabel("held-out accuracy")
    style.legend(fig, axes, ncol=5)
    return fig


def caption(df: pd.DataFrame) -> str:
    sm = run_summary(df)
    n_runs, n_done = len(sm), int(sm["complete"].sum())
    seeds = int(sm.groupby(["estimator", "mode", "delay"])["seed"].nunique().max())
    acc0 = mean_se(sm["acc0"])
    dmax = sm["delay"].max()
    last = sm[(sm["delay"] == dmax) & sm["complete"]]
    best = last.groupby(["estimator", "mode"])["acc_final"].mean().sort_values(ascending=False)
    tops = ", ".join(f"{style.label(e, m)} {v:.3f}" for (e, m), v in best.items())
    steps = int(np.nanmax(sm["steps"])) if sm["steps"].notna().any() else int(sm["last_step"].max())
    return ("Theory makes no prediction for the LLM curves themselves; the paper reports that GMC-GRPO is the most "
            "robust of the stable baselines at large delay. Measured: "
            f"{n_runs} runs ({n_done} complete, up to {seeds} seeds per cell, {steps} updates); warm-start held-out "
            f"accuracy {acc0[0]:.3f} (mean over runs); final held-out accuracy at the largest delay d = {dmax:g} "
            f"(seed mean, best first): {tops or 'no complete run'}. Lines are seed means; bands are +-1 standard "
            "error over seeds (absent with one seed). " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
