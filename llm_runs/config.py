"""The run configuration: one dataclass, every field documented with its THEORY.md symbol.

Each field carries ``metadata = {"symbol": ..., "help": ...}``; the CLI (``python -m
llm_runs.train --help``) is generated from it, so the flags and the dataclass cannot
drift apart. :func:`TrainConfig.validate` refuses a bad configuration with a
``ValueError`` before any work (no directory, no warm start, no model load, never a hub
download).

New settings (async mode, GSM8K, ...) are added as fields here, and presets, tasks and
rollout modes are registered in their own modules; :func:`resolve_config` layers dataclass
defaults < preset defaults < explicit values. A field added after runs were made also gets
an entry in :data:`schema.results.LEGACY_FIELDS` (the value those runs actually used); an estimator's
knob is not written here: its field is derived from the estimator's record
(:func:`estimators.params.knob_field`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_checks import CHECKS


def _f(default, symbol: str, help: str, **kw):
    """A dataclass field (immutable default) with its THEORY.md symbol and a one-line help (used by the CLI)."""
    return field(default=default, metadata={"symbol": symbol, "help": help, **kw})


def _with_knobs(cls):
    """``cls`` as a dataclass with one field per knob of :data:`estimators.params.PARAMS` (by estimator name,
    after ``eps_high``): default, symbol and meaning from the knob's record (the one definition), tagged
    ``knob = (estimator, param)``. A new estimator's knobs become config fields with no edit here."""
    from estimators.params import PARAMS, knob_field

    knobs = {knob_field(est, p.name): (est, p) for est in sorted(PARAMS) for p in PARAMS[est]}
    taken = sorted(set(knobs) & set(cls.__annotations__))
    if taken:
        raise ValueError(f"knob field(s) {taken} would shadow config fields of the same name")
    annotations = {}
    for name, kind in cls.__annotations__.items():
        annotations[name] = kind
        if name == "eps_high":
            for fname, (est, p) in knobs.items():
                annotations[fname] = "float"
                setattr(cls, fname, _f(p.default, p.symbol, f"{est} only: {p.doc}", knob=(est, p.name)))
    cls.__annotations__ = annotations
    return dataclass(cls)


def _takers(option: str) -> tuple[str, ...]:
    """The token losses whose record takes ``option`` beyond their knobs (``options=`` of
    :func:`estimators.losses.register_token_loss`), in registration order; read when asked, so a loss
    registered later is among them."""
    from estimators.losses import TOKEN_LOSSES

    return tuple(n for n, t in TOKEN_LOSSES.items() if option in t.options)


def _estimator_help() -> str:
    from estimators import SCHEMES
    from estimators.losses import TOKEN_LOSSES

    return (f"estimator (THEORY §2): a trajectory scheme, {', '.join(SCHEMES)}; or a token-level loss: "
            f"{', '.join(TOKEN_LOSSES)} (token_clip: f)")


@_with_knobs
class TrainConfig:
    """Every setting of one training run (written to ``config.json`` before step 0).

    Symbols refer to THEORY.md (§1 setting, §2 estimators). "-" marks an engineering
    setting with no symbol in the theory.
    """

    # --- model -------------------------------------------------------------------------
    preset: str = _f("tiny-cpu", "pi_theta", "model preset: architecture, tokenizer and loader of the policy pi_theta")
    model_path: str | None = _f(None, "theta_0", "local folder with initial weights + tokenizer (from_pretrained; "
                                "never downloaded); required by presets that need it")
    model_kwargs: dict = field(default_factory=dict, metadata={
        "symbol": "-",
        "help": "JSON dict of architecture overrides for built presets (e.g. '{\"num_hidden_layers\": 2}')"})
    dtype: str = _f("float32", "-", "parameter dtype: float32 | bfloat16 | float16")
    amp: str = _f("none", "-", "mixed precision: none | bfloat16 (float32 master weights and Adam state, forward "
                  "passes under bf16 autocast; the GPU presets' default: pure bf16 weights cannot take Adam steps of "
                  "lr 1e-6)")
    device: str = _f("cpu", "-", "torch device for policy, snapshots and rollouts")
    threads: int = _f(1, "-", "torch CPU threads (numerics depend on it: keep it fixed across resume)")

    # --- task ----------------------------------------------------------------------------
    task: str = _f("arithmetic", "q ~ D, r(q,o)", "task: prompt distribution D and verifiable reward r in {0,1} "
                   "(THEORY §1): arithmetic, scratchpad, scratchpad_answer, gsm8k")
    digits: int = _f(1, "-", "arithmetic, scratchpad: digits per operand (operands 0 .. 10^digits - 1)")
    terms: int = _f(3, "-", "arithmetic, scratchpad: number of operands per problem (scratchpad: the horizon knob, "
                    "completions of exactly H = (terms - 1)(W + 1) tokens, W the width of the largest sum)")
    heldout_size: int = _f(200, "-", "problems in the held-out evaluation split (never trained on)")
    train_size: int | None = _f(None, "-", "problems in the training pool (None: every remaining problem, up to "
                                "100000)")
    task_seed: int = _f(0, "-", "seed of the problem split (shared across RL seeds)")
    gsm8k_path: str | None = _f(None, "D", "gsm8k: local JSONL file, folder of <split>.jsonl or datasets save_to_disk "
                                "folder (never downloaded)")
    gsm8k_prompt: str = _f("Question: {question}\nAnswer:", "q", "gsm8k: prompt template, {question} replaced by the "
                           "problem text")

    # --- warm start (supervised) ---------------------------------------------------------
    warm_start_steps: int = _f(50, "-", "supervised steps before RL (0: none); cached under cache_dir by a hash of its "
                               "settings")
    warm_start_lr: float = _f(1e-3, "-", "Adam learning rate of the warm start")
    warm_start_batch: int = _f(128, "-", "problems per warm-start step (drawn with replacement from the training pool)")
    warm_start_seed: int = _f(0, "-", "seed of the initial weights and warm-start batches (shared across RL seeds)")
    cache_dir: str = _f("results/cache", "-", "where warm-start checkpoints are cached (keyed by a hash of their "
                        "settings)")

    # --- GRPO ----------------------------------------------------------------------------
    estimator: str = _f("gmc", "c_i", _estimator_help())
    eps: float = _f(0.2, "epsilon", "ratio threshold 1+epsilon (GMC mass cap, TIC clip; token_clip/opsm: lower clip)")
    eps_high: float | None = _f(None, "epsilon_high", f"{'/'.join(_takers('eps_high'))} upper clip (None: = eps); "
                                "ignored by the others", option="eps_high")
    advantage: str = _f("loo", "A_i", "advantage (THEORY §1): loo (canonical), grpo, drgrpo")
    group_size: int = _f(8, "G", "completions per prompt (one group)")
    prompts_per_step: int = _f(32, "B", "groups (prompts) per update; batch = B * G completions")
    steps: int = _f(200, "T", "number of updates")
    lr: float = _f(1e-4, "eta", "Adam learning rate (constant)")
    max_grad_norm: float | None = _f(None, "-", "clip the gradient norm (None: never; the estimator's own bound is "
                                     "what is studied)")
    optimizer: str = _f("adam", "-", "optimiser of the RL updates (llm_runs.optim.OPTIMIZERS): adam (the study's), "
                        "adamw (decoupled weight decay; verl's actor), sgd (a fixed step eta, THEORY §4's setting)")
    momentum: float = _f(0.0, "beta", "sgd only: heavy-ball momentum (0: plain SGD, THEORY §4's setting)")
    weight_decay: float = _f(0.0, "-", "weight decay: decoupled for adamw (verl's actor default 0.01, TRL's 0), the "
                             "L2 term of the gradient for adam and sgd; 0: none")
    mechanism_diagnostics: bool = _f(False, "-", "log the mech/ columns every update (update direction against IS's, "
                                     "heaviest trajectory's share of the gradient, step norm, KL to the behaviour "
                                     "policy; llm_runs.mechanism): one more backward pass per update")
    micro_batch_groups: int = _f(0, "-", "groups per forward/backward chunk (0: all); the gradient is the same up to "
                                 "rounding")

    # --- step-size control (llm_runs.stepsize; off by default) ----------------------------
    ess_scaling: str = _f("none", "eta_t", "scale the step by the update batch's sequence ESS ratio rho_ess = "
                          "(sum w)^2 / (N sum w^2) (VCPO's actor.ess_scaling): none | sqrt "
                          "(eta sqrt(min(1, rho/base)), VCPO's rule for AdamW-style optimisers) | linear "
                          "(eta min(1, rho/base))")
    ess_base_ratio: float = _f(1.0, "rho_0", "ess_scaling: the ratio at which the step is not reduced "
                               "(VCPO's ess_scaling.base_ess_ratio)")
    ess_use_clipped: bool = _f(False, "-", "ess_scaling: compute rho_ess on the estimator's trajectory weights "
                               "(seq_tis: min(w, C), VCPO's use_clipped) instead of the raw ratios w")
    gmc_step: bool = _f(False, "s_t", "GMC's step form (THEORY §8): scale the step by s_t = mean over the batch's "
                        "groups of GMC's factor min(1, (1+eps) / mean_i w_i), whatever the estimator")
    skip_zero_grad: bool = _f(False, "-", "do not step the optimiser on an update whose gradient is exactly zero (Adam "
                              "would keep moving on its momentum)")
    opob_norm_by_std: bool = _f(True, "-", "advantage opob: divide (R_i - b*) by the group's reward std "
                                "(VCPO's grad_baselining.norm_by_std)")
    opob_flat_zero: bool = _f(True, "-", "advantage opob: a group whose rewards are all equal gets advantages "
                              "exactly 0 (VCPO's formula leaves R (1 - sum W / (sum W + 1e-8)) there)")
    opob_weight: str = _f("is", "W_i", "advantage opob: the baseline's weight: is = w_i^2 ||grad log pi(o_i)||^2 "
                          "(VCPO's paper) | vcpo = c_i^2 w_i^2 ||grad log pi(o_i)||^2, c_i the estimator's trajectory "
                          "weight (VCPO's code: the norm of the trajectory's loss gradient, which carries its "
                          "truncated IS weight, times use_is_weights' w^2)")
    opob_std: str = _f("sample", "-", "advantage opob with opob_norm_by_std: the group's reward std, sample "
                       "(Bessel-corrected, like the group's GRPO std) | population (VCPO's torch.std(unbiased=False))")
    traj_agg: str = _f("sum", "-", "trajectory estimators: sum = THEORY's term c_i A_i grad log pi(o_i) | token-mean "
                       "= that term over |o_i|, each trajectory's gradient averaged over its tokens (VCPO's "
                       "loss_agg_mode seq-mean-token-mean)")
    drift_diagnostics: bool = _f(False, "-", "log the drift/ columns every update (KL per token, ESS ratio, median "
                                 "|log w|; ratios only, the update is unchanged)")
    early_warning: str = _f("off", "-", "the frozen early warning of collapse (llm_runs.warning): off, log (warn/ "
                            "columns and one logged warning when it fires), stop (then checkpoint and stop), "
                            "lower_step (then every later step x 0.5)")

    # --- rollouts and delay ----------------------------------------------------------------
    mode: str = _f("controlled", "-", "rollout source (llm_runs.rollout_sources.ROLLOUT_SOURCES): controlled = delay "
                   "from a snapshot ring; async = a rollout worker process (llm_runs.async_rollout)")
    delay: int = _f(0, "d", "rollout delay in policy versions: update t uses samples from theta_{t-d_t}")
    delay_mode: str = _f("fixed", "d_t", "fixed: d_t = min(d, t); uniform: d_t ~ U{0..d}, capped at t")
    max_staleness: int = _f(4, "d", "async: maximum staleness t - version of a sample used by update t; older samples "
                            "are dropped and counted (stale/dropped)")
    sync_every: int = _f(1, "-", "async: the rollout worker gets the learner's weights every this many updates k "
                         "(needs k - 1 <= max_staleness)")
    queue_size: int = _f(2, "-", "async: finished rollout batches the worker may queue ahead of the learner")
    worker_timeout_s: float = _f(300.0, "-", "async: stop (checkpoint + error) when the rollout worker delivers "
                                 "nothing for this many seconds")
    temperature: float = _f(1.0, "tau", "sampling temperature (1: sample pi_theta itself; other values also score "
                            "pi_theta at tau)")
    top_k: int = _f(0, "-", "top-k truncation of the behaviour policy (0: none; biases the ratio, warned)")
    top_p: float = _f(1.0, "-", "top-p truncation of the behaviour policy (1: none; biases the ratio, warned)")
    max_new_tokens: int | None = _f(None, "|o|", "maximum completion length (None: the task's answer length + EOS)")
    seed: int = _f(0, "-", "RL seed: prompt choice, delay draws and per-sample sampling keys (seed, step, prompt, "
                   "sample)")

    # --- evaluation and checkpoints --------------------------------------------------------------
    eval_every: int = _f(10, "-", "greedy accuracy and pc every this many updates (and at the end; 0: start and end "
                         "only)")
    eval_train_size: int = _f(200, "-", "training-pool problems also evaluated (0: held-out only)")
    eval_batch_size: int = _f(256, "-", "problems per evaluation forward")
    checkpoint_every: int = _f(25, "-", "save a resumable checkpoint every this many updates (0: only at the end / on "
                               "signal)")
    keep_checkpoints: int = _f(2, "-", "number of most recent checkpoints kept")

    # ------------------------------------------------------------------------------------------
    def validate(self) -> TrainConfig:
        """Refuse a bad configuration (ValueError naming the value): the checks of
        :data:`llm_runs.config_checks.CHECKS`, in order. Touches no file except the existence check
        of ``model_path``; never downloads."""
        for check in CHECKS:
            check(self)
        return self

    # ------------------------------------------------------------------------------------------
    def loss_options(self) -> dict[str, Any]:
        """The knobs of :attr:`estimator` as :func:`estimators.losses.policy_loss` options."""
        out = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("knob", ("",))[0] == self.estimator:
                out[f.metadata["knob"][1]] = getattr(self, f.name)
            if self.estimator in _takers(f.metadata.get("option", "")) and getattr(self, f.name) is not None:
                out[f.name] = getattr(self, f.name)
        return out

    # ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """The config of ``d``; a field under an older name (:data:`schema.runs.RENAMED_FIELDS`) reads as today's."""
        from schema.runs import renamed

        d = renamed(d)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; valid: {sorted(names)}")
        return cls(**d)

    def hash_of(self, keys: list[str], extra: dict | None = None) -> str:
        """Short stable hash of some fields (plus extra data): cache keys."""
        import hashlib

        payload = {k: getattr(self, k) for k in keys}
        payload.update(extra or {})
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(TrainConfig))


def resolve_config(explicit: dict[str, Any] | None = None, **kw) -> TrainConfig:
    """Dataclass defaults < the preset's defaults < explicit values; then validated.

    >>> resolve_config(estimator="gmc", delay=4).delay
    4
    """
    from .presets import get_preset

    values = dict(explicit or {})
    values.update(kw)
    base = TrainConfig.from_dict(values)  # refuses unknown keys
    preset = get_preset(base.preset)
    merged = {**{k: v for k, v in preset.defaults.items()}, **values}
    return TrainConfig.from_dict(merged).validate()


def load_run_config(out_dir: str | Path) -> TrainConfig:
    """The configuration stored in ``<out>/config.json`` (a bad file is a ValueError naming it)."""
    from schema.results import is_packed_run, read_run_config

    path = Path(out_dir) / "config.json"
    if not path.is_file() and not is_packed_run(out_dir):
        raise ValueError(f"{path} does not exist: {out_dir} is not a run directory")
    return TrainConfig.from_dict(read_run_config(out_dir))


def config_diff(stored: dict[str, Any], given: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (stored, given)}`` where a run's stored config and the given one differ; a field
    missing from either counts at its default. The one rule for resuming a run. Pass the stored
    config as :func:`schema.results.read_run_config` reads it: a field added after the run was
    made then holds the value the run used (:data:`schema.results.LEGACY_FIELDS`), not today's default.
    Both sides go through :func:`schema.runs.renamed`: a run stored with ``tis_cap`` is the same run as one
    planned with ``seq_tis_bn_c``."""
    from schema.runs import renamed

    stored, given = renamed(stored), renamed(given)
    defaults = TrainConfig().to_dict()
    return {k: (stored.get(k, defaults.get(k)), given.get(k, defaults.get(k)))
            for k in sorted(set(stored) | set(given))
            if stored.get(k, defaults.get(k)) != given.get(k, defaults.get(k))}
