# ruff: noqa: N999  (module names follow the figure names F1, F2, ...)
"""F1: bias of each estimator against the group size G (E1 softmax bandit; claims 7, 8).

Lines: the exact bias ``||E g_hat(c) - grad J||`` by enumeration of count vectors. Points:
Monte Carlo estimates with +-1 standard-error bars (the sweep's stored ``*_se``, combined
over seeds as sqrt(sum se^2)/n). Dashed: THEORY §3's GMC rate ``M sigma^2 / (4 G eps)``.
One panel per E1 instance.
"""
from __future__ import annotations

import pandas as pd

from claims.measures import bias_vs_G_summary as summary
from schema.results import Sim, combine_seeds, read_sim, source_note

from . import style

NAME = "f1_bias_vs_G"
TITLE = "F1. Bias against the group size $G$ (E1, exact and Monte Carlo)"
SOURCES = [Sim("bias_vs_G")]
SCHEMES = ["gmc", "tic_mask", "tic_trunc", "is"]
LINTHRESH = 1e-4  # symlog: below this the axis is linear, so IS's exact 0 is drawn


def load() -> pd.DataFrame:
    return read_sim(SOURCES[0])


def mc_points(df: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, scheme, G): the Monte Carlo bias combined over seeds.

    ``bias_proj_mc``: the MC bias projected on the exact bias direction, an unbiased estimate
    of the exact norm (it can be negative). Where the exact bias is 0 (IS) there is no
    direction and no point: the norm of a noisy mean is positive by noise alone.
    """
    d = df.dropna(subset=["bias_proj_mc"]).rename(columns={"bias_proj_mc": "mc", "bias_proj_mc_se": "mc_se"})
    return combine_seeds(d, ["instance", "scheme", "G"], "mc", "mc_se")


def plot(df: pd.DataFrame, ax=None):
    instances = sorted(df["instance"].unique())
    fig, axes = style.panels(len(instances), ax)
    pts = mc_points(df)
    for a, inst in zip(axes, instances):
        d = df[df["instance"] == inst]
        low = 0.0
        for s in style.ordered(x for x in SCHEMES if x in set(d["scheme"])):
            e = d[d["scheme"] == s].groupby("G", sort=True)["bias_norm_exact"].first()
            style.mark(a.plot(e.index, e.values, label=style.label(s), **style.line_kw(s)), inst, s, "exact")
            p = pts[(pts["instance"] == inst) & (pts["scheme"] == s)]
            if len(p):
                style.mark(style.errorbars(a, p["G"], p["mc"], p["mc_se"], s), inst, s, "mc")
                low = min(low, float((p["mc"] - p["mc_se"]).min()))
        g = d[d["scheme"] == "gmc"].groupby("G", sort=True)["gmc_rate_bound"].first()
        if len(g):
            style.mark(a.plot(g.index, g.values, color=style.style("gmc").color,
                              label=r"GMC bound $M\sigma^2/(4G\epsilon)$", **style.THEORY_KW), inst, "gmc", "bound")
        a.set_xscale("log", base=2)
        a.set_yscale("symlog", linthresh=LINTHRESH, linscale=0.5)
        a.set_ylim(bottom=1.5 * low if low < 0 else 0.0)
        a.axhline(0.0, color="0.4", linewidth=0.6, zorder=1)
        a.set_xlabel(r"group size $G$")
        a.set_title(f"E1 instance '{inst}', $\\epsilon={d['eps'].iloc[0]:g}$")
    axes[0].set_ylabel(r"bias $\|\mathbb{E}\,\hat g(c)-\nabla J\|$")
    style.legend(fig, axes)
    return fig


def caption(df: pd.DataFrame) -> str:
    parts = []
    for inst, r in summary(df).items():
        s = f"'{inst}': GMC's exact bias falls from {r.get('gmc_first', float('nan')):.3g} at G = {r['G_min']} " \
            f"to {r.get('gmc_last', float('nan')):.3g} at G = {r['G_max']}" \
            + (" (monotone)" if r.get("gmc_monotone") else " (NOT monotone)")
        for k in ("tic_mask", "tic_trunc"):
            if k in r:
                s += f"; {style.label(k)} stays at {r[k]:.3g} (relative spread over G {r[k + '_spread']:.1e})"
        if "is_max" in r:
            s += f"; IS exact bias max {r['is_max']:.1e}"
        parts.append(s)
    return ("Theory (THEORY §3, claims 7-8): with leave-one-out advantages IS is unbiased; TIC-mask's and "
            "TIC-trunc's bias does not depend on G; GMC's bias is non-increasing in G, below "
            r"$M\sigma^2/(4G\epsilon)$, and vanishes as G grows. Measured: " + "; ".join(parts) + ". "
            "Lines are exact (enumeration); points are Monte Carlo estimates with error bars of +-1 stored "
            "standard error (the Monte Carlo bias projected on the exact bias direction, an unbiased estimate that "
            "can fall below 0 when the bias is smaller than the noise; none for IS, whose exact bias is 0). The y "
            f"axis is logarithmic above {LINTHRESH:g} and linear below (symlog). " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
