"""The LLM grids as data, on the toolkit's one grid schema (:mod:`schema.grid`): :class:`Grid` (shared
settings, horizons, estimators, delays, arms, seeds, the grids it pairs with; :meth:`Grid.cells` its plan
of :class:`GridCell`), :class:`Arm` (an intervention arm), :class:`Cell` (one run of a sweep),
:func:`grid_out` (the ``out`` a grid is defined with) and :func:`recorded_grid` (the grid a results folder
records). The studies define their grids with these (``studies/<study>/grids.py``, collected in
``studies.grids.GRIDS``) and run them with ``python -m studies.run``; where each grid's runs live is
:func:`grids.folders.grid_folder`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from schema.grid import as_record

from .folders import grid_folder, grid_relpath


@dataclass(frozen=True)
class Cell:
    """One run of a grid (:mod:`grids.sweep`'s sweeps and the studies' grids)."""

    estimator: str
    mode: str
    delay: int  # controlled: d; async: max_staleness
    seed: int
    overrides: dict = field(compare=False)  # TrainConfig values on top of the sweep's base

    @property
    def name(self) -> str:
        return f"{self.estimator}-{self.mode}-d{self.delay}-s{self.seed}"


@dataclass(frozen=True)
class GridCell(Cell):
    """One run of a :class:`Grid`: a :class:`Cell` with its horizon (and arm) in the name."""

    horizon: str = "long"
    arm: str = ""

    @property
    def name(self) -> str:
        arm = f"{self.arm}-" if self.arm else ""
        return f"{self.horizon}-{arm}{self.estimator}-d{self.delay}-s{self.seed}"


@dataclass(frozen=True)
class Arm:
    """One arm of an intervention grid: settings on top of the grid's (``overrides``, e.g. the
    optimiser), the estimators run under them at every positive delay, and whether the arm has
    its own delay-0 run per seed (the delay-0 run stands for every scheme of the arm)."""

    label: str
    overrides: dict
    estimators: tuple[str, ...]
    zero_delay: bool = True


@dataclass(frozen=True)
class Grid:
    """The grid as data; :meth:`cells` is its plan (read by :func:`grids.sweep.plan`). ``pairs``: the grids
    whose runs its analysis pairs with its own by seed (the same warm starts and seeds; none: it pairs with
    none): before the grid adds runs, each paired folder is checked to have started from the warm start this
    machine uses (:func:`grids.check.check_warm_starts`). Not recorded: what the grid's runs are does not
    depend on it. ``legacy_settings``: settings added after the grid was recorded, which each cell takes at the
    value its committed runs used (:func:`with_legacy_settings`); not recorded either, as those runs were not."""

    name: str
    out: str
    base: dict
    horizons: dict
    estimators: tuple[str, ...]
    delays: tuple[int, ...]  # positive delays; delay 0 is run once per seed and horizon
    seeds: tuple[int, ...]
    floor: tuple[str, ...] = ("stale",)  # estimators run at the largest delay only
    zero_delay: str | None = "gmc"  # the estimator that stands for every scheme at delay 0 (None: no delay-0 run)
    doc: str = ""
    arms: tuple[Arm, ...] = ()  # intervention arms; none: ``estimators`` under ``base`` only
    kernel_env: tuple[tuple[str, str], ...] = ()  # environment forcing a CPU kernel path for every run (recorded)
    pairs: tuple[str, ...] = ()  # the grids its analysis pairs with by seed (not recorded)
    legacy_settings: tuple[str, ...] = ()  # settings its record predates, planned as its runs used them (not recorded)

    def record(self) -> dict:
        """What ``sweep.json`` records (:meth:`schema.grid.Grid.record`: a continued grid must match it); a
        grid without arms records exactly what it recorded before arms existed."""
        drop = (("out", "doc", "pairs", "legacy_settings") + (() if self.arms else ("arms",))
                + (() if self.kernel_env else ("kernel_env",)))
        found = {k: v for k, v in dataclasses.asdict(self).items() if k not in drop}
        found["async_estimators"] = []  # the sweep driver's field, which every grid of the studies has recorded (empty)
        return as_record(found)

    def default_out(self, root: Path | None = None) -> Path:
        """``out`` under the results root ``root`` (default: ``GMC_RESULTS`` or ``results/``)."""
        from schema.sources import results_root

        return (results_root() if root is None else Path(root)) / Path(self.out).relative_to("results")

    def paired_folders(self) -> list[Path]:
        """The folders of the grids whose runs this grid's analysis pairs with its own (:attr:`pairs`) under
        the results root."""
        return [grid_folder(g) for g in self.pairs]

    def cells(self) -> list[GridCell]:
        """Seed-major: all runs of seed s (every horizon and arm) before any run of seed s + 1."""
        cells = []
        for s in self.seeds:
            for h, task in self.horizons.items():
                base = {**self.base, **task, "seed": s}
                if not self.arms:
                    runs = [(self.zero_delay, 0)] if self.zero_delay else []
                    runs += [(e, d) for d in self.delays for e in self.estimators]
                    runs += [(e, max(self.delays)) for e in self.floor] if self.delays else []
                    cells += [GridCell(e, "controlled", d, s, self._planned({**base, "estimator": e, "delay": d}),
                                       horizon=h) for e, d in runs]
                    continue
                for arm in self.arms:
                    runs = [(self.zero_delay or "gmc", 0)] if arm.zero_delay else []
                    runs += [(e, d) for d in self.delays for e in arm.estimators]
                    cells += [GridCell(e, "controlled", d, s,
                                       self._planned({**base, **arm.overrides, "estimator": e, "delay": d}),
                                       horizon=h, arm=arm.label) for e, d in runs]
        return cells

    def _planned(self, cfg: dict) -> dict:
        """A cell's settings with each of :attr:`legacy_settings` at the value its committed runs used."""
        return with_legacy_settings(cfg, self.legacy_settings)

    def estimator_names(self) -> list[str]:
        """Every estimator a run of the grid uses."""
        names = [*self.estimators, *self.floor, *([self.zero_delay] if self.zero_delay else [])]
        names += [e for arm in self.arms for e in arm.estimators]
        return list(dict.fromkeys(names))


def with_legacy_settings(cfg: dict, names: tuple[str, ...]) -> dict:
    """``cfg`` with each setting of ``names`` that it leaves open set to the value a run of those settings used
    before the setting existed (:data:`schema.runs.LEGACY_FIELDS`; where that is today's default, left open).
    A grid recorded before a setting existed names it in its ``legacy_settings``, so that it still plans its
    committed runs (a continued grid is checked run by run against them) and not today's default."""
    from schema.runs import LEGACY_FIELDS, legacy_fields

    unknown = [n for n in names if n not in LEGACY_FIELDS]
    if unknown:
        raise ValueError(f"legacy_settings {unknown} are not in schema.runs.LEGACY_FIELDS")
    then = legacy_fields(cfg)
    return {**cfg, **{n: then[n] for n in names if n in then and then[n] is not None}}


def record_as_today(settings: dict) -> dict:
    """A recorded grid's settings (``sweep.json``'s ``settings``) with the settings' older names written as today's
    (:func:`schema.runs.renamed`) in its base, its horizons and its arms: what a definition's :meth:`Grid.record`
    is compared with, so that a knob renamed since the grid was recorded does not make it another grid."""
    from schema.runs import renamed

    out = dict(settings)
    if isinstance(out.get("base"), dict):
        out["base"] = renamed(out["base"])
    if isinstance(out.get("horizons"), dict):
        out["horizons"] = {h: renamed(t) if isinstance(t, dict) else t for h, t in out["horizons"].items()}
    if isinstance(out.get("arms"), list):
        out["arms"] = [{**a, "overrides": renamed(a["overrides"])} if isinstance(a, dict) and
                       isinstance(a.get("overrides"), dict) else a for a in out["arms"]]
    return out


def grid_out(name: str) -> str:
    """The ``out`` of grid ``name``: ``results/`` + its folder (:func:`grids.folders.grid_relpath`), what the
    studies' grid definitions pass as :attr:`Grid.out`."""
    return f"results/{grid_relpath(name)}"


def pairing_with(grids, name: str) -> tuple[str, ...]:
    """The names of the grids of ``grids`` (an iterable of :class:`Grid`) that pair with grid ``name``
    (:attr:`Grid.pairs`), in their order."""
    return tuple(g.name for g in grids if name in g.pairs)


def recorded_grid(root: str | Path) -> Grid:
    """The grid a folder's ``sweep.json`` records (what :func:`grids.sweep.run_sweep` wrote when the
    grid started, :meth:`Grid.record`), as a :class:`Grid` whose ``out`` is ``root``: the design
    the folder's runs were made under, read as data. ``ValueError`` naming the file if there is none
    or it records no grid of this schema."""
    from schema.sources import read_json

    path = Path(root) / "sweep.json"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: {root} records no grid")
    doc = read_json(path)
    s = record_as_today(dict(doc.get("settings") or {}) if isinstance(doc, dict) else {})
    need = ("name", "base", "horizons", "estimators", "delays", "seeds", "floor", "zero_delay")
    missing = [k for k in need if k not in s]
    if missing:
        raise ValueError(f"{path} records no grid of this kind (settings lack {', '.join(missing)})")
    arms = tuple(Arm(a["label"], a["overrides"], tuple(a["estimators"]), a["zero_delay"]) for a in s.get("arms", ()))
    return Grid(s["name"], str(root), s["base"], s["horizons"], tuple(s["estimators"]), tuple(s["delays"]),
                 tuple(s["seeds"]), floor=tuple(s["floor"]), zero_delay=s["zero_delay"], doc=doc.get("doc", ""),
                 arms=arms, kernel_env=tuple(tuple(kv) for kv in s.get("kernel_env", ())))
