"""The TRL adapter's settings (:class:`llm_runs.integrations.trl.TrajectoryGRPOTrainer`): which estimator,
advantage, aggregation and recipe it trains (:func:`adapter_settings`), TRL 1.16's own loss settings refused or
mapped to the estimator's (:func:`map_trl_settings`, read against ``trl/trainer/grpo_config.py`` and
``GRPOTrainer.__init__``), and the settings it cannot honour (:func:`check_supported`)."""
from __future__ import annotations

from types import SimpleNamespace

import estimators
from estimators._validate import check_eps
from estimators.losses import check_options, loss_names

from ._common import RECIPE_OPOB, TRAJ_AGGS, recipe_settings

DEFAULT_EPS = 0.28
"""A trajectory scheme's cap 1 + eps when neither ``eps`` nor ``GRPOConfig.epsilon_high`` is given (TIC's public
1.28). ``token_clip`` clips as TRL does: at 1 - ``GRPOConfig.epsilon`` and 1 + ``GRPOConfig.epsilon_high`` (TRL
1.16's defaults 0.2 and, unset, ``epsilon``: ``GRPOTrainer.epsilon_low`` / ``epsilon_high``), unless ``eps`` is
given."""
BEHAVIOURS = ("rollout", "recomputed")
"""Which behaviour log-probs the ratio uses (see the module docstring)."""
TRL_SETTINGS = {
    "loss_type": ("the loss is the trainer's `estimator`: token_clip (TRL's grpo/dapo/bnpo token clip), gspo "
                  "(importance_sampling_level='sequence'), cispo, sapo, vespo, or a trajectory scheme such as gmc"),
    "importance_sampling_level": ("the level is the estimator's: estimator='gspo' is TRL's sequence level, the "
                                  "trajectory schemes (gmc, ...) weight whole trajectories, token_clip weights tokens"),
    "epsilon": ("the trajectory schemes have no lower clip (their cap 1 + eps is the trainer's `eps` or "
                "GRPOConfig.epsilon_high); estimator='token_clip' takes it as its lower clip 1 - eps, "
                "and gspo and cispo "
                "as their knob eps_low"),
    "delta": "no two-sided clipping of negative advantages; choose an estimator (e.g. gmc caps the group's mass)",
    "scale_rewards": ("the advantages are the trainer's `advantage`: 'grpo' ((r - mean) / std per group), "
                      "'drgrpo' (r - mean, TRL's scale_rewards='none'), 'loo' (leave-one-out, the default)"),
    "epsilon_high": ("the cap of a trajectory scheme (mapped to eps) and token_clip's upper clip (mapped to its knob "
                     "eps_high); gspo and cispo take their knob eps_high"),
    **{k: "" for k in ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos",
                       "vespo_k_neg", "vespo_lambda_neg")},
}
"""GRPOConfig settings of TRL's own loss: refused when not at TRL's default (the message names the
toolkit's equivalent), or mapped (:data:`TRL_KNOBS`, ``epsilon_high`` -> ``eps``)."""
TRL_KNOBS = {
    "sapo_temperature_pos": ("sapo", "tau_pos"), "sapo_temperature_neg": ("sapo", "tau_neg"),
    "vespo_k_pos": ("vespo", "k_pos"), "vespo_lambda_pos": ("vespo", "lambda_pos"),
    "vespo_k_neg": ("vespo", "k_neg"), "vespo_lambda_neg": ("vespo", "lambda_neg"),
}
"""GRPOConfig settings that are the knobs of one of the toolkit's estimators (:data:`estimators.params.PARAMS`)."""




def adapter_settings(estimator: str | None, advantage: str | None, knobs: dict | None, traj_agg: str | None,
                     opob: dict | None, recipe: str | None) -> dict:
    """What the adapter trains, checked: ``estimator`` (default ``gmc``), its ``knobs``, ``advantage`` (``loo``,
    ``grpo``, ``drgrpo`` or ``opob``, VCPO's baseline), the ``opob`` settings (the trainer's ``opob_*`` names),
    ``traj_agg`` (:data:`~llm_runs.integrations._common.TRAJ_AGGS`), and, with ``recipe`` (a name of
    :data:`llm_runs.stepsize.RECIPES`), the recipe's settings, its step controls (``step``) and gradient clip
    (``max_grad_norm``). A setting given beside a recipe that sets it otherwise is a ValueError naming both."""
    out = {"estimator": "gmc", "advantage": "loo", "traj_agg": "sum", "knobs": dict(knobs or {}),
           "opob": dict(opob or {}), "step": {}, "max_grad_norm": None}
    given = {"estimator": estimator, "advantage": advantage, "traj_agg": traj_agg}
    if recipe is not None:
        r = recipe_settings(recipe)
        for key, value in given.items():
            if value is not None and value != r[key]:
                raise ValueError(f"recipe {recipe!r} sets {key} = {r[key]!r}; {key} = {value!r} contradicts it: leave "
                                 f"{key} out")
            out[key] = r[key]
        for group in ("knobs", "opob"):
            for key, value in r[group].items():
                if key in out[group] and out[group][key] != value:
                    raise ValueError(f"recipe {recipe!r} sets {group}[{key!r}] = {value!r}; {out[group][key]!r} "
                                     f"contradicts it: leave it out")
                out[group][key] = value
        out["step"], out["max_grad_norm"] = r["step"], r["max_grad_norm"]
    else:
        out.update({k: v for k, v in given.items() if v is not None})
    est = out["estimator"]
    if est not in loss_names():
        raise ValueError(f"unknown estimator {est!r}; valid: {', '.join(loss_names())}")
    check_options(est, out["knobs"])  # unknown or bad knobs refused here
    kinds = (*estimators.ADVANTAGE_KINDS, "opob")
    if out["advantage"] not in kinds:
        raise ValueError(f"unknown advantage kind {out['advantage']!r}; valid: {', '.join(kinds)}")
    if out["traj_agg"] not in TRAJ_AGGS:
        raise ValueError(f"unknown traj_agg {out['traj_agg']!r}; valid: {', '.join(TRAJ_AGGS)}")
    if out["traj_agg"] != "sum" and est not in estimators.SCHEMES:
        raise ValueError(f"traj_agg {out['traj_agg']!r} divides a trajectory scheme's term by its length; "
                         f"estimator {est!r} is a token-level loss with its own aggregation")
    unknown = sorted(set(out["opob"]) - set(RECIPE_OPOB))
    if unknown:
        raise ValueError(f"unknown opob setting(s) {unknown}; valid: {', '.join(RECIPE_OPOB)}")
    if out["opob"] and out["advantage"] != "opob":
        raise ValueError(f"opob settings {sorted(out['opob'])} act on advantage='opob' only, not "
                         f"{out['advantage']!r}: drop them or set advantage='opob'")
    if out["advantage"] == "opob":
        from ..stepsize import StepControl, check_step_control

        base = {f: getattr(StepControl, f) for f in StepControl.__dataclass_fields__}
        check_step_control(SimpleNamespace(**{**base, "estimator": est, "advantage": "opob", **out["opob"]}))
    return out


def map_trl_settings(self) -> None:
    """Refuse each of TRL's loss settings this trainer does not implement when it is set to anything
    but TRL's default, naming the toolkit's equivalent; map the ones whose meaning is the same."""
    import dataclasses

    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    args = self.args
    changed = {k for k in TRL_SETTINGS if k in defaults and getattr(args, k, defaults[k]) != defaults[k]}
    if self.estimator == "token_clip":  # TRL's clip: 1 - epsilon .. 1 + epsilon_high, token_clip's eps .. eps_high
        clip_map = {"epsilon": None, "epsilon_high": "eps_high"}
        if self._eps_given is None:  # TRL's lower clip, at TRL's default 0.2 too (an upper one unset is the same)
            changed.add("epsilon")
    elif self.estimator in estimators.SCHEMES:  # the cap 1 + eps is TRL's upper clip 1 + epsilon_high
        clip_map = {"epsilon_high": None}
    else:
        clip_map = {}
    for setting, knob in clip_map.items():
        if setting not in changed:
            continue
        value = float(getattr(args, setting))
        given = self._eps_given if knob is None else self.knobs.get(knob)
        if given is not None and float(given) != value:
            raise ValueError(f"GRPOConfig.{setting} = {value!r} and "
                             f"{'eps' if knob is None else f'knobs[{knob!r}]'} "
                             f"= {given!r} disagree: both set the same clip; give one of them")
        if knob is None:
            self.eps = check_eps(value)
        else:
            self.knobs[knob] = value
        changed.discard(setting)
    for setting, (estimator, knob) in TRL_KNOBS.items():
        if setting not in changed:
            continue
        if self.estimator != estimator:
            raise ValueError(f"GRPOConfig.{setting} = {getattr(args, setting)!r} belongs to TRL's {estimator!r} "
                             f"loss, but this trainer's estimator is {self.estimator!r}: drop it, or train "
                             f"estimator={estimator!r} with knobs={{{knob!r}: ...}}")
        value = float(getattr(args, setting))
        if knob in self.knobs and float(self.knobs[knob]) != value:
            raise ValueError(f"GRPOConfig.{setting} = {value!r} and knobs[{knob!r}] = {self.knobs[knob]!r} "
                             "disagree: give one of them")
        self.knobs[knob] = value
        changed.discard(setting)
    check_options(self.estimator, self.knobs)
    for setting in sorted(changed):
        raise ValueError(f"TrajectoryGRPOTrainer does not implement GRPOConfig.{setting} = "
                         f"{getattr(args, setting)!r} (TRL's default {defaults[setting]!r}): "
                         f"{TRL_SETTINGS[setting]}")

def check_supported(self) -> None:
    args, G = self.args, self.num_generations
    if args.per_device_train_batch_size % G:
        raise ValueError(
            f"per_device_train_batch_size = {args.per_device_train_batch_size} is not a multiple of "
            f"num_generations = {G}: every optimisation batch must hold whole groups"
        )
    refused = {
        "beta": (self.beta != 0.0, "the trajectory loss has no KL term; set beta=0.0"),
        "top_entropy_quantile": (self.top_entropy_quantile < 1.0, "token masking breaks the trajectory ratio"),
        "off_policy_mask_threshold": (self.off_policy_mask_threshold is not None,
                                      "the estimator does the off-policy correction"),
        "entropy_coef": (self.entropy_coef != 0.0, "no entropy bonus in the trajectory loss; set entropy_coef=0.0"),
        "use_adaptive_entropy": (self.use_adaptive_entropy, ("no entropy bonus in the trajectory loss, adaptive or "
                                                             "not; set use_adaptive_entropy=False")),
        "vllm_importance_sampling_correction": (
            self.use_vllm and self.vllm_importance_sampling_correction,
            ("TRL's correction would weigh the loss a second time by pi_old / pi_sampler; set it False: the "
             "estimator's ratio already runs against the sampler's sampling_per_token_logps "
             "(behaviour='rollout', the default)"),
        ),
        "mask_truncated_completions": (
            getattr(args, "mask_truncated_completions", False),
            ("it empties the completion mask of a truncated completion, which then has no trajectory ratio; "
             "raise max_completion_length or give truncated completions a low reward instead"),
        ),
        "multi_objective_aggregation": (
            args.multi_objective_aggregation != "sum_then_normalize",
            "rewards are summed then turned into group advantages by estimators.advantages",
        ),
    }
    for name, (bad, why) in refused.items():
        if bad:
            raise ValueError(f"TrajectoryGRPOTrainer does not support {name} = {getattr(args, name, None)!r}: "
                             f"{why}")

