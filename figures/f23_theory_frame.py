"""F23: theory and experiment in one frame, per scheme and optimiser, built only from saved results.

For each (scheme, optimiser) the exact models' prediction sits beside the LLM's outcome:

* exact E2 (factorised, H = 16, d = 64; ``results/sim/async_optimizers``): final J, the share of
  runs that collapsed, the median trajectory chi^2, the realised bias ``avg ||b_t||^2`` and second
  moment ``avg ||g_hat_t||^2``;
* the shared-parameter model (``results/sim/shared_collapse``; SGD and Adam only): the share of
  runs that collapsed at each optimiser's largest step size, pooled over the shared cells;
* THEORY §8: the largest single weight ``c_max`` (G = 8, eps = 0.2; ``bounds.normalised``);
* the LLM at d = 64, long horizon (``results/llm/study`` and ``results/llm/mechanism`` through
  :func:`claims.theory_frame.llm_frame_runs`): stable runs, mean final held-out pc, the median over runs of the
  run's median plug-in chi^2 and of its mean |log ratio|.

The figure puts each exact model's share of runs that held (1 - collapse share) on x and the LLM's
stable share on y, one point per (scheme, optimiser): on the diagonal the theory transfers.
Which cells disagree is decided by :func:`claims.theory_frame.disagreeing_cells` (the report lists them
under "Disagreements and gaps"); this module reads the frame and draws it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from claims.theory_frame import COLLAPSES, HOLDS, LLM_STABLE, disagreeing_cells, llm_frame_runs
from schema.results import MissingResults, Sim, read_sim
from schema.sources import shown_path

from . import style

NAME = "f23_theory_frame"
TITLE = "F23. Theory and experiment in one frame: exact models' prediction beside the LLM, per scheme and optimiser"
E2 = Sim("async_optimizers")
SHARED = Sim("shared_collapse")
SOURCES = [E2, SHARED]
SCHEMES = ["gmc", "is", "tic_trunc", "tic_mask", "topr"]
OPTIMIZERS = ["sgd", "adam", "adam_clip", "adamw_clip"]
LLM_ARM = {"sgd": "sgd", "adam": "adam", "adam_clip": "adamclip", "adamw_clip": "adamwclip"}
OPT_TITLE = {"sgd": "SGD", "adam": "Adam", "adam_clip": "Adam + clip", "adamw_clip": "AdamW + clip"}
E2_H, E2_D, LLM_D = 16, 64, 64


def load() -> pd.DataFrame:
    """The frame table: one row per (scheme, optimiser) (module docstring)."""
    e2 = read_sim(E2)
    shared = read_sim(SHARED)
    try:
        runs, drift = llm_frame_runs()
    except (MissingResults, ValueError) as e:
        raise MissingResults(f"the LLM study or mechanism runs: {e}") from e
    from bounds.normalised import weight_max

    e2 = e2[(e2["H"] == E2_H) & (e2["d"] == E2_D)]
    sh = shared[shared["rank"] != "H"]
    rows = []
    for opt in OPTIMIZERS:
        for s in SCHEMES:
            r = {"scheme": s, "optimizer": opt, "c_max": weight_max(s, 8, 0.2)}
            c = e2[(e2["optimizer"] == opt) & (e2["scheme"] == s)]
            r.update(e2_n=len(c), e2_final_J=c["final_J"].mean(), e2_collapse=c["collapsed"].mean(),
                     e2_chi2=c["avg_sigma2"].median(), e2_bias_sq=c["avg_bias_sq"].mean(),
                     e2_ghat_sq=c["avg_ghat_sq"].mean())
            c = sh[(sh["optimizer"] == opt) & (sh["scheme"] == s)]
            c = c[c["lr"] == c["lr"].max()] if len(c) else c
            r.update(shared_n=len(c), shared_lr=c["lr"].max() if len(c) else np.nan,
                     shared_collapse=c["collapsed"].mean() if len(c) else np.nan)
            c = runs[(runs["arm"] == LLM_ARM[opt]) & (runs["estimator"] == s) & (runs["delay"] == LLM_D)
                     & runs["complete"]]
            dr = drift[(drift["arm"] == LLM_ARM[opt]) & (drift["estimator"] == s)] if len(drift) else drift
            r.update(llm_n=len(c), llm_stable=int(c["stable"].sum()), llm_pc=c["pc_final"].mean(),
                     llm_chi2=float(dr["stale/chi2"].iloc[0]) if len(dr) else np.nan,
                     llm_drift=float(dr["stale/log_ratio_abs_mean"].iloc[0]) if len(dr) else np.nan)
            rows.append(r)
    out = pd.DataFrame(rows)
    out.attrs["sources"] = [shown_path(E2.find()), shown_path(SHARED.find())]
    return out


def markdown(tab: pd.DataFrame) -> list[str]:
    """The frame as a markdown table."""
    head = ("| scheme | optimiser | c_max (§8) | E2: final J | E2: collapsed | E2: chi^2 | E2: avg b^2 | "
            "E2: avg g^2 | shared: collapsed (lr) | LLM: stable | LLM: final pc | LLM: chi^2 | LLM: mean abs log w |")
    lines = [head, "|" + "---|" * 13]
    for r in tab.itertuples():
        lines.append(
            f"| {style.label(r.scheme)} | {OPT_TITLE[r.optimizer]} | {r.c_max:g} | {r.e2_final_J:.3f} | "
            f"{r.e2_collapse:.0%} | {r.e2_chi2:.2f} | {r.e2_bias_sq:.2e} | {r.e2_ghat_sq:.2e} | "
            + (f"{r.shared_collapse:.0%} ({r.shared_lr:g})" if np.isfinite(r.shared_collapse) else "-")
            + f" | {r.llm_stable}/{r.llm_n} | {r.llm_pc:.3f} | {r.llm_chi2:.2f} | {r.llm_drift:.2f} |")
    return lines


def plot(tab: pd.DataFrame, ax=None):
    import matplotlib.pyplot as plt

    plt.rcParams.update(style.RC)
    if ax is not None:
        axes = list(np.asarray(ax, dtype=object).ravel())
        fig = axes[0].figure
    else:
        fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.4), sharey=True)
        axes = list(axes)
    offs = {o: k for k, o in enumerate(OPTIMIZERS)}
    for a, (col, title) in zip(axes, (("e2_collapse", f"exact E2 (factorised, H = {E2_H}, d = {E2_D})"),
                                      ("shared_collapse", "shared-parameter model (largest step size)"))):
        a.plot([0, 1], [0, 1], color="0.6", linewidth=0.8, zorder=0)
        for s in style.ordered(tab["scheme"].unique()):
            c = tab[(tab["scheme"] == s) & np.isfinite(tab[col]) & (tab["llm_n"] > 0)]
            if not len(c):
                continue
            lk = style.line_kw(s)
            jit = np.array([offs[o] for o in c["optimizer"]]) * 0.012
            x, y = 1 - c[col].to_numpy() + jit, (c["llm_stable"] / c["llm_n"]).to_numpy() + jit
            a.scatter(x, y, marker=lk["marker"], color=lk["color"], s=44, label=style.label(s))
            for xi, yi, o in zip(x, y, c["optimizer"]):
                a.annotate(OPT_TITLE[o], (xi, yi), fontsize=6, xytext=(3, 2), textcoords="offset points")
        a.set_xlim(-0.05, 1.12)
        a.set_ylim(-0.05, 1.12)
        a.set_title(title)
        a.set_xlabel("exact model: share of runs that held")
    axes[0].set_ylabel(f"LLM (d = {LLM_D}): share of seeds stable")
    style.legend(fig, axes, ncol=5)
    return fig


def _drift_note(tab: pd.DataFrame) -> str:
    g = tab[tab["scheme"] == "gmc"].set_index("optimizer")
    if not {"sgd", "adam"} <= set(g.index) or not np.isfinite(g.loc[["sgd", "adam"], "llm_drift"]).all():
        return ""
    return (f" The LLM's SGD arm drifted far less than its Adam arm (GMC's median mean |log w|: "
            f"{g.loc['sgd', 'llm_drift']:.2f} under SGD, {g.loc['adam', 'llm_drift']:.2f} under Adam), so its SGD "
            "stability was not measured at Adam's drift.")


def caption(tab: pd.DataFrame) -> str:
    dis = disagreeing_cells(tab)
    return (f"One point per (scheme, optimiser); on the diagonal the exact model's prediction transfers to the LLM. "
            f"{len(dis)} (scheme, optimiser, model) cells disagree (listed under Disagreements and gaps). An exact "
            f"model predicts 'holds' when at least {HOLDS:.0%} of its runs held, 'collapses' when at least "
            f"{COLLAPSES:.0%} collapsed; the LLM is stable in a cell when at least {LLM_STABLE:.0%} of its seeds are. "
            "The shared-parameter model was run under SGD and Adam only." + _drift_note(tab) + " Sources: "
            + ", ".join(f"`{p}`" for p in tab.attrs.get("sources", [])) + ", `results/llm/study`, "
            "`results/llm/mechanism`.")


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
