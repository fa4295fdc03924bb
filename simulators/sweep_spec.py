"""The spec of a simulator sweep (:class:`Sweep`) and its seeds (:func:`derive_seed`): what every
environment's ``sweeps.py`` defines its sweeps with, apart from the runner (:mod:`simulators.sweep`)
that imports those modules, so no module imports back the one that imports it."""
from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Sweep:
    """A sweep: ``settings[scale] = {"grid": {key: [values]}, "fixed": {...}, "seeds": [...]}``."""

    name: str
    description: str
    settings: dict
    run: Callable  # (setting: dict, seeds: list[int]) -> DataFrame | (DataFrame, steps DataFrame)
    columns: dict = field(default_factory=dict)  # result column -> meaning

    def table(self, quick: bool = False) -> list[dict]:
        spec = self.settings["quick" if quick else "full"]
        grid = spec["grid"]
        keys = list(grid)
        rows = []
        for values in itertools.product(*(grid[k] for k in keys)):
            rows.append({**spec.get("fixed", {}), **dict(zip(keys, values))})
        return rows

    def seeds(self, quick: bool = False) -> list[int]:
        return list(self.settings["quick" if quick else "full"]["seeds"])


def setting_key(setting: dict) -> str:
    return hashlib.sha1(json.dumps(setting, sort_keys=True, default=str).encode()).hexdigest()[:16]


def derive_seed(seed: int, setting: dict, *extra) -> int:
    """A 63-bit seed from (seed, setting key, extra): deterministic, independent across settings."""
    key = int(setting_key(setting), 16)
    ss = np.random.SeedSequence([int(seed), key, *[int(e) for e in extra]])
    return int(ss.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))
