"""One style for every figure (rliable-like): a fixed colour and marker per estimator.

Colours are the Okabe–Ito colour-blind palette (plus Tol's wine for the reference-only
TIC-PPO); GMC is vermillion, drawn a little thicker, in every figure. Axis labels use
matplotlib's mathtext (LaTeX syntax, no TeX installation needed).

Every series a figure draws carries a ``gid`` starting with ``"series:"`` so that tests can
count the lines of a figure without counting error-bar caps or reference lines.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window

import matplotlib.pyplot as plt
import numpy as np

from schema.metrics import estimator_label


@dataclass(frozen=True)
class EstimatorStyle:
    label: str
    color: str
    marker: str


def styles() -> dict[str, EstimatorStyle]:
    """estimator name (as in ``estimators.SCHEMES`` / ``estimators.losses.loss_names()``) -> style (the
    ``style`` of its record, in its own module: :mod:`estimators.records`; GMC's rank is 0), in drawing and
    legend order (GMC first, so it is never hidden under another line). Read when asked, so that importing a
    figure imports no estimator (nor torch); also :data:`STYLES`, and its keys :data:`ORDER`."""
    from estimators.records import records

    styled = sorted(((r.style.rank, n, r) for n, r in records().items() if r.style is not None), key=lambda t: t[0])
    return {n: _of_record(n, r) for _rank, n, r in styled}


def _of_record(name: str, rec) -> EstimatorStyle:
    """The style of estimator ``name`` from its record (which has a ``style``)."""
    return EstimatorStyle(estimator_label(name), rec.style.color, rec.style.marker)


def __getattr__(name: str):
    if name == "STYLES":
        return styles()
    if name == "ORDER":
        return list(styles())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

THEORY_KW = {"linestyle": "--", "linewidth": 1.1, "alpha": 0.9}
"""Keyword arguments of a theory line (a bound or a predicted slope)."""


def style(name: str) -> EstimatorStyle:
    """The style of estimator ``name`` (an unknown name gets a grey style, never an error)."""
    from estimators.records import records

    rec = records().get(name)  # its row of styles(), without building (and sorting) the table
    if rec is None or rec.style is None:
        return EstimatorStyle(name, "#555555", "*")
    return _of_record(name, rec)


def label(name: str, mode: str | None = None) -> str:
    return estimator_label(name, mode)


def line_kw(name: str, mode: str | None = None) -> dict:
    """Colour, marker, width and dash of estimator ``name`` (dashed for non-controlled modes)."""
    s = style(name)
    return {"color": s.color, "marker": s.marker, "linewidth": 2.0 if name == "gmc" else 1.4,
            "markersize": 5 if name == "gmc" else 4, "zorder": 3 if name == "gmc" else 2,
            "linestyle": "-" if mode in (None, "", "controlled") else ":"}


def ordered(names, last=()) -> list[str]:
    """``names`` in the drawing order (:func:`styles`; unknown names last, sorted); those in ``last`` (e.g. the
    exploratory estimators) after all the others, in the same order among themselves."""
    names = list(dict.fromkeys(names))
    if last:
        last = set(last)
        return ordered(n for n in names if n not in last) + ordered(n for n in names if n in last)
    known = styles()
    return [n for n in known if n in names] + sorted(n for n in names if n not in known)


RC = {
    "figure.dpi": 110, "savefig.dpi": 160, "savefig.bbox": "tight", "font.size": 9, "axes.titlesize": 9.5,
    "axes.labelsize": 9.5, "legend.fontsize": 8, "legend.frameon": False, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25, "grid.linewidth": 0.6,
    "mathtext.fontset": "cm", "errorbar.capsize": 0, "lines.markeredgewidth": 0.8,
}


def panels(n: int, ax=None, width: float = 3.3, height: float = 2.8, sharey: bool = False):
    """``(fig, [axes])`` with ``n`` panels in a row, or the caller's axes (a list of ``n``)."""
    plt.rcParams.update(RC)
    if ax is not None:
        axes = list(np.atleast_1d(ax).ravel())
        if len(axes) != n:
            raise ValueError(f"this figure draws {n} panel(s); got {len(axes)} axes")
        return axes[0].figure, axes
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), sharey=sharey, squeeze=False)
    return fig, list(axes[0])


def mark(artist, *parts: str):
    """Tag a drawn series (``gid = "series:..."``) so that tests can count it."""
    if isinstance(artist, list):
        artist = artist[0]
    if hasattr(artist, "lines"):  # an ErrorbarContainer: tag its data line
        artist = artist.lines[0]
    artist.set_gid(":".join(("series",) + parts))
    return artist


def series_lines(fig) -> list:
    """Every tagged series line of ``fig`` (the count the tests check)."""
    return [ln for ax in fig.axes for ln in ax.get_lines() if str(ln.get_gid() or "").startswith("series:")]


def errorbars(ax, x, y, se, name: str, mode=None, label_=None, **kw):
    """Points with +-1 standard-error bars in the estimator's colour and marker (no line)."""
    lk = line_kw(name, mode)
    eb = ax.errorbar(x, y, yerr=se, fmt=lk["marker"], color=lk["color"], markersize=lk["markersize"],
                     markerfacecolor="white", elinewidth=1.0, zorder=lk["zorder"] + 1, label=label_, **kw)
    return eb


def legend(fig, axes, ncol: int | None = None, **kw):
    """One legend for the whole figure, under the panels, without duplicate entries."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_") and lab not in seen:
                seen[lab] = h
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol or min(len(seen), 5),
                   bbox_to_anchor=(0.5, -0.02), **kw)
        fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(seen) - 1) // (ncol or 5)), 1, 1))
    else:
        fig.tight_layout()


OUT = Path(__file__).resolve().parent / "out"
"""Where :func:`save` writes by default (``figures/out/``), and where the report looks for the PNGs."""


def save(fig, name: str, out: str | Path | None = None) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` to ``out`` (default ``figures/out/``); close the figure."""
    out = Path(out) if out is not None else OUT
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths
