"""Step-size control: corrections that act on the step rather than on the gradient.

A normalising optimiser throws away a common scale of the gradient (THEORY §8.1): under signSGD a
correction that shrinks every weight of the batch by one factor, as GMC does with one group per
batch, leaves the path where IS's is; under Adam only a factor constant in time does (a factor that
varies from step to step, as GMC's lambda_t does, moves Adam's path, but not by the factor itself:
the step length stays Adam's). These controls move that factor to the learning rate, where no
optimiser can undo it:

* **ESS scaling** (VCPO, Huang et al. 2026, arXiv 2602.17616; mit-han-lab/vcpo
  ``verl/workers/actor/megatron_actor.py:_optimizer_step_with_buffer`` and
  ``recipe/fully_async_policy/staleness_utils.py:compute_ess_info``): over the update's
  sequences, ``rho_ess = (sum_i w_i)^2 / ((sum_i w_i^2 + 1e-8) N)`` and the step is
  ``eta * min(1, rho_ess / base)^(1/2)`` (``sqrt``, their rule for AdamW-style optimisers) or
  ``eta * min(1, rho_ess / base)`` (``linear``); ``w`` are the raw sequence ratios or, with
  ``use_clipped``, the estimator's weights (VCPO: ``min(w, 8)``).
* **GMC's step form** (THEORY §8): ``eta * s_t`` with ``s_t = (1/B) sum_g lambda_g``, the mean over
  the batch's B groups of GMC's factor ``lambda_g = min(1, (1+eps) / mean_i w_gi)`` on the raw ratios,
  whatever the estimator.
* **Zero-gradient skip**: an update whose gradient is exactly zero (every sequence masked) does not
  step the optimiser; Adam would otherwise keep moving on its momentum.
* **OPOB** (VCPO's off-policy optimal baseline, ``staleness_utils.py:compute_opob_baseline`` with
  ``scope=group, use_is_weights=True``): per group ``b* = sum_i W_i R_i / (sum_i W_i + 1e-8)``,
  ``W_i = w_i^2 ||grad log pi(tau_i)||^2``, and ``A_i = (R_i - b*) / std_g(R)`` (``norm_by_std``, when
  the group's std exceeds 1e-8; Bessel-corrected like the group's GRPO std), an advantage mode of
  the trainer (``advantage = "opob"``): it needs one backward pass per trajectory. The advantages are
  :func:`estimators.baselines.opob_advantages` (named here too, as is verl's Optimal Token Baseline,
  :func:`estimators.baselines.otb_advantages`: per-token advantages, which the toolkit's losses do not take,
  so OTB is no advantage mode of the trainer).

Every control is off by default (the committed runs replay byte for byte) and recorded in each
run's config; the ``step/`` columns log what each did per update. :func:`scaled_lr` is the one
place a scale meets an optimiser, for this trainer, the verl actor hook and the TRL callback.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Real

import torch

from estimators.baselines import OPOB_GUARD, OPOB_STDS, opob_advantages, otb_advantages  # noqa: F401

ESS_RULES = ("none", "sqrt", "linear")
OPOB_WEIGHTS = ("is", "vcpo")
RECIPES = {
    "vcpo": {"estimator": "seq_tis", "seq_tis_c": 8.0, "ess_scaling": "sqrt", "ess_base_ratio": 1.0,
             "ess_use_clipped": False, "advantage": "opob", "opob_norm_by_std": True, "max_grad_norm": 1.0},
    "vcpo_exact": {"estimator": "seq_tis", "seq_tis_c": 8.0, "ess_scaling": "sqrt", "ess_base_ratio": 1.0,
                   "ess_use_clipped": False, "advantage": "opob", "opob_norm_by_std": True, "max_grad_norm": 1.0,
                   "opob_weight": "vcpo", "opob_std": "population", "opob_flat_zero": False,
                   "traj_agg": "token-mean"},
}
"""Named recipes: settings that together make a published method. ``vcpo``: VCPO's scripts
(mit-han-lab/vcpo ``recipe/fully_async_policy/shell/vcpo/math/vcpo_k=10.sh``): sequence-level
truncated IS at 8 (``rollout_is="sequence"``, ``rollout_is_threshold=8.0``; PPO clipping off,
``clip_ratio_low=1.0, clip_ratio_high=1e9``), ESS sqrt scaling on the raw ratios with base 1.0,
OPOB per group on the IS weights with ``norm_by_std``, gradient clipping 1.0. Their optimiser
(AdamW, weight decay 0.1, lr 1e-6 with warm-up) is the run's own choice here. ``vcpo`` is the toolkit's
reading (the paper's OPOB weight, the sample std, THEORY's unnormalised trajectory term); ``vcpo_exact``
is VCPO's code line for line in the three places it differs: OPOB's weight ``min(w, 8)^2 w^2
||grad log pi||^2`` (``opob_weight = "vcpo"``), the population std (``opob_std``), each trajectory's
gradient averaged over its tokens (``traj_agg = "token-mean"``, their ``seq-mean-token-mean``), and a
group with equal rewards left at VCPO's ``R (1 - sum W / (sum W + 1e-8))`` (``opob_flat_zero = False``)."""
TRAINER_ADVANTAGES = ("opob",)
"""Advantage modes the trainer computes itself (they need the model, not only the rewards)."""
ESS_GUARD = 1e-8


@dataclass(frozen=True)
class StepControl:
    """The step-size controls outside this toolkit's trainer (the TRL callback, a verl actor, any loop),
    with the names the trainer's config uses: ``scale = step_scale(control, seq_log_ratio, weights)``,
    then ``optimizer_step(control, optimizer, scale.get("step/lr_scale", 1.0))`` (which honours
    ``skip_zero_grad``). Every setting is checked here, when the control is built (ValueError)."""

    estimator: str = "gmc"
    eps: float = 0.2
    ess_scaling: str = "none"
    ess_base_ratio: float = 1.0
    ess_use_clipped: bool = False
    gmc_step: bool = False
    skip_zero_grad: bool = False
    opob_norm_by_std: bool = True
    drift_diagnostics: bool = False

    def __post_init__(self):
        check_step_control(self)


def check_step_control(cfg) -> None:
    """Refuse a bad step-control setting (ValueError naming it): every setting is checked where the
    control is built, the estimator and ``eps`` (GMC's step form and the diagnostics read them) included."""
    from estimators._validate import check_eps
    from estimators.losses import loss_names

    if not isinstance(cfg.estimator, str) or cfg.estimator not in loss_names():
        raise ValueError(f"unknown estimator {cfg.estimator!r}; valid: {', '.join(loss_names())}")
    check_eps(cfg.eps)
    if not isinstance(cfg.ess_scaling, str) or cfg.ess_scaling not in ESS_RULES:
        raise ValueError(f"unknown ess_scaling {cfg.ess_scaling!r}; valid: {', '.join(ESS_RULES)}")
    base = cfg.ess_base_ratio
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or not 0 < base <= 1:
        raise ValueError(f"ess_base_ratio must be in (0, 1], got {base!r}")
    opob_weight, opob_std = getattr(cfg, "opob_weight", "is"), getattr(cfg, "opob_std", "sample")
    if opob_weight not in OPOB_WEIGHTS:
        raise ValueError(f"unknown opob_weight {opob_weight!r}; valid: {', '.join(OPOB_WEIGHTS)}")
    if opob_std not in OPOB_STDS:
        raise ValueError(f"unknown opob_std {opob_std!r}; valid: {', '.join(OPOB_STDS)}")
    if opob_weight == "vcpo":
        from estimators import SCHEMES, get_scheme

        if cfg.estimator not in SCHEMES or get_scheme(cfg.estimator).needs_advantages:
            raise ValueError(f"opob_weight 'vcpo' multiplies OPOB's weight by the estimator's trajectory weight "
                             f"squared, taken before the advantages exist; estimator {cfg.estimator!r} has none "
                             "that does not need them")
    for name in ("ess_use_clipped", "gmc_step", "skip_zero_grad", "opob_norm_by_std", "opob_flat_zero",
                 "drift_diagnostics"):
        if not isinstance(getattr(cfg, name, False), bool):
            raise ValueError(f"{name} must be true or false, got {getattr(cfg, name)!r}")
    if cfg.ess_use_clipped:
        from estimators import SCHEMES

        if cfg.estimator not in SCHEMES:
            raise ValueError(f"ess_use_clipped computes rho_ess on the estimator's trajectory weights; estimator "
                             f"{cfg.estimator!r} is a token-level loss and has none")
    check_settings_act(cfg)


def _opob(cfg) -> bool:
    return getattr(cfg, "advantage", None) == "opob"


ACTS_ONLY_WITH = (
    ("ess_base_ratio", 1.0, lambda c: c.ess_scaling != "none", ("ess_scaling",), "ess_scaling 'sqrt' or 'linear'"),
    ("ess_use_clipped", False, lambda c: c.ess_scaling != "none", ("ess_scaling",), "ess_scaling 'sqrt' or 'linear'"),
    ("opob_norm_by_std", True, _opob, ("advantage",), "advantage 'opob'"),
    ("opob_flat_zero", True, _opob, ("advantage",), "advantage 'opob'"),
    ("opob_weight", "is", _opob, ("advantage",), "advantage 'opob'"),
    ("opob_std", "sample", lambda c: _opob(c) and c.opob_norm_by_std is True, ("advantage", "opob_norm_by_std"),
     "advantage 'opob' and opob_norm_by_std true"),
)
"""Step-control and OPOB settings that act only under other settings: ``(setting, default, acts(cfg), the
settings that decide, what they must be)``. A setting away from its default where it cannot act is refused
(:func:`check_settings_act`): it would change nothing, and the run's record would say otherwise."""


def check_settings_act(cfg) -> None:
    """Refuse (ValueError naming both) a setting of :data:`ACTS_ONLY_WITH` given a value other than its default
    where the settings that decide it leave it nothing to act on (``vcpo_exact``'s ``opob_weight = 'vcpo'`` with
    ``advantage = 'loo'``; ``ess_base_ratio`` with ``ess_scaling = 'none'``). A control with no ``advantage``
    (:class:`StepControl`: the hooks and loops outside the trainer) has no OPOB, so its ``opob_*`` act nowhere."""
    for name, default, acts, deciders, needs in ACTS_ONLY_WITH:
        value = getattr(cfg, name, default)
        if value == default or acts(cfg):
            continue
        now = ", ".join(f"{d} = {getattr(cfg, d, None)!r}" for d in deciders if hasattr(cfg, d)) or \
            "no advantage mode (OPOB is an advantage mode of llm_runs.trainer)"
        raise ValueError(f"{name} = {value!r} cannot act with {now}: it applies only with {needs}; leave {name} "
                         f"at its default {default!r} or set {' and '.join(deciders)}")


HOOK_SETTINGS = ("ess_scaling", "ess_base_ratio", "ess_use_clipped", "gmc_step")
"""The settings a hook around another trainer's optimiser step (the verl hook, the TRL callback) applies:
the step's scale. The rest of :class:`StepControl` belongs to this toolkit's trainer: ``skip_zero_grad``
(skipping needs the whole gradient and the right not to call the optimiser), ``opob_*`` (an advantage
mode), ``drift_diagnostics`` (its columns)."""


def hook_control(where: str, controls: dict, **fixed) -> StepControl:
    """The :class:`StepControl` of a hook (``where`` names it in messages) from the user's ``controls``
    and the values the host fixes (``fixed``: the TRL trainer's ``estimator`` and ``eps``). A setting the
    hook does not know, one it cannot apply (outside :data:`HOOK_SETTINGS`), or one that contradicts
    ``fixed`` is a ValueError naming it, raised here, when the run is configured."""
    known = {f for f in StepControl.__dataclass_fields__}
    for name, value in controls.items():
        if name not in known:
            valid = ", ".join(("estimator", "eps", *HOOK_SETTINGS))
            raise ValueError(f"{where}: unknown setting {name!r}; valid: {valid}")
        if name in fixed:
            if value != fixed[name]:
                raise ValueError(f"{where}: {name} = {value!r} contradicts the trainer's {name} = {fixed[name]!r} "
                                 f"(the control takes the trainer's; leave {name} out)")
            continue
        if name not in HOOK_SETTINGS and name not in ("estimator", "eps") and value != \
                StepControl.__dataclass_fields__[name].default:
            raise ValueError(f"{where}: {name} = {value!r} cannot be applied by this hook (it scales the step of an "
                             f"optimiser it does not own; {name} is a setting of llm_runs.trainer's runs); valid: "
                             f"{', '.join(HOOK_SETTINGS)}")
    control = StepControl(**{**controls, **fixed})
    if not is_active(control):
        raise ValueError(f"{where} with no control on: give ess_scaling='sqrt'|'linear' or gmc_step=True")
    return control


def optimizer_step(control, optimizer: torch.optim.Optimizer, scale: float = 1.0) -> bool:
    """One optimiser step of a loop outside the trainer under ``control``: with ``skip_zero_grad`` and a
    gradient that is exactly zero (every ``.grad`` None or 0) no parameter and no optimiser state changes
    (the gradients are cleared); otherwise ``optimizer.step()`` with the learning rate scaled by ``scale``.
    Whether it stepped."""
    if control.skip_zero_grad:
        grads = [p.grad for pg in optimizer.param_groups for p in pg["params"] if p.grad is not None]
        if all(not bool(g.any()) for g in grads):
            optimizer.zero_grad(set_to_none=True)
            return False
    with scaled_lr(optimizer, scale):
        optimizer.step()
    return True


def ess_ratio(values: torch.Tensor, log_values: torch.Tensor | None = None) -> float:
    """VCPO's ``ess_ratio``: ``(sum w)^2 / ((sum w^2 + 1e-8) N)`` over every sequence of the update, in
    float64 as their code sums Python floats. Where ``sum w^2`` overflows float64 the same quantity is
    taken in log space (the 1e-8 is then negligible), from ``log_values`` (the log-ratios, when the caller
    has them: a log-ratio above 709 overflows ``exp`` but not this) or from ``log(values)``. A weight that
    is infinite or not a number (a ratio that overflowed before it got here) makes the batch as degenerate
    as a batch can be: the ratio is its limit ``1/N``, never NaN (``min(1, NaN)`` would be a full step)."""
    w = values.detach().double().reshape(-1)
    n = w.numel()
    if n == 0:
        return 0.0
    if bool((w < 0).any()):
        i = tuple(int(j) for j in torch.nonzero(values.detach() < 0)[0])
        raise ValueError(f"ESS ratio: a weight is a ratio of probabilities, >= 0; got {float(values[i])} at index {i}")
    s1, s2 = float(w.sum()), float((w * w).sum())
    if math.isfinite(s1) and math.isfinite(s2):
        return s1 * s1 / (s2 + ESS_GUARD) / n
    lw = torch.log(w) if log_values is None else log_values.detach().double().reshape(-1)
    if not bool(torch.isfinite(lw).logical_or(lw == -math.inf).all()):
        return 1.0 / n
    r = math.exp(float(2 * torch.logsumexp(lw, 0) - torch.logsumexp(2 * lw, 0))) / n
    return r if math.isfinite(r) else 1.0 / n


def ess_scale(rule: str, ratio: float, base: float = 1.0) -> float:
    """VCPO's learning-rate factor: ``min(1, ratio / max(base, 1e-8))``, square-rooted for ``sqrt``."""
    if rule not in ESS_RULES:
        raise ValueError(f"unknown ess_scaling {rule!r}; valid: {', '.join(ESS_RULES)}")
    if rule == "none":
        return 1.0
    if isinstance(base, bool) or not isinstance(base, Real) or not math.isfinite(base) or not 0 < base <= 1:
        raise ValueError(f"ess_base_ratio must be in (0, 1], got {base!r}")
    if isinstance(ratio, bool) or not isinstance(ratio, Real) or not math.isfinite(float(ratio)) or float(ratio) < 0:
        raise ValueError(f"ess_scaling {rule!r}: the ESS ratio must be a finite number >= 0, got {ratio!r} "
                         "(a NaN would take the full step the control exists to shrink)")
    s = min(1.0, float(ratio) / max(float(base), 1e-8))
    return s ** 0.5 if rule == "sqrt" else s


def gmc_step_scale(seq_log_ratio: torch.Tensor, eps: float) -> float:
    """GMC's step form: the mean over the batch's groups of ``lambda_g = min(1, (1+eps) / mean_i w_gi)``
    on the raw trajectory ratios (``seq_log_ratio`` of shape (prompts_per_step, G))."""
    import estimators

    return float(estimators.gmc_lambda(seq_log_ratio.detach().double(), eps).mean())


def step_scale(cfg, seq_log_ratio: torch.Tensor, weights: torch.Tensor | None) -> dict[str, float]:
    """The step's factor under ``cfg``'s controls and what each part contributed: ``{"step/lr_scale": s,
    "step/ess_ratio": rho (ESS scaling), "step/gmc_scale": s_t (GMC's step form)}``; ``{}`` when none is on."""
    check_step_inputs(cfg, seq_log_ratio, weights)
    if seq_log_ratio.numel() == 0:
        raise ValueError(f"step-size control: no sequence since the last optimiser step (seq_log_ratio of shape "
                         f"{tuple(seq_log_ratio.shape)}): there is no ratio to scale the step by")
    out: dict[str, float] = {}
    scale = 1.0
    if cfg.ess_scaling != "none":
        if cfg.ess_use_clipped:
            rho = ess_ratio(weights)
        else:
            lw = seq_log_ratio.detach().double()
            rho = ess_ratio(torch.exp(lw), lw)
        out["step/ess_ratio"] = rho
        scale *= ess_scale(cfg.ess_scaling, rho, cfg.ess_base_ratio)
    if cfg.gmc_step:
        g = gmc_step_scale(seq_log_ratio, cfg.eps)
        out["step/gmc_scale"] = g
        scale *= g
    if out:
        out["step/lr_scale"] = scale
    return out


def check_step_inputs(cfg, seq_log_ratio, weights) -> None:
    """What the step controls read, checked (ValueError naming it): ``seq_log_ratio`` a tensor of shape
    (prompts_per_step, G); with ``ess_use_clipped``, the weights of the same shape and >= 0."""
    if not isinstance(seq_log_ratio, torch.Tensor) or seq_log_ratio.ndim != 2:
        got = tuple(seq_log_ratio.shape) if isinstance(seq_log_ratio, torch.Tensor) else type(seq_log_ratio).__name__
        raise ValueError(f"step-size control: seq_log_ratio must be a tensor of shape (prompts_per_step, G), got {got}")
    if cfg.ess_scaling != "none" and cfg.ess_use_clipped:
        if weights is None:
            raise ValueError(f"ess_use_clipped: estimator {cfg.estimator!r} gave no trajectory weights")
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != tuple(seq_log_ratio.shape):
            got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ValueError(f"ess_use_clipped: the weights must have seq_log_ratio's shape "
                             f"{tuple(seq_log_ratio.shape)}, got {got}")
        neg = weights.detach() < 0
        if bool(neg.any()):
            i = tuple(int(j) for j in torch.nonzero(neg)[0])
            raise ValueError(f"ess_use_clipped: a weight is >= 0, got {float(weights[i])} at index {i}")


def is_active(cfg) -> bool:
    """Whether ``cfg`` scales its steps (the ``step/`` scale columns are logged)."""
    return cfg.ess_scaling != "none" or bool(cfg.gmc_step)


def scale_lrs(optimizer: torch.optim.Optimizer, scale: float) -> list[float]:
    """Multiply every parameter group's ``lr`` by ``scale``; the rates before, for :func:`restore_lrs`."""
    if not (isinstance(scale, float) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"a step scale must be a finite float >= 0, got {scale!r}")
    base = [pg["lr"] for pg in optimizer.param_groups]
    for pg, lr in zip(optimizer.param_groups, base):
        pg["lr"] = lr * scale
    return base


def restore_lrs(optimizer: torch.optim.Optimizer, base: list[float]) -> None:
    for pg, lr in zip(optimizer.param_groups, base):
        pg["lr"] = lr


@contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: float):
    """Every parameter group's ``lr`` multiplied by ``scale`` inside the block, restored after it
    (VCPO sets and restores ``pg["lr"]`` around ``optimizer.step()`` the same way). ``scale == 1`` leaves
    the optimiser untouched."""
    if scale == 1.0:
        yield
        return
    base = scale_lrs(optimizer, scale)
    try:
        yield
    finally:
        restore_lrs(optimizer, base)


def trajectory_grad_sq_norms(model, batch, temperature: float = 1.0) -> torch.Tensor:
    """``||grad_theta sum_t log pi_theta(o_t | q, o_<t)||^2`` of every trajectory of ``batch``, shape
    (prompts_per_step, G): one forward and backward pass per trajectory (the parameters' ``.grad`` are left
    as they were)."""
    from .rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    out = torch.zeros(batch.rewards.numel(), dtype=torch.float64)
    for i in range(batch.rewards.numel()):
        sl = slice(i, i + 1)
        logp = completion_logprobs(model, batch.prompt_ids[sl], batch.prompt_mask[sl], batch.completion_ids[sl],
                                   temperature, 1)
        total = (logp * batch.completion_mask[sl]).sum()
        grads = torch.autograd.grad(total, params, allow_unused=True)
        out[i] = sum(float((g.double() ** 2).sum()) for g in grads if g is not None)
    return out.view(batch.prompts_per_step, batch.group_size)


def opob_recipe_advantages(rewards, seq_log_ratio, grad_sq_norms, estimator: str, eps: float, knobs: dict,
                           opob: dict):
    """OPOB advantages (P, G), the one form of the trainer's ``advantage = opob`` (``llm_runs.update._opob``), the
    verl plugin's and the TRL adapter's:
    ``opob_weight = vcpo`` multiplies each ``||grad log pi(o_i)||^2`` by the estimator's trajectory weight
    squared (VCPO's code), then :func:`estimators.baselines.opob_advantages` with ``opob_norm_by_std``,
    ``opob_flat_zero`` and ``opob_std`` (the trainer's defaults where ``opob`` leaves one out); float32, as the
    trainer casts them."""
    import estimators

    norms = grad_sq_norms.detach().double()
    if opob.get("opob_weight", "is") == "vcpo":
        c = estimators.weights(estimator, seq_log_ratio.detach().double(), eps, **knobs)
        norms = norms * torch.as_tensor(c, dtype=norms.dtype) ** 2
    return opob_advantages(rewards.double(), seq_log_ratio.detach().double(), norms,
                           opob.get("opob_norm_by_std", True), opob.get("opob_flat_zero", True),
                           opob.get("opob_std", "sample")).float()
