"""Is a folder the grid it claims to be, and may this machine add runs to it? :func:`audit` (every
run is a cell of its grid, run with the cell's settings and from the grid's warm start) and
:func:`check_warm_starts` (this machine computes the warm start the folder's runs started from)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .folders import grid_relpath
from .spec import recorded_grid


@dataclass
class Audit:
    """What :func:`audit` found under a grid folder. ``foreign``: folders that are no run of the
    grid (an unknown name, or a known name run with other settings: ``{name: why}``);
    ``no_metrics``: run folders of the grid holding a ``config.json`` but no metrics table;
    ``runs``: the folders a reader may use (a run of a packed grid as ``root/name``,
    :mod:`schema.packed`)."""

    grid: str | None
    runs: list[Path]
    foreign: dict[str, str]
    no_metrics: list[str]

    def raise_if_foreign(self, root) -> None:
        if self.foreign:
            listed = "; ".join(f"{k}: {v}" for k, v in list(self.foreign.items())[:6])
            more = f" (and {len(self.foreign) - 6} more)" if len(self.foreign) > 6 else ""
            raise ValueError(f"{root} holds {len(self.foreign)} folder(s) that are not runs of grid "
                             f"{self.grid or '(no sweep.json)'}: {listed}{more}. Move them away; the analysis "
                             f"never mixes foreign runs into a grid")


_FREE_FIELDS = ("estimator", "delay", "seed", "task", "terms", "train_size", "heldout_size", "warm_start_steps",
                "warm_start_lr", "cache_dir", "optimizer", "lr", "momentum", "weight_decay", "max_grad_norm",
                "mechanism_diagnostics", "gmc_cap_kappa")
"""Fields that may differ between the runs of a folder without a ``sweep.json``: the cell
(estimator, delay, seed), the horizon's task settings, an arm's optimiser settings, and where the
warm start is cached."""


def grid_name(root: str | Path) -> str | None:
    """The grid that ``root/sweep.json`` names (None: no ``sweep.json``, a folder assembled by hand). A
    truncated ``sweep.json``, or one that names no grid (``[]``, ``{}``, a name that is no grid's,
    :func:`grids.folders.grid_relpath`), is a ``ValueError`` naming the file."""
    from schema.results import read_json

    path = Path(root) / "sweep.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    settings = doc.get("settings") if isinstance(doc, dict) else None
    grid = settings.get("name") if isinstance(settings, dict) else None
    if grid is None:
        raise ValueError(f"{path} names no grid (no settings.name)")
    try:
        grid_relpath(grid)
    except ValueError:
        raise ValueError(f"{path} names grid {grid!r}, which is no grid's name") from None
    return grid


def check_grid_folder(root: str | Path, grids: str | tuple[str, ...] | None = None) -> str | None:
    """The grid ``root`` holds (:func:`grid_name`), checked to be one of ``grids`` when given: a
    folder whose ``sweep.json`` names another grid is a ``ValueError`` (an analysis of one grid never
    reads another's runs), as is a missing folder or a file. A folder without ``sweep.json`` passes
    here; :func:`audit` holds it to the rule for folders assembled by hand."""
    root = Path(root)
    if not root.exists():
        raise ValueError(f"{root} does not exist: no folder of grid runs there")
    if not root.is_dir():
        raise ValueError(f"{root} is a file, not a folder of grid runs")
    if not any(root.iterdir()):
        raise ValueError(f"{root} is empty: no grid runs there")
    grid = grid_name(root)
    if grids is not None:
        grids = (grids,) if isinstance(grids, str) else tuple(grids)
        if grid is not None and grid not in grids:
            raise ValueError(f"{root} holds grid {grid} (its sweep.json), not {' or '.join(grids)}: this analysis "
                             f"reads only runs of {' or '.join(grids)} (made by python -m studies.run --grid "
                             f"{grids[0]})")
    return grid


def audit(root: str | Path) -> Audit:
    """Check every folder under ``root`` against the grid that made it.

    A folder with a ``sweep.json`` naming a grid (what :func:`run_sweep` writes) is checked run by
    run against the plan that file records (:func:`grids.spec.recorded_grid`): a folder whose name is no cell of
    the grid, or whose stored settings differ from the cell's (:func:`llm_runs.config.config_diff`,
    the check ``--dry-run`` and ``--resume`` make), is foreign. Without a ``sweep.json`` (a folder
    assembled by hand) every run must agree with the others on every setting outside
    :data:`_FREE_FIELDS` and no two runs may be the same cell; the odd ones out are foreign.
    """
    from schema.results import metrics_path, run_stamp

    root = Path(root)
    folders = _run_dirs(root)
    settings_file = root / "sweep.json"
    key = (str(root.resolve()), settings_file.stat().st_mtime_ns if settings_file.is_file() else None,
           tuple((p.name, run_stamp(p), metrics_path(p) is not None) for p in folders))
    if key in _AUDITS:
        return _AUDITS[key]
    _AUDITS[key] = found = _audit(root, folders)
    return found


_AUDITS: dict = {}
"""audit's results in this process, keyed by the folder's run configs and their modification times."""


def _audit(root: Path, folders: list[Path]) -> Audit:
    from llm_runs.config import config_diff, resolve_config
    from schema.results import metrics_path, read_run_config
    from schema.runs import legacy_fields

    no_metrics = [p.name for p in folders if metrics_path(p) is None]
    runs = [p for p in folders if metrics_path(p) is not None]
    foreign: dict[str, str] = {}
    raw = {p.name: read_run_config(p, legacy=False) for p in runs}
    # a field a run's stored config lacks did not exist when the run was made: the value such runs used
    legacy = {n: {k: v for k, v in legacy_fields(cfg).items() if v is not None} for n, cfg in raw.items()}
    stored = {n: {**cfg, **legacy[n]} for n, cfg in raw.items()}  # read_run_config's legacy reading
    grid = grid_name(root)
    if grid is not None:
        cells = {c.name: c for c in recorded_grid(root).cells()}
        for p in folders:
            cell = cells.get(p.name)
            if cell is None:
                foreign[p.name] = f"no cell of grid {grid} has this name"
                continue
            if p.name in stored:
                # the recorded plan, made with the run, meant those legacy values too, not today's defaults
                planned = {**resolve_config(cell.overrides).to_dict(),
                           **{k: v for k, v in legacy[p.name].items() if k not in cell.overrides}}
                diff = config_diff(stored[p.name], planned)
                diff.pop("cache_dir", None)  # where the warm start was cached does not change the run
                if diff:
                    foreign[p.name] = "run with other settings (" + ", ".join(
                        f"{k}: {a!r}, planned {b!r}" for k, (a, b) in diff.items()) + ")"
    else:
        from collections import Counter

        def common(cfg):
            return json.dumps({k: v for k, v in cfg.items() if k not in _FREE_FIELDS}, sort_keys=True, default=str)

        keys = {name: common(cfg) for name, cfg in stored.items()}
        majority = Counter(keys.values()).most_common(1)[0][0] if keys else None
        base = next((stored[n] for n, k in keys.items() if k == majority), {})
        for name, k in keys.items():
            if k != majority:
                diff = config_diff(base, stored[name])
                foreign[name] = "settings differ from the folder's other runs (" + ", ".join(
                    f"{f}: {b!r} vs {a!r}" for f, (a, b) in diff.items() if f not in _FREE_FIELDS) + ")"
        seen: dict[tuple, str] = {}
        for name, cfg in stored.items():
            if name in foreign:
                continue
            cell = tuple(json.dumps(cfg.get(f), sort_keys=True, default=str) for f in _FREE_FIELDS)
            if cell in seen:
                foreign[name] = f"the same cell as {seen[cell]}"
            seen.setdefault(cell, name)
    _foreign_warm_starts(root, [p for p in runs if p.name not in foreign], foreign)
    return Audit(grid, [p for p in runs if p.name not in foreign], foreign, no_metrics)


def _run_dirs(root) -> list[Path]:
    """The runs directly under ``root``, sorted: folders holding a ``config.json`` and the runs of its
    packed tables (:func:`schema.results.run_dirs`)."""
    from schema.results import run_dirs

    return run_dirs(root)


def _warm_starts_used(runs) -> dict[str, dict]:
    """``{run name: the warm-start record its config.json holds}`` for run folders ``runs``."""
    from schema.results import read_run_doc

    return {p.name: read_run_doc(p).get("warm_start") or {} for p in runs}


def _common_warm_starts(used: dict[str, dict]) -> dict[str, dict]:
    """Per warm-start key, the identity (:func:`llm_runs.warmstart.identity`) most of the runs of
    ``used`` (:func:`_warm_starts_used`) with that key started from."""
    from collections import Counter

    from llm_runs.warmstart import identity

    common = {}
    for key in {w.get("key") for w in used.values()} - {None}:
        tally = Counter(json.dumps(identity(w), sort_keys=True, default=str)
                        for w in used.values() if w.get("key") == key)
        common[key] = json.loads(tally.most_common(1)[0][0])
    return common


def _foreign_warm_starts(root: Path, runs: list[Path], foreign: dict[str, str]) -> None:
    """Runs whose warm start has the grid's key but is another warm start (made on a machine that
    rounds differently) than the one most of the grid's runs with that key started from."""
    from llm_runs.warmstart import differs

    used = _warm_starts_used(runs)
    for key, common in _common_warm_starts(used).items():
        for n, w in used.items():
            why = differs(w, common) if w.get("key") == key else None
            if why:
                foreign[n] = (f"started from another warm start than the grid's other runs with key {key} ({why}): "
                              f"same settings, other numerics (another machine)")


def check_warm_starts(out: Path, warm: dict[str, dict]) -> None:
    """Refuse to add runs to ``out`` when this machine's warm start (``warm``, per horizon) is not
    the one its existing runs started from: the same settings give another warm start on a CPU that
    rounds differently (:mod:`llm_runs.warmstart`), and runs from two warm starts are not paired."""
    from llm_runs.warmstart import differs, machine

    if not Path(out).is_dir():
        return
    by_key = {info["key"]: (h, info) for h, info in warm.items() if "key" in info}
    bad: dict[str, list[str]] = {}
    for name, used in _warm_starts_used(_run_dirs(out)).items():
        if used.get("key") not in by_key:
            continue
        h, here = by_key[used["key"]]
        why = differs(used, here)
        if why:
            bad.setdefault(f"{h} ({why})", []).append(name)
    if bad:
        listed = "; ".join(f"horizon {k}: {len(v)} run(s), e.g. {v[0]}" for k, v in bad.items())
        raise ValueError(f"this machine's warm start is not the one the runs in {out} started from ({listed}). "
                         f"The numerics depend on the CPU (this one: {machine()}), so runs made here would not "
                         f"be paired with them: nothing was run. Continue the grid on a machine whose warm start "
                         f"matches (each run's config.json records the one it used), or give another --out")


def check_pairing(root: str | Path, reference: str | Path) -> None:
    """Refuse to pair the runs under ``root`` with those under ``reference`` (a grid it pairs
    with, :attr:`grids.spec.Grid.pairs`) when a run of ``root`` started from another warm
    start than ``reference``'s runs with the same key: its seed would be paired with a run from
    other weights (the numerics depend on the CPU). ``ValueError`` naming the runs and why."""
    from llm_runs.warmstart import differs

    common = _common_warm_starts(_warm_starts_used(_run_dirs(reference)))
    bad = {}
    for name, w in _warm_starts_used(_run_dirs(root)).items():
        why = differs(w, common[w["key"]]) if w.get("key") in common else None
        if why:
            bad[name] = why
    if bad:
        listed = "; ".join(f"{k}: {v}" for k, v in list(bad.items())[:4])
        more = f" (and {len(bad) - 4} more)" if len(bad) > 4 else ""
        raise ValueError(f"{len(bad)} run(s) under {root} started from another warm start than the runs under "
                         f"{reference} they would be paired with ({listed}{more}): same settings, other numerics "
                         f"(another machine). Their seeds are not paired; the analysis does not mix them in")
