"""The staleness study (docs/PREREGISTRATION.md): estimators x delays x two horizons x paired seeds.

    python -m llm_runs.study --dry-run        # the runs, their state and the estimated time
    python -m llm_runs.study                  # run (or continue) the grid -> results/llm/study/
    python -m llm_runs.study --resume         # continue interrupted runs (finished ones are skipped)
    python -m llm_runs.study --grid pilot     # the delay-0 pilot that sized it -> results/llm/pilot/
    python -m llm_runs.study --grid horizon   # chi^2 against the horizon H = 3..18 -> results/llm/horizon/
    python -m llm_runs.study --grid pilot_long_steps   # delay 0, long horizon, 800 updates -> results/llm/pilot_long_steps/

The grid is data (:data:`STUDIES`): the settings shared by every run (:data:`STUDY_BASE`), one
block of settings per horizon (:data:`HORIZONS`: ``short`` is the arithmetic task of the
reference sweep, completions of at most 3 tokens; ``long`` the scratchpad task, completions of
exactly 18 tokens), the estimators and positive delays, the stale floor (run at the largest
delay only) and the seeds. Delay 0 makes every trajectory scheme the same update (every ratio
is 1), so it is run once per seed and horizon (as ``gmc``) and is the common delay-0 point of
every estimator.

Pairing (common random numbers): every run of one seed shares the warm start (one per horizon,
``warm_start_seed`` fixed), the prompt of every update and the uniforms of every sample (both
derived from ``seed``, :mod:`llm_runs.delay`, :mod:`llm_runs.rollout`), so that estimators
differ only through their updates. Runs go seed-major (a partial grid holds whole seeds), at
most ``--jobs`` at a time, through :func:`llm_runs.sweep.run_sweep` (resumable; a folder of
other settings is refused, never overwritten). ``--dry-run`` prices the plan with the step
costs measured by the pilot (:data:`STEP_COST_S`), or with ``--cost-from DIR`` (a folder of
finished runs whose ``perf/`` columns are read).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from schema.results import HORIZON_TASKS

from .sweep import Cell, run_sweep

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
    "long": {"task": HORIZON_TASKS["long"], "terms": 7, "train_size": 20000, "warm_start_steps": 700, "warm_start_lr": 2e-3},
}
"""Horizon -> task settings. short: ``3+5+9=`` -> ``17`` (H <= 3 tokens with EOS); long: seven
one-digit operands with every partial sum written out, ``08,17,...`` (H = 18 tokens)."""

HORIZON_TERMS = (2, 3, 4, 5, 6, 7)
"""The horizon grid's operand counts: scratchpad completions of H = 3 (terms - 1) = 3, 6, ..., 18 tokens."""


HORIZON_WARM_START_STEPS = {2: 150, 3: 200, 4: 300, 5: 425, 6: 500, 7: 700}
"""Warm-start steps per operand count: the fewest multiple of 25 (at most the long horizon's
700) after which the held-out pc reaches the long horizon's warm-start pc (0.514), measured by
running the warm start's own loop with an evaluation every 25 steps. So every H starts from a
comparable policy; the long horizon's 700 steps would start the short ones near-solved (pc
0.77 at terms = 2, whose 80 training problems bound it, and 0.98 at terms = 3). Reached
(pc): 150 (0.515), 200 (0.544), 300 (0.604), 425 (0.673), 500 (0.603), 700 (0.514)."""


def scratchpad_settings(terms: int) -> dict:
    """The long horizon's task settings with ``terms`` operands (:data:`HORIZON_GRID`). Its
    20,000 training problems need terms >= 5 (one-digit operands give 10^terms problems):
    below that the pool is every problem not held out, and at terms = 2 (100 problems) the
    held-out split is 20 problems. The warm start is the long horizon's (lr 2e-3) with
    :data:`HORIZON_WARM_START_STEPS` steps."""
    out = {**HORIZONS["long"], "terms": terms, "warm_start_steps": HORIZON_WARM_START_STEPS[terms]}
    if 10**terms < HORIZONS["long"]["train_size"] + STUDY_BASE["heldout_size"]:
        out["train_size"] = None
    if terms == 2:
        out["heldout_size"] = 20
    return out


HORIZON_GRID = {f"H{3 * (t - 1)}": scratchpad_settings(t) for t in HORIZON_TERMS}
"""Horizon label ``H<tokens>`` -> task settings, the label being the run's H (the runs' own
horizon is read back from their config by :func:`schema.results.horizon_tokens`)."""

HORIZON_BASE = {**STUDY_BASE, "steps": 60, "eval_every": 0, "checkpoint_every": 0}
"""The horizon grid's settings: the study's, but 60 updates, held-out evaluation at the start
and end only, and no checkpoint before the end."""

ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "token_clip", "gspo", "m2po", "cispo", "topr", "opsm",
              "seq_tis_bn")

SGD_PILOT_LRS = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3)
"""SGD step sizes of the pilot (one seed). Adam's per-coordinate step of lr 1e-4 moves the 247k
parameters by about 1e-4 sqrt(247k) = 0.05 per update and the study's gradient norms at delay 0
have a median of about 23, so SGD at eta ~ 2e-3 would move them as far; but a first pilot found
eta = 1e-3 and 3e-3 (and 1e-2, 3e-2, stopped early) collapsing at delay 0 within 20 updates
(the reward fell from 0.42 to 0.09 after one step at 1e-3: the gradient is concentrated on few
coordinates), so the grid reaches down to 3e-5."""

STEP_COST_S = {"short": 0.121, "long": 0.532}
"""Median seconds per update (rollout + update) measured by the pilots (``--cost-from
results/llm/pilot`` and ``results/llm/pilot_short`` recompute them), one run at a time on the
2-core machine while it was shared (load about 5): long 0.23 s rollout + 0.30 s update."""
EVAL_COST_S = {"short": 0.19, "long": 0.59}
"""Median seconds per held-out evaluation (200 problems), same pilots."""
STEP_COST_S.update({h: STEP_COST_S["long"] * int(h[1:]) / 18 for h in HORIZON_GRID})
EVAL_COST_S.update({h: EVAL_COST_S["long"] * int(h[1:]) / 18 for h in HORIZON_GRID})
RUN_OVERHEAD_S = 8.0
"""Process start, model load, final checkpoint and summary of one run."""


@dataclass(frozen=True)
class StudyCell(Cell):
    """One run of the study: a :class:`~llm_runs.sweep.Cell` with its horizon (and arm) in the name."""

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
    async_estimators: tuple[str, ...] = ()  # (the sweep driver's field; the study has none)
    arms: tuple[Arm, ...] = ()  # intervention arms; none: ``estimators`` under ``base`` only

    def settings(self) -> dict:
        """What ``sweep.json`` records (and a continued grid must match); a grid without arms
        records exactly what it recorded before arms existed."""
        drop = ("out", "doc") + (() if self.arms else ("arms",))
        return json.loads(json.dumps({k: v for k, v in dataclasses.asdict(self).items() if k not in drop}))

    def default_out(self) -> Path:
        """``out`` under the results root (``GMC_RESULTS`` or ``results/``)."""
        from schema.results import results_root

        return results_root() / Path(self.out).relative_to("results")

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


SGD_LR = 1e-4
"""The mechanism grid's SGD step eta: of the pilot's step sizes whose held-out pc never fell below
the warm start's at delay 0, the one whose gain over 200 updates is closest to Adam's (seed 0:
SGD 1e-4 +0.161, Adam lr 1e-4 +0.163; 3e-4 gained +0.162 but fell to 0.476 on the way; 1e-3 and
above collapse at delay 0; docs/PREREGISTRATION-MECHANISM.md)."""

MECHANISM_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr")
"""The optimiser arms' estimators: GMC, IS (no correction), the two TIC schemes, TOPR."""

MECHANISM_ARMS = (
    Arm("sgd", {"optimizer": "sgd", "lr": SGD_LR}, MECHANISM_ESTIMATORS),
    Arm("adamclip", {"max_grad_norm": 1.0}, MECHANISM_ESTIMATORS),
    Arm("adamwclip", {"optimizer": "adamw", "weight_decay": 0.01, "max_grad_norm": 1.0}, MECHANISM_ESTIMATORS),
    Arm("adam", {}, ("gmc", "topr", "gmc_cap", "gmc_topr", "topr_gmc", "snis"), zero_delay=False),
    Arm("adamk2", {"gmc_cap_kappa": 2.0}, ("gmc_cap",), zero_delay=False),
)
"""docs/PREREGISTRATION-MECHANISM.md's arms: the optimiser arms (SGD with a fixed step, Adam with
the gradient norm clipped at 1, AdamW + decay 0.01 + clip 1: verl's actor), and the scheme arm
under the study's unclipped Adam (its gmc and topr again, with the diagnostics, as the full-length
replay of the committed runs they reuse)."""

NEWCOMERS_2025 = ("icepop", "seq_geo_mask", "sapo", "vespo", "dppo_tv")
"""The corrections verl, TRL, AReaL and prime-rl added in 2025-2026 (:mod:`estimators.peers_2025`,
:mod:`estimators.losses`)."""

STUDIES = {
    "primary": Study("primary", "results/llm/study", STUDY_BASE, HORIZONS, ESTIMATORS, delays=(16, 64),
                     seeds=tuple(range(10)),
                     doc="11 estimators x delays 16, 64 + stale at 64 + one delay-0 run, x short and long "
                         "horizon, x 10 paired seeds (480 runs of 200 updates)"),
    "horizon": Study("horizon", "results/llm/horizon", HORIZON_BASE, HORIZON_GRID, ("gmc",), delays=(16,),
                     seeds=(0, 1, 2), floor=(), zero_delay=None,
                     doc="chi^2 against the horizon: GMC at delay 16 on the scratchpad task with 2..7 operands "
                         "(H = 3..18 tokens), 60 updates, 3 seeds (18 runs)"),
    "pilot": Study("pilot", "results/llm/pilot", STUDY_BASE, {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1, 2),
                   floor=(), doc="delay 0, long horizon, 3 seeds: the learning curve, step costs and seed spread"),
    "pilot_short": Study("pilot_short", "results/llm/pilot_short", STUDY_BASE, {"short": HORIZONS["short"]}, (),
                         delays=(), seeds=(0, 1, 2), floor=(), doc="the same at the short horizon"),
    "pilot_long_steps": Study("pilot_long_steps", "results/llm/pilot_long_steps",
                              {**STUDY_BASE, "steps": 800, "eval_every": 40, "checkpoint_every": 100},
                              {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1, 2), floor=(),
                              doc="delay 0, long horizon, 800 updates (four times the study's), 3 seeds: how much "
                                  "of the pc gain the study's 200 updates leave (exploratory, after the grid)"),
    "mechanism": Study("mechanism", "results/llm/mechanism", {**STUDY_BASE, "mechanism_diagnostics": True},
                       {"long": HORIZONS["long"]}, (), delays=(64,), seeds=tuple(range(10)), floor=(),
                       arms=MECHANISM_ARMS,
                       doc="why GMC fails on long completions (docs/PREREGISTRATION-MECHANISM.md): optimiser arms "
                           "(sgd, adamclip, adamwclip) x gmc, is, tic_mask, tic_trunc, topr + a delay-0 run each, and "
                           "scheme arms under unclipped Adam (gmc, topr, gmc_cap, gmc_topr, topr_gmc, snis; gmc_cap "
                           "kappa 2), long horizon, d = 64, 10 paired seeds (250 runs of 200 updates)"),
    "pilot_large": Study("pilot_large", "results/llm/pilot_large", {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE},
                         {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1), floor=(),
                         doc="the larger model (STUDY_MODEL_LARGE) at delay 0, long horizon, the study's warm start "
                             "recipe and lr, 2 seeds: its warm-start pc, gain and step cost before M5's grid"),
    "pilot_sgd": Study("pilot_sgd", "results/llm/pilot_sgd", STUDY_BASE, {"long": HORIZONS["long"]}, (), delays=(),
                       seeds=(0,), floor=(),
                       arms=tuple(Arm(f"sgd{lr:g}", {"optimizer": "sgd", "lr": lr}, ()) for lr in SGD_PILOT_LRS),
                       doc="SGD (fixed step, no momentum) at delay 0, long horizon, step sizes "
                           f"{', '.join(f'{lr:g}' for lr in SGD_PILOT_LRS)}, seed 0: the step whose held-out gain "
                           "over 200 updates is closest to Adam's (the mechanism grid's SGD arm)"),
    "peers_2025": Study("peers_2025", "results/llm/study_2025", STUDY_BASE,
                        {"short": {**HORIZONS["short"], "geo_length": 3.0},
                         "long": {**HORIZONS["long"], "geo_length": 18.0}},
                        NEWCOMERS_2025, delays=(16, 64), seeds=tuple(range(10)), floor=(), zero_delay=None,
                        doc="exploratory, not pre-registered: the 2025-2026 corrections at the primary grid's "
                            "delays, horizons, warm starts and seeds (200 runs); seq_geo_mask averages over "
                            "L = 18 tokens at the long horizon (every completion has 18) and L = 3 at the short "
                            "one (completions of at most 3 tokens: not verl's per-completion rule there)"),
}


# --------------------------------------------------------------------------- pricing


def horizon_label(config: dict, horizons: dict) -> str | None:
    """The label of the horizon in ``horizons`` whose every task setting the run's stored
    ``config`` has (None if none does)."""
    for h, task in horizons.items():
        if all(config.get(k) == v for k, v in task.items()):
            return h
    return None


def measured_costs(folder: str | Path, horizons: dict | None = None) -> tuple[dict, dict]:
    """(step cost, eval cost) per horizon label of ``horizons`` (default: the primary study's)
    from the finished runs under ``folder``: the median ``perf/step_s`` and ``perf/eval_s``
    (a run's horizon is the one whose task settings it has, :func:`horizon_label`)."""
    import pandas as pd

    from schema.results import metrics_path, read_metrics_csv, read_run_config, run_folders

    steps, evals = {}, {}
    for run in run_folders(folder):
        path = metrics_path(run)
        h = horizon_label(read_run_config(run), horizons or HORIZONS)
        if h is None:
            continue
        m = read_metrics_csv(path)
        steps.setdefault(h, []).extend(m["perf/step_s"].dropna().tolist())
        evals.setdefault(h, []).extend(m["perf/eval_s"].dropna().tolist())
    med = lambda x: float(pd.Series(x).median())
    if not steps:
        raise ValueError(f"no finished study or pilot run under {folder} to measure step costs from")
    return {h: med(v) for h, v in steps.items()}, {h: med(v) for h, v in evals.items()}


def estimate_seconds(cells: list[StudyCell], jobs: int, step_cost: dict | None = None,
                     eval_cost: dict | None = None) -> float:
    """Wall time of ``cells`` run ``jobs`` at a time: the sum of per-run costs / jobs (runs are
    short and many, so the schedule packs well). A horizon without a measured cost is an error."""
    step_cost, eval_cost = step_cost or STEP_COST_S, eval_cost or EVAL_COST_S
    total = 0.0
    for c in cells:
        if c.horizon not in step_cost:
            raise ValueError(f"no measured step cost for horizon {c.horizon!r} (have {sorted(step_cost)})")
        o = c.overrides
        n_eval = o["steps"] // o["eval_every"] + 2 if o["eval_every"] else 2
        total += o["steps"] * step_cost[c.horizon] + n_eval * eval_cost.get(c.horizon, 0.0) + RUN_OVERHEAD_S
    return total / max(1, jobs)


def missing_estimators(study: Study) -> list[str]:
    """Estimators of the study that :func:`estimators.losses.loss_names` does not know (yet)."""
    from estimators.losses import loss_names

    known = set(loss_names())
    return [e for e in study.estimator_names() if e not in known]


# --------------------------------------------------------------------------- the grid check


@dataclass
class Audit:
    """What :func:`audit` found under a grid folder. ``foreign``: folders that are no run of the
    grid (an unknown name, or a known name run with other settings: ``{name: why}``);
    ``no_metrics``: run folders of the grid holding a ``config.json`` but no metrics table;
    ``runs``: the folders a reader may use."""

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


def audit(root: str | Path) -> Audit:
    """Check every folder under ``root`` against the grid that made it.

    A folder with a ``sweep.json`` naming a grid of :data:`STUDIES` (what :func:`run_sweep`
    writes) is checked run by run against that grid's plan: a folder whose name is no cell of
    the grid, or whose stored settings differ from the cell's (:func:`llm_runs.config.config_diff`,
    the check ``--dry-run`` and ``--resume`` make), is foreign. Without a ``sweep.json`` (a folder
    assembled by hand) every run must agree with the others on every setting outside
    :data:`_FREE_FIELDS` and no two runs may be the same cell; the odd ones out are foreign.
    """
    from schema.results import metrics_path

    root = Path(root)
    folders = [p for p in sorted(root.iterdir()) if p.is_dir() and (p / "config.json").is_file()]
    settings_file = root / "sweep.json"
    key = (str(root.resolve()), settings_file.stat().st_mtime_ns if settings_file.is_file() else None,
           tuple((p.name, (p / "config.json").stat().st_mtime_ns, metrics_path(p) is not None) for p in folders))
    if key in _AUDITS:
        return _AUDITS[key]
    _AUDITS[key] = found = _audit(root, folders)
    return found


_AUDITS: dict = {}
"""audit's results in this process, keyed by the folder's run configs and their modification times."""


def _audit(root: Path, folders: list[Path]) -> Audit:
    from schema.results import metrics_path, read_run_config

    from .config import config_diff, resolve_config

    no_metrics = [p.name for p in folders if metrics_path(p) is None]
    runs = [p for p in folders if metrics_path(p) is not None]
    foreign: dict[str, str] = {}
    stored = {p.name: read_run_config(p) for p in runs}
    grid = None
    settings_file = root / "sweep.json"
    if settings_file.is_file():
        grid = json.loads(settings_file.read_text()).get("settings", {}).get("name")
        if grid not in STUDIES:
            raise ValueError(f"{settings_file} names grid {grid!r}, which is not one of {sorted(STUDIES)}")
        cells = {c.name: c for c in STUDIES[grid].cells()}
        for p in folders:
            cell = cells.get(p.name)
            if cell is None:
                foreign[p.name] = f"no cell of grid {grid} has this name"
                continue
            if p.name in stored:
                diff = config_diff(stored[p.name], resolve_config(cell.overrides).to_dict())
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
    return Audit(grid, [p for p in runs if p.name not in foreign], foreign, no_metrics)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.study", description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default="primary", choices=sorted(STUDIES), help="which grid (default: primary)")
    p.add_argument("--out", default=None, help="study folder (default: the grid's own)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--resume", action="store_true", help="continue interrupted runs")
    p.add_argument("--dry-run", action="store_true", help="print the runs, their state and the estimated time")
    p.add_argument("--cost-from", default=None, help="price the plan with the step costs measured in this folder")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--pack", action="store_true",
                   help="only pack the finished runs' metrics.csv as metrics.csv.gz (same bytes; runs after a sweep too)")
    args = p.parse_args(argv)
    study = STUDIES[args.grid]
    out = Path(args.out) if args.out else study.default_out()
    try:
        if args.pack:
            n = pack_finished(study, out)
            print(f"study {study.name}: packed {n} finished runs under {out}")
            return 0
        cells = study.cells()
        step_cost, eval_cost = measured_costs(args.cost_from, study.horizons) if args.cost_from else (None, None)
        est = estimate_seconds(cells, args.jobs, step_cost, eval_cost)
        missing = missing_estimators(study)
        if args.dry_run:
            from .config import resolve_config
            from .sweep import run_state

            for c in cells:
                if c.estimator in missing:
                    state = "estimator not registered"
                elif (out / c.name).exists():
                    state = run_state(out / c.name, resolve_config(c.overrides).to_dict())
                else:
                    state = "new"
                print(f"{c.name:34s} {state}")
            per_h = {h: sum(c.horizon == h for c in cells) for h in study.horizons}
            print(f"{len(cells)} runs ({', '.join(f'{n} {h}' for h, n in per_h.items())}), {len(study.seeds)} seeds, "
                  f"{args.jobs} at a time: estimated {est / 3600:.2f} h"
                  + (f"; not registered yet: {', '.join(missing)}" if missing else ""))
            return 0
        if missing:
            raise ValueError(f"estimators {missing} are not registered (estimators.losses.loss_names()): the grid "
                             f"needs every one of them; nothing was run")
        _warm_starts(study)
        o = run_sweep(study, out, resume=args.resume, jobs=args.jobs, progress=not args.no_progress)
        pack_finished(study, out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"study {study.name}: {len(o.ran)} runs done, {len(o.skipped)} already complete, {len(o.failed)} failed, "
          f"{len(o.interrupted)} interrupted; {o.wall_s / 60:.1f} min; summary {o.summary}")
    if o.interrupted:
        print(f"interrupted: continue with python -m llm_runs.study --grid {args.grid} --resume")
        return 130
    return 1 if o.failed else 0


def pack_finished(study: Study, out: Path) -> int:
    """Pack (:func:`schema.results.pack_metrics`) the metrics of every finished run of ``study``
    under ``out``: the committed study must fit the results budget, and a finished run's table
    never changes again. A folder a live trainer holds is refused (:func:`schema.runlock.check_free`).
    Returns the number of runs newly packed."""
    from schema.results import PACKED_METRICS_FILE, metrics_path, pack_metrics
    from schema.runlock import check_free

    n = 0
    for c in study.cells():
        run = Path(out) / c.name
        if not (run / "summary.json").is_file():
            continue
        path = metrics_path(run)
        if path is None or path.name == PACKED_METRICS_FILE:
            continue
        check_free(run)
        pack_metrics(run)
        n += 1
    return n


def _warm_starts(study: Study) -> None:
    """One warm start per horizon, computed before any run (runs would otherwise race for it)."""
    import torch

    from .config import resolve_config
    from .tasks import build_task
    from .warmstart import get_warm_start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for task in study.horizons.values():
            cfg = resolve_config({**study.base, **task})
            get_warm_start(cfg, build_task(cfg))
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    sys.exit(main())
