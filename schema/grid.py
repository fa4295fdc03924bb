"""The one grid schema of the toolkit, for the exact simulators and the LLM track alike.

A grid is data: a ``name``, a ``doc``, its plan of cells (:meth:`Grid.cells`: each cell a complete set
of settings under a name unique in the grid) and the record its results folder keeps
(:meth:`Grid.record`), which a continued grid must match, so that results are never mixed with another
grid's. The pieces every kind of grid shares are here, once: the product of setting axes
(:func:`settings_product`), the refusal of a plan that names a cell twice (:func:`check_plan`), the key
of a setting (:func:`setting_key`), the seed a setting's random stream takes (:func:`derive_seed`) and
the record as stored (:func:`as_record`). The kinds built on it:

* :class:`simulators.sweep_spec.Sweep`: a product of setting axes per scale (``full``, ``quick``); a
  cell is one setting run for every seed in one call; its record is ``results/sim/NAME/config.json``.
* :class:`grids.spec.Grid`: the LLM grids of the studies (horizons, estimators, delays, arms,
  seeds); a cell is one training run in its own process; its record is ``sweep.json``.
* :class:`grids.sweep.Sweep`: the first LLM delay sweep, a product of estimators x delays x seeds
  (and its asynchronous cells); record ``sweep.json`` as the studies'.

The stored records keep their formats (the committed folders are read as they are).
"""
from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from typing import Protocol


class GridCell(Protocol):
    """One cell of a grid's plan."""

    @property
    def name(self) -> str:
        """The cell's name, unique in its grid (a run folder's name, a result part's key)."""


class Grid(Protocol):
    """What every runner of the toolkit runs: the simulators' sweeps and the LLM grids."""

    name: str

    @property
    def doc(self) -> str:
        """What the grid is for, in a sentence."""

    def cells(self) -> list:
        """The plan: every cell, seed-major where a cell is one seed's (a partial grid holds whole seeds)."""

    def record(self) -> dict:
        """What the grid's results folder records of it, and a continued grid must match."""


def settings_product(axes: dict, fixed: dict | None = None) -> list[dict]:
    """Every combination of ``axes`` (``{key: [values]}``), the first axis slowest, each on top of
    ``fixed``: the settings of a product grid, in a fixed order."""
    keys = list(axes)
    for k in keys:
        if isinstance(axes[k], (str, bytes)) or not isinstance(axes[k], Iterable):
            raise ValueError(f"axis {k!r} must be a list of values, got {axes[k]!r}")
    return [{**(fixed or {}), **dict(zip(keys, values))} for values in itertools.product(*(axes[k] for k in keys))]


def check_plan(grid_name: str, cells: list) -> list:
    """``cells``, refusing (``ValueError`` naming them) a plan that names a cell twice."""
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"grid {grid_name!r} plans duplicate cells: {twice}")
    return cells


def as_record(value) -> dict:
    """``value`` as its stored JSON reads back (tuples as lists, keys as strings, and a value JSON has no type
    for, such as a path, as its ``str``, as :func:`schema.io.dumps_json` stores it): what a record is compared as."""
    return json.loads(json.dumps(value, default=str))


def setting_key(setting: dict) -> str:
    """A setting's 16-hex-digit key (of its JSON with sorted keys): the name of a simulator sweep's cell."""
    return hashlib.sha1(json.dumps(setting, sort_keys=True, default=str).encode()).hexdigest()[:16]


def derive_seed(seed: int, setting: dict, *extra) -> int:
    """A 63-bit seed from (seed, setting key, extra): deterministic, independent across settings."""
    import numpy as np

    key = int(setting_key(setting), 16)
    ss = np.random.SeedSequence([int(seed), key, *[int(e) for e in extra]])
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
