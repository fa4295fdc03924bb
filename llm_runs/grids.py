"""The LLM grids' kind of grid (on the toolkit's one grid schema, :mod:`schema.grid`) and reference setup:
:class:`Study` (a grid as data: shared settings,
horizons, estimators, delays, arms, seeds; :meth:`Study.cells` its plan), :func:`recorded_study`
(the grid a results folder records), the study model and its settings (:data:`STUDY_BASE`,
:data:`HORIZONS`), the step costs that price a plan and the committed warm starts' settings. The
studies define their grids with these (``studies/<study>/grids.py``, collected in
``studies.grids.STUDIES``) and run them with ``python -m studies.run``; where each grid's runs live
is :data:`schema.results.GRID_FOLDERS`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from schema.grid import as_record
from schema.results import HORIZON_TASKS

STUDY_MODEL = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16}
"""A 4-layer, 64-wide Qwen3 (247k parameters): a quarter of ``tiny-cpu``'s compute per token."""

STUDY_MODEL_LARGE = {"hidden_size": 128, "intermediate_size": 544, "num_hidden_layers": 8, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 32}
"""An 8-layer, 128-wide Qwen3 (2,068,992 parameters with the scratchpad's 15-token vocabulary: 8.4
times :data:`STUDY_MODEL`'s 247,424): the mechanism study's second model size (M5)."""

STUDY_BASE = {"preset": "tiny-cpu", "model_kwargs": STUDY_MODEL, "digits": 1, "heldout_size": 200,
              "eval_train_size": 0, "warm_start_batch": 128, "warm_start_seed": 0,
              "prompts_per_step": 16, "group_size": 8, "lr": 1e-4, "eps": 0.2, "advantage": "loo", "steps": 200,
              "eval_every": 20, "checkpoint_every": 50, "keep_checkpoints": 1, "threads": 1}
"""Shared by every run of the study (and the pilot): B = 16 prompts x G = 8, Adam, eps 0.2,
leave-one-out advantages, 200 updates, held-out evaluation (200 problems) every 20 updates."""

HORIZONS = {
    "short": {"task": HORIZON_TASKS["short"], "terms": 3, "warm_start_steps": 150, "warm_start_lr": 2e-3},
    "long": {"task": HORIZON_TASKS["long"], "terms": 7, "train_size": 20000, "warm_start_steps": 700,
             "warm_start_lr": 2e-3},
}
"""Horizon -> task settings. short: ``3+5+9=`` -> ``17`` (H <= 3 tokens with EOS); long: seven
one-digit operands with every partial sum written out, ``08,17,...`` (H = 18 tokens)."""
STEP_COST_S = {"short": 0.121, "long": 0.532}
"""Median seconds per update (rollout + update) measured by the pilots (``--cost-from
results/llm/pilot`` and ``results/llm/pilot_short`` recompute them), one run at a time on the
2-core machine while it was shared (load about 5): long 0.23 s rollout + 0.30 s update."""
EVAL_COST_S = {"short": 0.19, "long": 0.59}
"""Median seconds per held-out evaluation (200 problems), same pilots."""


def horizon_cost(costs: dict, label: str) -> float | None:
    """The cost of horizon ``label`` in ``costs`` (:data:`STEP_COST_S` or :data:`EVAL_COST_S`); a
    scratchpad horizon ``H<tokens>`` of the horizon grid without its own entry costs the long
    horizon's scaled by its tokens (H / 18). None if neither applies."""
    if label in costs:
        return costs[label]
    if label[:1] == "H" and label[1:].isdigit() and "long" in costs:
        return costs["long"] * int(label[1:]) / 18
    return None

RUN_OVERHEAD_S = 8.0
"""Process start, model load, final checkpoint and summary of one run."""


@dataclass(frozen=True)
class Cell:
    """One run of a grid (:mod:`llm_runs.sweep`'s sweeps and the studies' grids)."""

    estimator: str
    mode: str
    delay: int  # controlled: d; async: max_staleness
    seed: int
    overrides: dict = field(compare=False)  # TrainConfig values on top of the sweep's base

    @property
    def name(self) -> str:
        return f"{self.estimator}-{self.mode}-d{self.delay}-s{self.seed}"


@dataclass(frozen=True)
class StudyCell(Cell):
    """One run of the study: a :class:`Cell` with its horizon (and arm) in the name."""

    horizon: str = "long"
    arm: str = ""

    @property
    def name(self) -> str:
        arm = f"{self.arm}-" if self.arm else ""
        return f"{self.horizon}-{arm}{self.estimator}-d{self.delay}-s{self.seed}"


@dataclass(frozen=True)
class Arm:
    """One arm of an intervention grid: settings on top of the study's (``overrides``, e.g. the
    optimiser), the estimators run under them at every positive delay, and whether the arm has
    its own delay-0 run per seed (the delay-0 run stands for every scheme of the arm)."""

    label: str
    overrides: dict
    estimators: tuple[str, ...]
    zero_delay: bool = True


@dataclass(frozen=True)
class Study:
    """The grid as data; :meth:`cells` is its plan (read by :func:`llm_runs.sweep.plan`)."""

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

    def record(self) -> dict:
        """What ``sweep.json`` records (:meth:`schema.grid.Grid.record`: a continued grid must match it); a
        grid without arms records exactly what it recorded before arms existed."""
        drop = (("out", "doc") + (() if self.arms else ("arms",))
                + (() if self.kernel_env else ("kernel_env",)))
        found = {k: v for k, v in dataclasses.asdict(self).items() if k not in drop}
        found["async_estimators"] = []  # the sweep driver's field, which every study grid has recorded (empty)
        return as_record(found)

    def default_out(self, root: Path | None = None) -> Path:
        """``out`` under the results root ``root`` (default: ``GMC_RESULTS`` or ``results/``)."""
        from schema.results import results_root

        return (results_root() if root is None else Path(root)) / Path(self.out).relative_to("results")

    def paired_folders(self) -> list[Path]:
        """The folders of the grids whose runs this grid's analysis pairs with its own
        (:data:`schema.results.GRID_PAIRS`) under the results root."""
        from schema.results import GRID_PAIRS, grid_folder

        return [grid_folder(g) for g in GRID_PAIRS.get(self.name, ())]

    def cells(self) -> list[StudyCell]:
        """Seed-major: all runs of seed s (every horizon and arm) before any run of seed s + 1."""
        cells = []
        for s in self.seeds:
            for h, task in self.horizons.items():
                base = {**self.base, **task, "seed": s}
                if not self.arms:
                    runs = [(self.zero_delay, 0)] if self.zero_delay else []
                    runs += [(e, d) for d in self.delays for e in self.estimators]
                    runs += [(e, max(self.delays)) for e in self.floor] if self.delays else []
                    cells += [StudyCell(e, "controlled", d, s, {**base, "estimator": e, "delay": d}, horizon=h)
                              for e, d in runs]
                    continue
                for arm in self.arms:
                    runs = [(self.zero_delay or "gmc", 0)] if arm.zero_delay else []
                    runs += [(e, d) for d in self.delays for e in arm.estimators]
                    cells += [StudyCell(e, "controlled", d, s, {**base, **arm.overrides, "estimator": e, "delay": d},
                                        horizon=h, arm=arm.label) for e, d in runs]
        return cells

    def estimator_names(self) -> list[str]:
        """Every estimator a run of the grid uses."""
        names = [*self.estimators, *self.floor, *([self.zero_delay] if self.zero_delay else [])]
        names += [e for arm in self.arms for e in arm.estimators]
        return list(dict.fromkeys(names))


def grid_out(name: str) -> str:
    """The ``out`` of grid ``name`` (``results/`` + its folder in :data:`schema.results.GRID_FOLDERS`, the
    one table of grid folders): what the studies' grid definitions pass as :attr:`Study.out`."""
    from schema.results import GRID_FOLDERS

    if name not in GRID_FOLDERS:
        raise ValueError(f"grid {name!r} has no folder in schema.results.GRID_FOLDERS; add it there")
    return f"results/{GRID_FOLDERS[name]}"


def recorded_study(root: str | Path) -> Study:
    """The grid a folder's ``sweep.json`` records (what :func:`llm_runs.sweep.run_sweep` wrote when the
    grid started, :meth:`Study.record`), as a :class:`Study` whose ``out`` is ``root``: the design
    the folder's runs were made under, read as data. ``ValueError`` naming the file if there is none
    or it records no grid of this schema."""
    from schema.results import read_json

    path = Path(root) / "sweep.json"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: {root} records no grid")
    doc = read_json(path)
    s = dict(doc.get("settings") or {}) if isinstance(doc, dict) else {}
    need = ("name", "base", "horizons", "estimators", "delays", "seeds", "floor", "zero_delay")
    missing = [k for k in need if k not in s]
    if missing:
        raise ValueError(f"{path} records no study grid (settings lack {', '.join(missing)})")
    arms = tuple(Arm(a["label"], a["overrides"], tuple(a["estimators"]), a["zero_delay"]) for a in s.get("arms", ()))
    return Study(s["name"], str(root), s["base"], s["horizons"], tuple(s["estimators"]), tuple(s["delays"]),
                 tuple(s["seeds"]), floor=tuple(s["floor"]), zero_delay=s["zero_delay"], doc=doc.get("doc", ""),
                 arms=arms, kernel_env=tuple(tuple(kv) for kv in s.get("kernel_env", ())))

AVX2_KERNELS = (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("DNNL_MAX_CPU_ISA", "AVX2"))
"""A second kernel path on an AVX-512 machine: torch's dispatch, MKL's and oneDNN's ISA limited to AVX2
(the setting the earlier investigation found to change the long warm start's outcome: pc 0.860
against 0.514). On this machine it changes the warm-start recipe's rounding
(:func:`llm_runs.warmstart.rounds_as_committed` is False under it)."""

COMMITTED_WARM_STARTS = {"long": {**STUDY_BASE, **HORIZONS["long"]}, "short": {**STUDY_BASE, **HORIZONS["short"]},
                         "large": {**STUDY_BASE, **HORIZONS["long"], "model_kwargs": STUDY_MODEL_LARGE}}
"""The settings whose warm starts are committed (llm_runs/warmstarts): the staleness study's long and
short horizons and the larger model's (the scale grids)."""


def committed_config(which: str):
    """The run configuration of :data:`COMMITTED_WARM_STARTS` ``which``."""
    from .config import resolve_config

    if which not in COMMITTED_WARM_STARTS:
        raise ValueError(f"unknown warm start {which!r}; valid: {', '.join(COMMITTED_WARM_STARTS)}")
    return resolve_config(COMMITTED_WARM_STARTS[which])
