"""What a registered estimator carries besides its weights or loss: one record per estimator.

A record holds, in the estimator's own module (passed to :func:`estimators.schemes.register_scheme`
or :func:`estimators.losses.register_token_loss`):

* ``params``: its knobs (:class:`estimators.params.Param`: name, default, paper symbol, range, help);
  :data:`estimators.params.PARAMS` is the view of them, and the trainer's config field
  ``<estimator>_<knob>`` and flag ``--<estimator>-<knob>`` are derived from them;
* ``label``: its display name in tables and figures (:func:`schema.metrics.estimator_label`);
* ``style``: its colour, marker and legend rank in every figure (:data:`figures.style.STYLES`);
* ``mass_bound``: its row of THEORY §3's mass-bias bound table (:data:`bounds.MASS_BOUNDS`):
  ``{"tight": name, "theorem2": name}`` of registered bounds, or None (no bound in THEORY);
* ``knob_check``: a check across its knobs (``lo <= hi``) run after each knob's own range check.

Every module of the :mod:`estimators` package is imported when the package is (discovered with
:mod:`pkgutil`), so a new estimator is one new module: no list elsewhere names it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .params import KNOB_CHECKS, PARAMS, Param


@dataclass(frozen=True)
class Style:
    """How every figure draws an estimator: a colour, a marker and a legend rank (lower first)."""

    color: str
    marker: str
    rank: float = float("inf")


@dataclass(frozen=True)
class Record:
    name: str
    params: tuple[Param, ...] = ()
    label: str | None = None
    style: Style | None = None
    mass_bound: dict[str, str] | None = None
    knob_check: Callable[[dict], None] | None = None


RECORDS: dict[str, Record] = {}
"""estimator name -> its :class:`Record`, in registration order."""


def record(name: str, *, params=(), label: str | None = None, style: Style | None = None,
           mass_bound: dict[str, str] | None = None, knob_check: Callable | None = None) -> Record:
    """Register ``name``'s record (called by the registration decorators; a taken name is refused)."""
    if name in RECORDS:
        raise ValueError(f"an estimator named {name!r} already has a record")
    params = tuple(params)
    if not all(isinstance(p, Param) for p in params):
        raise ValueError(f"estimator {name!r}: params must be Param objects, got {params!r}")
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(f"estimator {name!r}: a knob name is repeated in {names}")
    if label is not None and not isinstance(label, str):
        raise ValueError(f"estimator {name!r}: label must be a string, got {label!r}")
    if style is not None and not isinstance(style, Style):
        raise ValueError(f"estimator {name!r}: style must be a Style, got {style!r}")
    if mass_bound is not None and (not isinstance(mass_bound, dict) or set(mass_bound) != {"tight", "theorem2"}):
        raise ValueError(f"estimator {name!r}: mass_bound must be None or {{'tight': ..., 'theorem2': ...}}, "
                         f"got {mass_bound!r}")
    if knob_check is not None and not callable(knob_check):
        raise ValueError(f"estimator {name!r}: knob_check must be a function of the knob values, got {knob_check!r}")
    rec = Record(name, params, label, style, dict(mass_bound) if mass_bound else None, knob_check)
    RECORDS[name] = rec
    if params:
        PARAMS[name] = params
    if knob_check is not None:
        KNOB_CHECKS[name] = knob_check
    return rec


def forget(name: str) -> None:
    """Remove ``name``'s record and its views (a correction file unloaded, or rolled back after a failed import:
    :mod:`report_card.load`); an unknown name is left as it is."""
    RECORDS.pop(name, None)
    PARAMS.pop(name, None)
    KNOB_CHECKS.pop(name, None)


def interval_check(strict: bool = False) -> Callable[[dict], None]:
    """A ``knob_check`` for knobs ``lo`` and ``hi`` that bound a kept interval: ``lo <= hi`` (``lo < hi``
    with ``strict``), else a ValueError naming both values."""
    def check(values: dict) -> None:
        lo, hi = values["lo"], values["hi"]
        if not (lo < hi if strict else lo <= hi):
            need = "lo < hi" if strict else "lo <= hi"
            raise ValueError(f"needs {need} (a non-empty kept interval), got lo = {lo!r}, hi = {hi!r}")
    return check


def records() -> dict[str, Record]:
    """Every record (every module of the package imported first)."""
    import estimators  # noqa: F401  (the package's import discovers every module)

    return RECORDS
