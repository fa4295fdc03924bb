"""TRL adapter: :class:`TrajectoryGRPOTrainer`, a ``trl.GRPOTrainer`` whose loss is an
estimator of :mod:`estimators` (GMC by default).

How it differs from TRL's ``GRPOTrainer`` (trl 1.16):

1. **Loss.** ``_compute_loss`` calls :func:`estimators.losses.policy_loss` (``estimator`` =
   any name of :func:`estimators.losses.loss_names`: ``gmc``, ``tic_mask``, ``tic_trunc``,
   ``tic_ppo``, ``snis``, ``is``, ``stale``, ``topr``, ``seq_tis_bn``, ``seq_mis``, or the
   token-level losses ``token_clip``, ``gspo``, ``cispo``, ``m2po``, ``opsm``; knobs via
   ``knobs``) on the completion log-probs, the behaviour log-probs (below), the advantages and
   the group size G = ``num_generations``. The cap is ``1 + eps`` with this class's ``eps``.

   **Which ratio.** ``behaviour="rollout"`` (the default) corrects pi_theta against the policy that
   sampled the rollout: the sampler's own log-probs ``sampling_per_token_logps`` when TRL's batch
   carries them (vLLM generation, a ``rollout_func``; trl 1.16 ``GRPOTrainer._generate_and_score_completions``
   stores them beside ``old_per_token_logps``), so the ratio holds both the staleness and the
   sampler-trainer mismatch; tokens whose sampling log-prob is NaN (vLLM's unavailable values) take
   the recomputed one. Without them (transformers' ``generate`` records none) the behaviour log-probs
   are ``old_per_token_logps``, which TRL recomputes with the trainer's parameters of the generation
   step: the same policy, so the same ratio. ``behaviour="recomputed"`` always uses
   ``old_per_token_logps`` (TRL's decoupled pi_theta / pi_old).

   **TRL's own loss settings** (``loss_type``, ``importance_sampling_level``, ``epsilon``, ``delta``,
   ``scale_rewards``, ...) are refused at construction when set to anything but TRL's default, with
   the message naming the toolkit's equivalent (:data:`TRL_SETTINGS`); ``epsilon_high`` is mapped to
   a trajectory scheme's ``eps`` (its cap), ``epsilon``/``epsilon_high`` to ``token_clip``'s ``eps``/``eps_high``
   and ``sapo_temperature_*`` / ``vespo_*`` to the knobs of ``estimator="sapo"`` / ``"vespo"``,
   whose meaning is the same. At their defaults they are not used, but ``token_clip`` clips where TRL does, at
   ``1 - epsilon`` and ``1 + epsilon_high`` (TRL's defaults 0.2 and, unset, ``epsilon``), unless ``eps`` is given.
2. **Advantages.** :func:`estimators.advantages` of kind ``advantage`` (``loo`` by default,
   THEORY §1) on the weighted sum of the reward functions, per group, replacing TRL's
   ``(r - mean) / (std + 1e-4)``. (TRL's completion table still logs its own advantages.)
3. **Groups stay whole.** TRL shuffles the rows of a generation batch before cutting it into
   ``steps_per_generation`` slices, which splits groups; this trainer shuffles whole groups
   instead. Every row carries a ``group_ids`` entry (global row // G, checked at generation
   to hold G copies of the same prompt on this process), and the loss checks that its batch
   is whole, contiguous groups (``ValueError`` otherwise). ``per_device_train_batch_size``
   must be a multiple of ``num_generations``.
4. **Diagnostics.** :func:`llm_runs.integrations._common.batch_statistics` on every loss call (the verl
   plugin's row too), logged in TRL's metrics under the toolkit trainer's names
   (:data:`~llm_runs.integrations._common.VOCABULARY`): the raw-ratio diagnostics (``stale/ess``,
   ``stale/mass_cap_frac``, ``stale/clip_frac``, ``stale/log_ratio_max``, ...), the theory columns
   (``stale/chi2``, ``stale/chi2_token``, ``stale/mass_bias``, ``stale/mass_bias_bound``), the
   weights after capping (``train/weight_max``, ...), the drift columns (``drift/kl``, ``drift/ess_ratio``,
   ``drift/abs_log_w_median``) and verl's sequence chi^2 (``stale/chi2_seq_verl``), plus TRL's ``entropy``.
   A ``train/`` name is logged without its prefix (:func:`~llm_runs.integrations._common.trl_name`), which
   transformers' wandb and TensorBoard callbacks add back. ``_log_reduced`` is the one place a loss call's
   statistics enter TRL's metrics.
5. **Refused settings** (``ValueError`` at construction, naming the setting set): ``beta != 0`` (no KL term),
   ``top_entropy_quantile < 1``, ``off_policy_mask_threshold``, ``entropy_coef``, ``use_adaptive_entropy``,
   vLLM's ``vllm_importance_sampling_correction``, ``mask_truncated_completions``,
   ``multi_objective_aggregation != "sum_then_normalize"`` (:mod:`llm_runs.integrations.trl_settings`).
6. **Recipes and VCPO's pieces.** ``recipe="vcpo_exact"`` (:data:`llm_runs.stepsize.RECIPES`), or its pieces:
   ``advantage="opob"`` (OPOB from each completion's gradient norm, one backward pass per completion through the
   loss call's graph), ``traj_agg="token-mean"``, and the recipe's step control added as a ``StepSizeCallback``.

Controlled delay: ``steps_per_generation``
=========================================

TRL generates one batch every ``S * mu`` micro-steps (``S = steps_per_generation``,
``mu = num_iterations``) and records ``old_per_token_logps`` with the parameters of that
moment (only when ``gradient_accumulation_steps`` is not a multiple of ``S * mu``; otherwise
every slice is used on-policy and the ratio is exactly 1). Slice ``k`` of the buffer is used
at micro-steps ``j * S + k`` (pass ``j = 0 .. mu-1``), i.e. after ``floor((j*S + k) / A)``
optimizer steps with ``A = gradient_accumulation_steps``. With ``A = 1`` the staleness of a
batch is d = ``j * S + k``: 0, 1, ..., ``S * mu - 1``, so ``steps_per_generation = d + 1``
(``num_iterations = 1``) makes the delays cycle through 0..d (mean d/2) with a fresh
generation every ``d + 1`` steps. The behaviour policy of THEORY §1 is pi_{theta_{t - d}}.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import (
    split_pixel_values_by_grid,
    split_tensor_dict,
    unsplit_pixel_values_by_grid,
)

import estimators
from estimators._compat import renamed_keywords
from estimators._validate import check_eps
from estimators.losses import loss_names, masked_token_log_ratio, policy_loss  # noqa: F401 (loss_names re-exported)
from llm_runs.stepsize import opob_recipe_advantages

from ._common import (
    batch_options,
    batch_statistics,
    check_contiguous_groups,
    per_length,
    trajectory_grad_sq_norms_of,
    trl_name,
)
from .trl_settings import (  # noqa: F401 (the adapter's settings, importable from here as before)
    BEHAVIOURS,
    DEFAULT_EPS,
    TRL_KNOBS,
    TRL_SETTINGS,
    adapter_settings,
    check_supported,
    map_trl_settings,
)


def shuffle_groups(batch: dict[str, Any], group_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
    """Permute the rows of ``batch`` by whole groups of ``group_size`` (TRL's shuffle, group-safe).

    Tensors of rank >= 1 and lists are permuted along their first axis; ``None`` and 0-dim
    tensors pass through.
    """
    n = len(next(v for v in batch.values() if v is not None and not (isinstance(v, torch.Tensor) and v.ndim == 0)))
    if n % group_size:
        raise ValueError(f"generation batch of {n} rows does not split into groups of G = {group_size}")
    order = torch.randperm(n // group_size, generator=generator)
    rows = (order[:, None] * group_size + torch.arange(group_size)).reshape(-1)

    def permute(v):
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        if isinstance(v, torch.Tensor):
            return v[rows.to(v.device)]
        return [v[i] for i in rows.tolist()]

    return {key: permute(val) for key, val in batch.items()}


def _same_shape(name: str, values: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
    """``values`` when it has the completions' shape (B, T) of ``logps``; else a ValueError naming both shapes
    (a (B, 1) or (T,) tensor would broadcast silently, one of (B, T - 1) fail inside the loss)."""
    if tuple(values.shape) != tuple(logps.shape):
        raise ValueError(f"{name} has shape {tuple(values.shape)}; expected (B, T) = {tuple(logps.shape)}, one "
                         f"log-prob per completion token as trl 1.16's _generate_and_score_completions pads them")
    return values


def behaviour_logps(inputs: dict, logps: torch.Tensor, behaviour: str = "rollout") -> torch.Tensor:
    """The behaviour log-probs of a TRL batch the ratio is taken against: the sampler's
    ``sampling_per_token_logps`` under ``behaviour="rollout"`` when present (NaN entries, vLLM's
    unavailable values, take the recomputed value), else ``old_per_token_logps``, else ``logps``
    detached (TRL skips the recomputation when every slice is used on-policy: ratio 1). Either one
    of any shape but the completions' (B, T) is a ValueError naming the shape expected and the one got."""
    old = inputs.get("old_per_token_logps")
    old = logps.detach() if old is None else _same_shape("old_per_token_logps", old, logps)
    sampled = inputs.get("sampling_per_token_logps") if behaviour == "rollout" else None
    if sampled is None:
        return old
    _same_shape("sampling_per_token_logps", sampled, logps)
    sampled = sampled.to(old.dtype)
    return torch.where(torch.isnan(sampled), old, sampled)


class TrajectoryGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with a trajectory-level loss from :mod:`estimators` (see the module docstring).

    Args:
        estimator: the estimator's name, one of :func:`estimators.losses.loss_names` (default ``gmc``;
            deprecated alias ``scheme``).
        eps: the threshold of the cap ``1 + eps`` (THEORY §2; default ``GRPOConfig.epsilon_high`` when set, else
            0.28, TIC's public 1.28); ``token_clip``'s lower clip ``1 - eps`` (default ``GRPOConfig.epsilon``, TRL's
            0.2, its upper clip ``GRPOConfig.epsilon_high`` when set).
        advantage: kind of :func:`estimators.advantages`: ``loo`` (default), ``grpo`` or ``drgrpo``; or ``opob``,
            VCPO's off-policy optimal baseline per group (:func:`estimators.baselines.opob_advantages`, the
            trainer's ``advantage = opob``: each completion's ``||grad log pi||^2`` by one backward pass through
            the loss call's graph), with the trainer's settings in ``opob`` (``opob_weight``, ``opob_std``,
            ``opob_norm_by_std``, ``opob_flat_zero``).
        knobs: the estimator's knobs (:data:`estimators.params.PARAMS`, e.g. ``{"C": 2.0}`` for
            ``seq_tis_bn``, ``{"tau": 0.04}`` for ``m2po``); an unknown knob is refused; defaults
            otherwise, but ``seq_geo_mask``'s ``length`` L, when not given, is each batch's completion
            length (:func:`llm_runs.integrations._common.batch_options`). A batch-coupled
            estimator (``seq_tis_bn``, ``m2po``) takes its statistic over each optimisation batch.
            Deprecated alias ``scheme_options``.
        behaviour: ``"rollout"`` (default: the sampler's log-probs when the batch carries them) or
            ``"recomputed"`` (TRL's ``old_per_token_logps``); see the module docstring.
        traj_agg: ``"sum"`` (default, THEORY's ``c_i A_i grad log pi(o_i)``) or ``"token-mean"`` (that term over
            the completion's token count, VCPO's ``seq-mean-token-mean``; the trainer's ``traj_agg``).
        recipe: a name of :data:`llm_runs.stepsize.RECIPES` (``"vcpo_exact"``, ``"vcpo"``): its estimator, knobs,
            advantage, OPOB settings and ``traj_agg``, its step control (a
            :class:`~llm_runs.integrations.stepsize_hooks.StepSizeCallback` the trainer adds itself) and its
            gradient clip (``GRPOConfig.max_grad_norm`` must be the recipe's). A setting given beside it that
            contradicts it is refused.
        *args, **kwargs: passed to ``trl.GRPOTrainer``.
    """

    @renamed_keywords(scheme="estimator", scheme_options="knobs")  # deprecated 2026-12-07, removed after 2027-06-01
    def __init__(self, *args, estimator: str | None = None, eps: float | None = None, advantage: str | None = None,
                 knobs: dict | None = None, behaviour: str = "rollout", traj_agg: str | None = None,
                 recipe: str | None = None, opob: dict | None = None, **kwargs):
        chosen = adapter_settings(estimator, advantage, knobs, traj_agg, opob, recipe)
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; valid: {', '.join(BEHAVIOURS)}")
        self.estimator, self.advantage, self.traj_agg = chosen["estimator"], chosen["advantage"], chosen["traj_agg"]
        self.knobs = chosen["knobs"]  # as given: a completion length not given comes from the batch
        self.opob, self.recipe = chosen["opob"], recipe
        self._eps_given = eps
        self.eps = check_eps(DEFAULT_EPS if eps is None else eps)
        self.behaviour = behaviour
        self._rewards_per_func = None
        self.record_step_ratios = False  # set by llm_runs.integrations.stepsize_hooks.StepSizeCallback
        self.step_ratios: list = []
        super().__init__(*args, **kwargs)
        check_supported(self)
        map_trl_settings(self)
        if chosen["max_grad_norm"] is not None and self.args.max_grad_norm != chosen["max_grad_norm"]:
            raise ValueError(f"recipe {recipe!r} clips the gradient at {chosen['max_grad_norm']!r}, but "
                             f"GRPOConfig.max_grad_norm = {self.args.max_grad_norm!r}: set "
                             f"max_grad_norm={chosen['max_grad_norm']!r}")
        if chosen["step"]:
            from .stepsize_hooks import StepSizeCallback

            self.add_callback(StepSizeCallback(self, **chosen["step"]))

    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    # ----------------------------------------------------------------- generation

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        G, n = self._group_size(), len(inputs)
        offset = self.accelerator.process_index * n
        if n % G or offset % G:
            raise ValueError(f"this process holds rows {offset}..{offset + n - 1}: not whole groups of G = {G}")
        prompts = [repr(x.get("prompt")) for x in inputs]
        for start in range(0, n, G):
            if len(set(prompts[start:start + G])) != 1:
                raise ValueError(f"rows {offset + start}..{offset + start + G - 1} should be G = {G} completions of "
                                 f"one prompt")
        per_func = self._rewards_per_func
        if bool(torch.isnan(per_func).all(dim=1).any()):
            raise ValueError("a completion has no reward (every reward function returned None): cannot form its group "
                             "advantage")
        rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        if self.advantage == "opob":  # formed in the loss, from the gradient norms at that step's parameters
            output["opob_rewards"] = rewards[offset:offset + n].to(torch.float64)
            adv = torch.zeros_like(rewards)
        else:
            adv = estimators.advantages(rewards.double().reshape(-1, G), self.advantage).reshape(-1)
        output["advantages"] = adv[offset:offset + n].to(torch.float32)
        output["group_ids"] = torch.arange(offset, offset + n, device=adv.device) // G
        return output

    def _prepare_inputs(self, generation_batch):
        # trl 1.16's GRPOTrainer._prepare_inputs with shuffle_sequence_dict -> shuffle_groups.
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)  # eval: no shuffling, no buffer
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = shuffle_groups(split_pixel_values_by_grid(batch), self.num_generations)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(b)
                                     for b in split_tensor_dict(batch, self.args.steps_per_generation)]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ----------------------------------------------------------------- loss

    def _compute_loss(self, model, inputs):
        G = self._group_size()
        check_contiguous_groups(inputs["group_ids"].tolist(), G, where="TrajectoryGRPOTrainer batch")
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        multimodal = {k: inputs.get(k) for k in (
            "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
            "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")}
        with torch.enable_grad() if self.advantage == "opob" else contextlib.nullcontext():  # OPOB's norms need it
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True, **multimodal)
        old = behaviour_logps(inputs, logps, self.behaviour)
        options = batch_options(self.estimator, self.knobs, mask)
        adv = self._advantages(model, inputs, logps, old, mask, G, options)
        out = policy_loss(self.estimator, logps, old, mask, adv, G, self.eps, **options)
        self.last_loss_output = out
        if self.record_step_ratios and self.model.training:
            self.step_ratios.append((out.seq_log_ratio.detach(), None if out.weights is None else out.weights.detach()))

        mode = "train" if self.model.training else "eval"
        # once per loss call, on the raw ratios, with the trainer's names (stale/chi2, stale/ess, train/weight_max
        # logged as weight_max, which wandb and TensorBoard show as train/weight_max, ...)
        stats = batch_statistics(out, logps, old, mask, self.estimator, self.eps)
        self._log_reduced(mode, {trl_name(k): v for k, v in stats.items()})
        ent = torch.stack([(entropies * mask).sum(), mask.sum().to(entropies.dtype)]).detach()
        ent = self.accelerator.reduce(ent, reduction="sum")
        self._metrics[mode]["entropy"].append((ent[0] / ent[1].clamp(min=1.0)).item())
        if mode == "train":  # GRPOTrainer.loss_is_scaled_for_ga: the loss scales itself for accumulation
            return out.loss / self.current_gradient_accumulation_steps
        return out.loss

    def _advantages(self, model, inputs, logps, old, mask, G: int, options: dict) -> torch.Tensor:
        """The loss call's advantages: the generation's, or OPOB's from the completions' rewards, ratios and
        gradient norms at this step's parameters (``advantage="opob"``); over each completion's token count under
        ``traj_agg="token-mean"`` (both as the trainer's ``llm_runs.update.update_advantages``)."""
        adv = inputs["advantages"]
        if self.advantage == "opob":
            lr = masked_token_log_ratio(logps.detach(), old, mask).sum(-1).reshape(-1, G)
            norms = trajectory_grad_sq_norms_of(logps, mask, model.parameters()).reshape(-1, G)
            adv = opob_recipe_advantages(inputs["opob_rewards"].reshape(-1, G).cpu(), lr.cpu(), norms,
                                         self.estimator, self.eps, options, self.opob).reshape(-1).to(adv.device)
        if self.traj_agg == "token-mean":
            adv = per_length(adv, mask)
        return adv

    def _log_reduced(self, mode: str, metrics: dict[str, float]) -> None:
        """Append each metric reduced over processes: max for ``*_max``, min for ``*_min``, else mean."""
        keys = list(metrics)
        local = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        table = self.accelerator.gather(local[None]).reshape(-1, len(keys))
        for j, key in enumerate(keys):
            col = table[:, j]
            value = col.max() if key.endswith("_max") else col.min() if key.endswith("_min") else col.mean()
            self._metrics[mode][key].append(float(value))
