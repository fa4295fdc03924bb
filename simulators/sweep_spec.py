"""The simulators' kind of grid (:class:`Sweep`, on the toolkit's one grid schema :mod:`schema.grid`):
what every environment's ``sweeps.py`` defines its sweeps with, apart from the runner
(:mod:`simulators.sweep`) that imports those modules, so no module imports back the one that imports it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schema.grid import as_record, check_plan, derive_seed, setting_key, settings_product

__all__ = ["SettingCell", "Sweep", "derive_seed", "setting_key"]


@dataclass(frozen=True)
class SettingCell:
    """One cell of a simulator sweep: a setting, run for every seed of the sweep in one call; its name is
    the setting's key (:func:`schema.grid.setting_key`, the name of its result part)."""

    settings: dict
    seeds: tuple[int, ...]

    @property
    def name(self) -> str:
        return setting_key(self.settings)


@dataclass(frozen=True)
class Sweep:
    """A sweep: ``settings[scale] = {"grid": {key: [values]}, "fixed": {...}, "seeds": [...]}`` for the
    scales ``full`` and ``quick``; its plan is the product of the grid's axes on top of ``fixed``
    (:func:`schema.grid.settings_product`)."""

    name: str
    description: str
    settings: dict
    run: Callable  # (setting: dict, seeds: list[int]) -> DataFrame | (DataFrame, steps DataFrame)
    columns: dict = field(default_factory=dict)  # result column -> meaning

    @property
    def doc(self) -> str:
        return self.description

    def _scale(self, quick: bool) -> dict:
        return self.settings["quick" if quick else "full"]

    def table(self, quick: bool = False) -> list[dict]:
        """The settings of the scale, in the product's order."""
        spec = self._scale(quick)
        return settings_product(spec["grid"], spec.get("fixed", {}))

    def seeds(self, quick: bool = False) -> list[int]:
        return list(self._scale(quick)["seeds"])

    def cells(self, quick: bool = False) -> list[SettingCell]:
        """The plan of the scale: one :class:`SettingCell` per setting (two equal settings are refused)."""
        seeds = tuple(self.seeds(quick))
        return check_plan(self.name, [SettingCell(s, seeds) for s in self.table(quick)])

    def record(self, quick: bool = False) -> dict:
        """What ``config.json`` records of the sweep (before the versions), and a continued sweep must match
        in its ``sweep``, ``quick``, ``settings`` and ``seeds``."""
        return {"sweep": self.name, "description": self.description, "quick": quick,
                "settings": self.table(quick), "seeds": self.seeds(quick), "columns": self.columns}

    def stored_record(self, quick: bool = False) -> dict:
        """:meth:`record` as its stored JSON reads back."""
        return as_record(self.record(quick))
