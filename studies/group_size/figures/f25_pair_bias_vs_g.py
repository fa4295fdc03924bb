"""F25: the LLM twin of F1: each correction's squared relative bias against the group size G at frozen pairs of
the study model's policies, beside the exact shared-parameter model's (E5) at the nearest chi^2.

Reads ``results/llm/group_size/pairs.json`` (``python -m studies.group_size.pairs``) and the predictions committed
with the pre-registration (``studies/group_size/predictions.json``). One panel per pair, in order of drift: GMC,
TIC-trunc, TIC-mask, IS and SNIS with their jackknife errors (solid, LLM); GMC's and TIC-trunc's E5 values at the
E5 pair whose chi^2 is nearest (dashed). A pair whose gates failed is titled so.
"""
from __future__ import annotations

import math

import numpy as np

from figures import style
from grids import grid_relpath
from schema.results import MissingResults, read_json
from schema.sources import Source

NAME = "f25_pair_bias_vs_g"
TITLE = "F25. The bias law at frozen pairs of the LLM's policies: squared relative bias against G (the LLM twin of F1)"
SHOWN = ("gmc", "tic_trunc", "tic_mask", "is", "snis")
PAIRS = Source(f"{grid_relpath('group_size')}/pairs.json", (f"{grid_relpath('group_size')}/pairs.json",),
               "python -m studies.group_size.pairs")
SOURCES = [PAIRS]


def load() -> dict:
    from grids import grid_folder
    from studies.group_size.predictions import OUT

    p = grid_folder("group_size") / "pairs.json"
    if not p.is_file():
        raise MissingResults(f"missing results llm/group_size/pairs.json: {p} does not exist; make it with "
                             f"`{PAIRS.command}`")
    return {"pairs": read_json(p)["pairs"], "predictions": read_json(OUT)}


def _nearest_e5(pred: dict, chi2: float) -> dict | None:
    pairs = pred.get("shared_pairs", {}).get("pairs", [])
    if not pairs or not (chi2 > 0):
        return None
    return min(pairs, key=lambda q: abs(math.log(q["chi2"]) - math.log(chi2)))


def plot(d: dict, ax=None):
    pairs = sorted(d["pairs"].values(), key=lambda p: p["drift_kl"])
    n = max(1, len(pairs))
    cols = min(4, n)
    rows = math.ceil(n / cols)
    if ax is None:
        style.plt.rcParams.update(style.RC)
        fig, axes = style.plt.subplots(rows, cols, figsize=(2.9 * cols, 2.6 * rows), squeeze=False)
        axes = list(axes.ravel())
    else:
        fig, axes = style.panels(n, ax)
    for a, p in zip(axes, pairs):
        if not any(math.isfinite(float(r["rel_bias_sq"])) for r in p["rows"]):  # a failed measurement: no value
            a.text(0.5, 0.5, "measurement failed:\n" + _wrap(p["gates"].get("failed", "no finite value")),
                   ha="center", va="center", fontsize=6.5, transform=a.transAxes)
            a.set_title(f"{p['pair']}: KL {p['drift_kl']:.3g}, ESS {p['drift_ess']:.2g}, FAILED", fontsize=7.5)
            a.set_xticks([])
            a.set_yticks([])
            continue
        for est in SHOWN:
            rs = sorted((r for r in p["rows"] if r["estimator"] == est), key=lambda r: r["G"])
            if not rs:
                continue
            kw = style.line_kw(est)
            G = np.array([r["G"] for r in rs], float)
            y = np.array([r["rel_bias_sq"] for r in rs])
            se = np.array([r["se"] for r in rs])
            line = a.errorbar(G, y, yerr=se, color=kw["color"], marker=kw["marker"], markersize=3.5, linewidth=1.2,
                              capsize=2, label=style.label(est))
            style.mark(line.lines[0], "llm", p["pair"], est)
        e5 = _nearest_e5(d["predictions"], p["drift_chi2"])
        if e5 is not None:
            for est in ("gmc", "tic_trunc"):
                G = np.array(sorted(int(g) for g in e5["bias"][est]), float)
                y = np.array([e5["bias"][est][str(int(g))]["rel_bias_sq"] for g in G])
                line, = a.plot(G, y, linestyle="--", linewidth=0.9, color=style.line_kw(est)["color"], alpha=0.7)
                style.mark(line, "e5", p["pair"], est)
        a.axhline(0.0, color="0.6", linewidth=0.6)
        a.set_xscale("log", base=2)
        failed = "" if p["gates"]["passed"] else ", gates FAILED"
        a.set_title(f"{p['pair']}: KL {p['drift_kl']:.3g}, chi2 {p['drift_chi2']:.3g}, ESS {p['drift_ess']:.2g}"
                    f"{failed}", fontsize=7.5)
        a.set_xlabel("group size G")
    for a in axes[len(pairs):]:
        a.set_visible(False)
    axes[0].set_ylabel("squared relative bias")
    style.legend(fig, axes[:1], ncol=len(SHOWN))
    return fig


def _wrap(text: str, width: int = 38) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:6])


def caption(d: dict) -> str:
    n = len(d["pairs"])
    passed = sum(1 for p in d["pairs"].values() if p["gates"]["passed"])
    return (f"{n} of 8 pre-registered pairs measured ({passed} passed their gates; a pair that failed is shown with "
            f"its reason). Solid: the LLM (cross-products "
            "of 8 independent replicates against an independent on-policy target, jackknife errors); dashed: the "
            "exact shared-parameter model (E5) at the pair of its own sweep whose chi^2 is nearest.")
