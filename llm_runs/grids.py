"""The staleness study's grids as data (:data:`STUDIES`): the model, the shared settings, the
horizons, the estimators, delays, arms and seeds of each grid, and the step costs that price
them. :mod:`llm_runs.study` runs them; its docstring describes the design."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from schema.results import HORIZON_TASKS

from .sweep import Cell

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
    arms: tuple[Arm, ...] = ()  # intervention arms; none: ``estimators`` under ``base`` only
    pairs_with: tuple[str, ...] = ()  # grids whose runs its analysis pairs with (results/...): same warm start
    kernel_env: tuple[tuple[str, str], ...] = ()  # environment forcing a CPU kernel path for every run (recorded)

    def settings(self) -> dict:
        """What ``sweep.json`` records (and a continued grid must match); a grid without arms
        records exactly what it recorded before arms existed."""
        drop = (("out", "doc", "pairs_with") + (() if self.arms else ("arms",))
                + (() if self.kernel_env else ("kernel_env",)))
        found = {k: v for k, v in dataclasses.asdict(self).items() if k not in drop}
        found["async_estimators"] = []  # the sweep driver's field, which every study grid has recorded (empty)
        return json.loads(json.dumps(found))

    def default_out(self, root: Path | None = None) -> Path:
        """``out`` under the results root ``root`` (default: ``GMC_RESULTS`` or ``results/``)."""
        from schema.results import results_root

        return (results_root() if root is None else Path(root)) / Path(self.out).relative_to("results")

    def paired_folders(self) -> list[Path]:
        """The folders of the grids in ``pairs_with`` under the results root."""
        from schema.results import results_root

        return [results_root() / Path(f).relative_to("results") for f in self.pairs_with]

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

SCALE_ESTIMATORS = ("gmc", "is", "tic_trunc", "topr", "gspo")
"""M5's estimators at the larger model; the best M3/M4 variant joins them (its own folder, the same
warm start and seeds) once M3 and M4 are decided."""

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

NEWCOMER_HORIZONS = {"short": {**HORIZONS["short"], "geo_length": 3.0},
                     "long": {**HORIZONS["long"], "geo_length": 18.0}}
"""The study's horizons with seq_geo_mask's averaging length: L = 18 tokens at the long horizon
(every completion has 18), L = 3 at the short one (completions of at most 3 tokens). The grids of
the 2025-2026 corrections run them, so that an intervention on the mask changes nothing else."""

DRIFT_PILOT_LRS = {"sgd": (3e-4, 6e-4, 1e-3), "adamclip": (1e-5, 3e-5, 3e-4)}
"""The drift pilot's step sizes beside the mechanism grid's (SGD 1e-4, Adam + clip 1e-4, whose seed-0
runs it reuses): SGD up to the rate that collapsed at delay 0 in the SGD pilot, Adam + clip down to a
tenth of the study's rate, so the drift at d = 64 spans SGD's 1e-4 level to beyond Adam's."""


def drift_pilot_arms() -> tuple[Arm, ...]:
    """One arm per (optimiser, rate) of :data:`DRIFT_PILOT_LRS`: its delay-0 run and gmc, topr at d = 64."""
    arms = [Arm(f"sgd{lr:g}", {"optimizer": "sgd", "lr": lr}, ("gmc", "topr")) for lr in DRIFT_PILOT_LRS["sgd"]]
    arms += [Arm(f"adamclip{lr:g}", {"max_grad_norm": 1.0, "lr": lr}, ("gmc", "topr"))
             for lr in DRIFT_PILOT_LRS["adamclip"]]
    return tuple(arms)


DRIFT_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr", "gspo", "vespo")
"""The drift map's estimators, run at every level (docs/PREREGISTRATION-DRIFT.md)."""

DRIFT_LEVELS = {"sgd": (1e-4, 2e-4, 3e-4, 6e-4), "adamclip": (1e-5, 3e-5, 1e-4)}
"""The drift map's step sizes per optimiser (the drift pilot, docs/PREREGISTRATION-DRIFT.md): the
drift at d = 64 grows with the rate; SGD 6e-4 already degrades its delay-0 run (seed 0: pc 0.514 ->
0.227), so SGD cannot reach Adam's drift at a rate that learns. The 1e-4 levels of both optimisers
are the mechanism grid's arms (gmc, is, tic_mask, tic_trunc, topr and the delay-0 run, read from
results/llm/mechanism); the drift grid adds gspo and vespo there."""

DRIFT_OPTIMIZERS = {"sgd": {"optimizer": "sgd"}, "adamclip": {"max_grad_norm": 1.0}}
DRIFT_STUDY_LR = 1e-4
"""The Adam + clip rate of the step-size arms: the staleness study's (and the mechanism grid's)."""


def drift_level_arms(seeds_note: str = "") -> tuple[Arm, ...]:
    """One arm per (optimiser, rate) of :data:`DRIFT_LEVELS`: its delay-0 run and every drift
    estimator at d = 64, except at the mechanism grid's levels, where only gspo and vespo are new."""
    arms = []
    for opt, rates in DRIFT_LEVELS.items():
        for lr in rates:
            reused = lr == (SGD_LR if opt == "sgd" else DRIFT_STUDY_LR)
            ests = tuple(e for e in DRIFT_ESTIMATORS if not (reused and e in MECHANISM_ESTIMATORS))
            arms.append(Arm(f"{opt}{lr:g}", {**DRIFT_OPTIMIZERS[opt], "lr": lr}, ests, zero_delay=not reused))
    return tuple(arms)


def drift_step_arms() -> tuple[Arm, ...]:
    """The step-size arms at d = 64: under Adam + clip 1.0 at the study's rate, VCPO's recipe, ESS sqrt
    scaling on gmc, is and topr, GMC's step form on gmc; under the study's unclipped Adam (where the
    mask collapsed in 10 of 10 seeds), the zero-gradient skip on seq_geo_mask (L = 18)."""
    from .stepsize import RECIPES

    clip = {**DRIFT_OPTIMIZERS["adamclip"], "lr": DRIFT_STUDY_LR}
    vcpo = {k: v for k, v in RECIPES["vcpo"].items() if k != "estimator"}
    return (Arm("vcpo", {**clip, **vcpo}, (RECIPES["vcpo"]["estimator"],), zero_delay=False),
            Arm("ess", {**clip, "ess_scaling": "sqrt"}, ("gmc", "is", "topr"), zero_delay=False),
            Arm("gmcstep", {**clip, "gmc_step": True}, ("gmc",), zero_delay=False),
            Arm("skip0", {"skip_zero_grad": True, "geo_length": NEWCOMER_HORIZONS["long"]["geo_length"]},
                ("seq_geo_mask",), zero_delay=False))


DRIFT_BASE = {**STUDY_BASE, "drift_diagnostics": True}
"""The drift grids' shared settings: the study's, with the drift/ columns (ratios only)."""


def drift_decisive_arms() -> tuple[Arm, ...]:
    """Seeds 5-9 of the cells the hypotheses decide: gmc and topr at every level (D1, D2), the
    step-size arms (D3, D4, D6) and every drift estimator at Adam + clip 1e-5 (D7's level if the
    pilot's gains hold; the analysis names the level it used)."""
    arms = []
    for arm in drift_level_arms():
        keep = tuple(e for e in arm.estimators if e in ("gmc", "topr") or arm.label == "adamclip1e-05")
        if keep or arm.zero_delay:
            arms.append(Arm(arm.label, arm.overrides, keep, zero_delay=arm.zero_delay))
    return (*arms, *drift_step_arms())


AVX2_KERNELS = (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("DNNL_MAX_CPU_ISA", "AVX2"))
"""A second kernel path on an AVX-512 machine: torch's dispatch, MKL's and oneDNN's ISA limited to AVX2
(the setting the earlier investigation found to change the long warm start's outcome: pc 0.860
against 0.514). On this machine it changes the warm-start recipe's rounding
(:func:`llm_runs.warmstart.rounds_as_committed` is False under it)."""


def replicate_arms() -> tuple[Arm, ...]:
    """The cells the verdicts re-decided on the replicate rest on: the study's long horizon under its Adam
    (gmc, is, tic_mask, tic_trunc, topr, gspo at d = 64 and the delay-0 run: H1, H2, H4), the mechanism
    grid's SGD arm (gmc, is, tic_mask and its delay-0 run: M1) and its AdamW + clip arm (gmc, is, tic_mask,
    tic_trunc, topr and its delay-0 run: M2b)."""
    sgd, adamwclip = (next(a for a in MECHANISM_ARMS if a.label == name) for name in ("sgd", "adamwclip"))
    return (Arm("study", {}, ("gmc", "is", "tic_mask", "tic_trunc", "topr", "gspo")),
            Arm("sgd", {**sgd.overrides, "mechanism_diagnostics": True}, ("gmc", "is", "tic_mask")),
            Arm("adamwclip", {**adamwclip.overrides, "mechanism_diagnostics": True}, MECHANISM_ESTIMATORS))


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


def commit_warm_starts(which: tuple[str, ...] = tuple(COMMITTED_WARM_STARTS), log=print) -> None:
    """Commit this machine's warm starts of ``which`` (:func:`llm_runs.warmstart.commit`; never replaces one)."""
    from .tasks import build_task
    from .warmstart import commit

    for w in which:
        cfg = committed_config(w)
        commit(cfg, build_task(cfg), log)


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
                       arms=MECHANISM_ARMS, pairs_with=("results/llm/study",),
                       doc="why GMC fails on long completions (docs/PREREGISTRATION-MECHANISM.md): optimiser arms "
                           "(sgd, adamclip, adamwclip) x gmc, is, tic_mask, tic_trunc, topr + a delay-0 run each, and "
                           "scheme arms under unclipped Adam (gmc, topr, gmc_cap, gmc_topr, topr_gmc, snis; gmc_cap "
                           "kappa 2), long horizon, d = 64, 10 paired seeds (250 runs of 200 updates)"),
    "pilot_large": Study("pilot_large", "results/llm/pilot_large", {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE},
                         {"long": HORIZONS["long"]}, (), delays=(), seeds=(0, 1), floor=(),
                         doc="the larger model (STUDY_MODEL_LARGE) at delay 0, long horizon, the study's warm start "
                             "recipe and lr, 2 seeds: its warm-start pc, gain and step cost before M5's grid"),
    "scale": Study("scale", "results/llm/scale", {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE},
                   {"long": HORIZONS["long"]}, SCALE_ESTIMATORS, delays=(64,), seeds=tuple(range(5)), floor=(),
                   doc="M5 of docs/PREREGISTRATION-MECHANISM.md: the larger model (STUDY_MODEL_LARGE, 2.07M "
                       "parameters), the study's warm start recipe and lr (the pilot's addendum), long horizon, "
                       "gmc, is, tic_trunc, topr, gspo at d = 64 and a delay-0 run, 5 paired seeds (30 runs)"),
    "scale_mech": Study("scale_mech", "results/llm/scale_mech",
                        {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE, "mechanism_diagnostics": True},
                        {"long": HORIZONS["long"]}, ("gmc", "topr"), delays=(64,), seeds=tuple(range(5)), floor=(),
                        zero_delay=None, pairs_with=("results/llm/scale",),
                        doc="exploratory, not pre-registered: the scale grid's gmc and topr runs at d = 64 again "
                            "with the mechanism diagnostics on (they never change the update, so every column "
                            "the scale runs share must replay them byte for byte), for the drift and update-"
                            "direction columns at the larger model (10 runs)"),
    "scale_variants": Study("scale_variants", "results/llm/scale_variants",
                            {**STUDY_BASE, "model_kwargs": STUDY_MODEL_LARGE}, {"long": HORIZONS["long"]},
                            ("gmc_cap", "gmc_topr", "topr_gmc"), delays=(64,), seeds=tuple(range(5)), floor=(),
                            zero_delay=None, pairs_with=("results/llm/scale",),
                            doc="the mechanism study's three GMC variants at the larger model, d = 64, the scale "
                                "grid's warm start and seeds (15 runs): exploratory until M3/M4 pick the variant "
                                "M5's design adds (all three are run, so the pick needs no new run)"),
    "pilot_sgd": Study("pilot_sgd", "results/llm/pilot_sgd", STUDY_BASE, {"long": HORIZONS["long"]}, (), delays=(),
                       seeds=(0,), floor=(),
                       arms=tuple(Arm(f"sgd{lr:g}", {"optimizer": "sgd", "lr": lr}, ()) for lr in SGD_PILOT_LRS),
                       doc="SGD (fixed step, no momentum) at delay 0, long horizon, step sizes "
                           f"{', '.join(f'{lr:g}' for lr in SGD_PILOT_LRS)}, seed 0: the step whose held-out gain "
                           "over 200 updates is closest to Adam's (the mechanism grid's SGD arm)"),
    "peers_2025": Study("peers_2025", "results/llm/study_2025", STUDY_BASE,
                        NEWCOMER_HORIZONS, NEWCOMERS_2025, delays=(16, 64), seeds=tuple(range(10)), floor=(),
                        zero_delay=None,
                        pairs_with=("results/llm/study",),
                        doc="exploratory, not pre-registered: the 2025-2026 corrections at the primary grid's "
                            "delays, horizons, warm starts and seeds (200 runs); seq_geo_mask averages over "
                            "L = 18 tokens at the long horizon (every completion has 18) and L = 3 at the short "
                            "one (completions of at most 3 tokens: not verl's per-completion rule there)"),
    "geo_sgd": Study("geo_sgd", "results/llm/geo_sgd", STUDY_BASE, {"long": NEWCOMER_HORIZONS["long"]},
                     (), delays=(16, 64), seeds=tuple(range(5)), floor=(), zero_delay=None,
                     arms=(Arm("sgd", {"optimizer": "sgd", "lr": SGD_LR}, ("seq_geo_mask",), zero_delay=False),),
                     pairs_with=("results/llm/study",),
                     doc="exploratory, not pre-registered: seq_geo_mask under the mechanism grid's SGD (fixed step "
                         "SGD_LR, no momentum) at the long horizon, d = 16 and 64, the study's warm start and seeds "
                         "0-4 (10 runs): does the mask's collapse under Adam need Adam (its first steps leave the "
                         "0.1% window, then it keeps stepping on momentum while every sequence is masked)?"),
    "pilot_drift": Study("pilot_drift", "results/llm/pilot_drift", {**STUDY_BASE, "mechanism_diagnostics": True},
                         {"long": HORIZONS["long"]}, (), delays=(64,), seeds=(0,), floor=(), arms=drift_pilot_arms(),
                         pairs_with=("results/llm/study", "results/llm/mechanism"),
                         doc="the drift map's pilot (docs/PREREGISTRATION-DRIFT.md): SGD at 3e-4, 6e-4, 1e-3 and "
                             "Adam + clip 1.0 at 1e-5, 3e-5, 3e-4, each a delay-0 run and gmc, topr at d = 64, long "
                             "horizon, seed 0 (18 runs; the mechanism grid's seed 0 gives the 1e-4 rates): which "
                             "rates collapse at d = 0 and the drift each reaches at d = 64"),
    "drift": Study("drift", "results/llm/drift", DRIFT_BASE, {"long": HORIZONS["long"]}, (), delays=(64,),
                   seeds=tuple(range(5)), floor=(), arms=(*drift_level_arms(), *drift_step_arms()),
                   pairs_with=("results/llm/study", "results/llm/mechanism", "results/llm/study_2025"),
                   doc="the drift map (docs/PREREGISTRATION-DRIFT.md): SGD at 1e-4, 2e-4, 3e-4, 6e-4 and Adam + clip "
                       "1.0 at 1e-5, 3e-5, 1e-4, each with gmc, is, tic_mask, tic_trunc, topr, gspo, vespo at d = 64 "
                       "and a delay-0 run (the 1e-4 levels' first five estimators are the mechanism grid's runs), plus "
                       "the step-size arms (VCPO's recipe; ESS sqrt scaling on gmc, is, topr; GMC's step form; the "
                       "zero-gradient skip on seq_geo_mask under Adam), long horizon, seeds 0-4 (250 runs)"),
    "drift_decisive": Study("drift_decisive", "results/llm/drift_decisive", DRIFT_BASE, {"long": HORIZONS["long"]}, (),
                            delays=(64,), seeds=tuple(range(5, 10)), floor=(), arms=drift_decisive_arms(),
                            pairs_with=("results/llm/study", "results/llm/mechanism", "results/llm/drift"),
                            doc="seeds 5-9 of the drift map's decisive cells (docs/PREREGISTRATION-DRIFT.md): gmc and "
                                "topr at every level with the delay-0 runs, every drift estimator at Adam + clip "
                                "1e-5, and the step-size arms"),
    "replicate_avx2": Study("replicate_avx2", "results/llm/replicate_avx2", STUDY_BASE, {"long": HORIZONS["long"]}, (),
                            delays=(64,), seeds=tuple(range(10)), floor=(), arms=replicate_arms(),
                            pairs_with=("results/llm/study", "results/llm/mechanism"), kernel_env=AVX2_KERNELS,
                            doc="the second-rounding replicate (docs/PREREGISTRATION-REPLICATE.md): the study's long "
                                "horizon cells (gmc, is, tic_mask, tic_trunc, topr, gspo at d = 64 and d = 0), the "
                                "mechanism grid's SGD gmc, is, tic_mask and AdamW + clip gmc, is, tic_mask, tic_trunc, "
                                "topr cells (and their d = 0 runs), from the committed warm start, every run on AVX2 "
                                "kernels, seeds 0-9 (170 runs)"),
}
