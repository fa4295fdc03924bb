"""Every setting the plugin cannot honour, refused when verl validates its config, in the driver, before the first
rollout (verl 0.9.1 ``verl/utils/config.py:validate_config``). ``validate_config`` builds the actor config first
(``omega_conf_to_dataclass``: Hydra instantiates ``policy_loss._target_``, which imports the plugin and runs
:func:`~llm_runs.integrations.verl.settings._check_plugin_settings` on ``actor.policy_loss``), then calls
``actor_config.validate(n_gpus, train_batch_size, model_config)`` and
``_validate_router_replay_config(actor_config, rollout_correction)``: the plugin wraps both
(:func:`patch_config_validation`). The first runs :func:`check_actor_config` (the actor's settings and, through
the model config's root node, ``trainer`` and ``actor_rollout_ref.rollout``), the second
:func:`check_rollout_correction`. Each refusal names the setting and what to set instead; the loss keeps its own
checks as a second line (a config built some other way)."""
from __future__ import annotations

from .compat import _cfg
from .settings import behaviour_from, eps_from, policy_loss_names, recipe_of

AGG_MODES = {"token-mean": "sum", "seq-mean-token-sum": "sum", "seq-mean-token-mean": "token-mean"}
"""``actor.loss_agg_mode`` -> how the plugin aggregates a trajectory scheme's terms (the trainer's ``traj_agg``,
:data:`llm_runs.integrations._common.TRAJ_AGGS`). verl's ``agg_loss`` (``verl/trainer/ppo/core_algos.py``) on a
per-token loss ``-c_i A_i log pi(o_t)``: ``seq-mean-token-sum`` is ``-(1/N) sum_i c_i A_i log pi(o_i)`` exactly,
THEORY §2's term (``sum``); ``seq-mean-token-mean`` divides each response's term by its token count
(``token-mean``, VCPO's); ``token-mean`` weighs every token alike, THEORY's term too, but verl divides by the
batch's tokens where the plugin divides by its N responses (the same direction; a step 1/mean-length times
verl's). ``token-sum`` and ``seq-mean-token-sum-norm`` are refused."""


def _dp_size(actor, n_gpus) -> int | None:
    """The actor's data-parallel size for ``n_gpus`` GPUs (FSDP: over Ulysses' sequence-parallel size; Megatron:
    over tensor x pipeline x context parallel), None when it cannot be told."""
    if n_gpus is None:
        return None
    strategy = _cfg(actor, "strategy", None)
    if strategy in ("fsdp", "fsdp2"):
        engine = _cfg(actor, "fsdp_config", None)
        sp = _cfg(actor, "ulysses_sequence_parallel_size", 1) or 1
        sp = max(sp, (_cfg(engine, "ulysses_sequence_parallel_size", 1) or 1) if engine is not None else 1)
        return max(1, int(n_gpus) // int(sp))
    if strategy == "megatron":
        m = _cfg(actor, "megatron", None)
        mp = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            mp *= int(_cfg(m, key, 1) or 1) if m is not None else 1
        return max(1, int(n_gpus) // mp)
    return None


def actor_problems(actor, n_gpus=None) -> list[str]:
    """What the actor config sets that a plugin loss cannot honour, one line per setting (empty: nothing)."""
    G = _cfg(actor, "rollout_n", None)
    out = []
    if not isinstance(G, int) or isinstance(G, bool) or G < 2:
        out.append(f"actor_rollout_ref.rollout.n = {G!r}: a group-relative trajectory loss needs G >= 2 responses "
                   "per prompt; set actor_rollout_ref.rollout.n to 2 or more (e.g. 8)")
        G = None
    for key in ("shuffle", "use_dynamic_bsz"):
        if _cfg(actor, key, False):
            out.append(f"actor_rollout_ref.actor.{key} = True reorders responses across groups after the plugin "
                       f"regroups them; set actor_rollout_ref.actor.{key}=False")
    dp = _dp_size(actor, n_gpus)
    mbs = _cfg(actor, "ppo_micro_batch_size_per_gpu", None)
    if mbs is None and _cfg(actor, "ppo_micro_batch_size", None) is not None and dp is not None:
        mbs = int(_cfg(actor, "ppo_micro_batch_size")) // dp  # verl's per-GPU share of the deprecated setting
    if G is not None and mbs is not None and int(mbs) % G:
        out.append(f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = {mbs} is not a multiple of "
                   f"actor_rollout_ref.rollout.n = {G}: a micro-batch would split a group; set it to a multiple of "
                   f"{G} (e.g. {G})")
    mini = _cfg(actor, "ppo_mini_batch_size", None)
    if G is not None and dp is not None and mini is not None and not _cfg(actor, "use_dynamic_bsz", False) \
            and (int(mini) * G) % (dp * G):
        out.append(f"actor_rollout_ref.actor.ppo_mini_batch_size = {mini} prompts gives each of the {dp} "
                   f"data-parallel ranks {int(mini) * G / dp:g} responses, not whole groups of {G}; set it to a "
                   f"multiple of {dp}")
    agg = _cfg(actor, "loss_agg_mode", "token-mean")
    if agg not in AGG_MODES:
        out.append(f"actor_rollout_ref.actor.loss_agg_mode = {agg!r} has no meaning for a trajectory loss here; set "
                   "loss_agg_mode=token-mean (THEORY's term, verl's default), seq-mean-token-sum (the same) or "
                   "seq-mean-token-mean (each response's term over its token count, VCPO's)")
    try:
        from estimators._validate import check_eps

        check_eps(eps_from(actor))
    except ValueError as exc:
        out.append(f"actor_rollout_ref.actor.clip_ratio_high (eps of the cap 1 + eps): {exc}; set it to a number > 0 "
                   "(e.g. 0.28)")
    return out


def root_problems(actor, root, n_gpus=None) -> list[str]:
    """What the rest of verl's config (``root``: the whole DictConfig) sets that a plugin loss cannot honour."""
    out = []
    trainer = _cfg(root, "trainer", None)
    if trainer is not None and _cfg(trainer, "use_v1", False):
        out.append("trainer.use_v1 = True: verl's v1 trainer always re-balances the batch and pads it with rows of a "
                   "synthetic uid, which splits and fills the groups; set trainer.use_v1=False")
    dp = _dp_size(actor, n_gpus)
    if trainer is not None and _cfg(trainer, "balance_batch", False) and dp is not None and dp > 1:
        out.append(f"trainer.balance_batch = True with {dp} data-parallel ranks partitions the rows by length, "
                   "spreading a group over ranks; set trainer.balance_batch=False")
    rollout = _cfg(_cfg(root, "actor_rollout_ref", None), "rollout", None) if root is not None else None
    if rollout is not None and behaviour_from(actor) == "rollout" and not _cfg(rollout, "calculate_log_probs", True):
        out.append("actor_rollout_ref.rollout.calculate_log_probs = False leaves the batch without "
                   "rollout_log_probs, which the plugin's ratio pi_theta / pi_rollout (policy_loss.behaviour=rollout, "
                   "the default) needs; set actor_rollout_ref.rollout.calculate_log_probs=True, or "
                   "+actor_rollout_ref.actor.policy_loss.behaviour=recomputed for verl's decoupled pi_theta / pi_old")
    return out


def recipe_problems(actor, root, n_gpus=None) -> list[str]:
    """What the recipe (``actor.policy_loss.recipe``) needs set elsewhere in verl's config and is not."""
    recipe = recipe_of(_cfg(actor, "policy_loss", None))
    if recipe is None:
        return []
    name = _cfg(_cfg(actor, "policy_loss"), "recipe")
    out = []
    want_agg = {"sum": ("token-mean", "seq-mean-token-sum"), "token-mean": ("seq-mean-token-mean",)}[recipe["traj_agg"]]
    agg = _cfg(actor, "loss_agg_mode", "token-mean")
    if agg not in want_agg:
        out.append(f"recipe {name} aggregates each response's term over its tokens: actor_rollout_ref.actor."
                   f"loss_agg_mode = {agg!r}; set actor_rollout_ref.actor.loss_agg_mode={want_agg[0]}")
    clip = recipe["max_grad_norm"]  # the engine clips at optim.clip_grad (FSDPEngine.optimizer_step)
    have = _cfg(_cfg(actor, "optim", None), "clip_grad", None)
    if clip is not None and have is not None and float(have) != float(clip):
        out.append(f"recipe {name} clips the gradient at {clip}: actor_rollout_ref.actor.optim.clip_grad = {have!r}; "
                   f"set actor_rollout_ref.actor.optim.clip_grad={clip}")
    algorithm = _cfg(root, "algorithm", None) if root is not None else None
    want_adv = {"opob": "gmc_opob", "loo": "gmc_loo", "grpo": "gmc_grpo", "drgrpo": "gmc_drgrpo"}[recipe["advantage"]]
    if algorithm is not None and _cfg(algorithm, "adv_estimator", None) != want_adv:
        out.append(f"recipe {name} takes the advantage {recipe['advantage']!r}: algorithm.adv_estimator = "
                   f"{_cfg(algorithm, 'adv_estimator', None)!r}; set algorithm.adv_estimator={want_adv}")
    if recipe["advantage"] == "opob":
        dp = _dp_size(actor, n_gpus)
        if dp is not None and dp > 1:
            out.append(f"recipe {name}'s OPOB reads each response's gradient norm, which FSDP averages over the {dp} "
                       "data-parallel ranks first: set trainer.n_gpus_per_node=1 and trainer.nnodes=1 (one rank)")
        rs = _cfg(_cfg(algorithm, "rollout_correction", None), "rollout_rs", None) if algorithm is not None else None
        if rs:
            out.append(f"recipe {name}'s OPOB is not defined over a group's kept responses: "
                       f"algorithm.rollout_correction.rollout_rs = {rs!r}; set rollout_rs=null")
    return out


def check_actor_config(actor, n_gpus=None, root=None) -> None:
    """Refuse (one ValueError listing every line) the settings of :func:`actor_problems`, :func:`root_problems`
    and :func:`recipe_problems` when ``actor.policy_loss.loss_mode`` is one of the plugin's losses; and the
    advantage estimator ``gmc_opob`` without the recipe that forms OPOB in the actor (its advantages are 0)."""
    from .settings import opob_active

    algorithm = _cfg(root, "algorithm", None) if root is not None else None
    if _cfg(algorithm, "adv_estimator", None) == "gmc_opob" and not opob_active(actor):
        raise ValueError("algorithm.adv_estimator = 'gmc_opob' leaves the advantages to the actor, which forms OPOB's "
                         "only under +actor_rollout_ref.actor.policy_loss.recipe=vcpo_exact (with "
                         "actor_rollout_ref.actor.policy_loss.loss_mode=seq_tis); set both, or another adv_estimator "
                         "(gmc_loo)")
    if _cfg(_cfg(actor, "policy_loss", None), "loss_mode", None) not in policy_loss_names():
        return
    lines = actor_problems(actor, n_gpus) + root_problems(actor, root, n_gpus) + recipe_problems(actor, root, n_gpus)
    if lines:
        mode = _cfg(_cfg(actor, "policy_loss"), "loss_mode")
        raise ValueError(f"loss_mode {mode!r} (this toolkit's verl plugin) cannot honour these settings:\n  - "
                         + "\n  - ".join(lines))
def check_rollout_correction(policy_loss, rollout_correction) -> None:
    """Refuse, when verl validates its config, a rollout-correction setting the plugin's loss cannot honour
    (verl 0.9.1 ``algorithm.rollout_correction``, ``verl/trainer/ppo/rollout_corr_helper.py``):

    * ``bypass_mode=True``: verl then replaces ``loss_mode`` by its own ``bypass_mode`` loss
      (``apply_bypass_mode``), so the plugin's loss would never run; ``behaviour=rollout`` (the default) is
      the plugin's form of it (the ratio against ``rollout_log_probs``, no recomputation needed);
    * ``rollout_is="token"``: one weight per token; a trajectory loss takes one per response;
    * ``rollout_is="sequence"`` with ``behaviour=rollout``: verl's weight pi_old / pi_rollout would correct a
      second time what the plugin's ratio pi_theta / pi_rollout already holds (with ``behaviour=recomputed`` it
      multiplies the advantage, verl's decoupled form).

    * ``rollout_rs`` with a token-level option (``token_k1``, ``token_k2``, ``token_k3``: verl's
      ``TOKEN_LEVEL_ROLLOUT_RS_OPTIONS``): it empties single tokens of a response's mask, and the response's
      trajectory ratio would be summed over its kept tokens only, the ratio of no trajectory (a loss of -0.0040
      became +0.0291 on one batch); the sequence-level options reject whole responses;
    * ``rollout_rs`` with a loss whose weights couple the batch (``seq_tis_bn``) or whose surrogate is a clamp
      (``tic_ppo``): its weights over a group's kept responses are not defined.

    ``rollout_rs`` with a sequence-level option (``seq_sum_k1``, ``seq_mean_k3``, ``seq_max_k2``, ...) is
    supported: a rejected response has an empty ``response_mask`` and weight 0 in its group
    (:func:`llm_runs.integrations.verl.losses.trajectory_policy_loss`; the denominator is
    ``policy_loss.mask_denominator``)."""
    mode = _cfg(policy_loss, "loss_mode", None)
    if mode not in policy_loss_names() or not rollout_correction:
        return
    rc = rollout_correction
    if _cfg(rc, "bypass_mode", False):
        raise ValueError(
            f"algorithm.rollout_correction.bypass_mode=True replaces loss_mode {mode!r} by verl's 'bypass_mode' loss, "
            "so the plugin's loss would never run: leave bypass_mode False; the plugin's behaviour=rollout (its "
            "default) already takes the ratio against rollout_log_probs")
    level = _cfg(rc, "rollout_is", None)
    if level == "token":
        raise ValueError(f"algorithm.rollout_correction.rollout_is='token' gives one weight per token; "
                         f"loss_mode {mode!r} "
                         "is a trajectory loss (one weight per response): use rollout_is='sequence' with "
                         "policy_loss.behaviour=recomputed, or no rollout_is")
    rs = _cfg(rc, "rollout_rs", None)
    options = [o.strip() for o in rs.split(",") if o.strip()] if isinstance(rs, str) else []
    token_level = [o for o in options if o in _token_level_rs()]
    if token_level:
        raise ValueError(f"algorithm.rollout_correction.rollout_rs = {rs!r}: {', '.join(token_level)} rejects single "
                         f"tokens, and loss_mode {mode!r} would sum each response's trajectory ratio over its kept "
                         "tokens only (the ratio of no trajectory); set rollout_rs to a sequence-level option "
                         "(seq_sum_k1, seq_mean_k3, seq_max_k2, ...), which rejects whole responses")
    import estimators
    from estimators.losses import is_batch_coupled

    if options and (is_batch_coupled(mode) or estimators.get_scheme(mode).surrogate == "clamp"):
        raise ValueError(f"algorithm.rollout_correction.rollout_rs = {rs!r} with loss_mode {mode!r}: its weights "
                         "couple the whole batch or its surrogate is a clamp, so its weights over a group's kept "
                         "responses are not defined; drop rollout_rs or choose another loss_mode (e.g. seq_tis)")
    if level == "sequence" and behaviour_from({"policy_loss": policy_loss}) == "rollout":
        raise ValueError(
            "algorithm.rollout_correction.rollout_is='sequence' multiplies the advantage by pi_old / pi_rollout, "
            f"which loss_mode {mode!r} already corrects (policy_loss.behaviour=rollout takes pi_theta / pi_rollout): "
            "drop rollout_is, or set +actor_rollout_ref.actor.policy_loss.behaviour=recomputed "
            "for verl's decoupled form")




def _token_level_rs() -> set[str]:
    """verl's token-level rejection options (``TOKEN_LEVEL_ROLLOUT_RS_OPTIONS``, verl 0.9.1
    ``verl/trainer/ppo/rollout_corr_helper.py``)."""
    try:
        from verl.trainer.ppo.rollout_corr_helper import TOKEN_LEVEL_ROLLOUT_RS_OPTIONS
    except ImportError:
        return {"token_k1", "token_k2", "token_k3"}
    return set(TOKEN_LEVEL_ROLLOUT_RS_OPTIONS)


def _root(node):
    """The whole config a DictConfig node belongs to (OmegaConf keeps each node's parent), None otherwise."""
    try:
        from omegaconf import DictConfig
    except ImportError:
        return None
    return node._get_root() if isinstance(node, DictConfig) else None


def patch_config_validation() -> bool:
    """Make verl's ``validate_config`` refuse every setting the plugin's losses cannot honour: wraps
    ``ActorConfig.validate(n_gpus, train_batch_size, model_config)`` (``verl/workers/config/actor.py``; every
    strategy's subclass calls it) to run :func:`check_actor_config` after it, with the whole config reached from
    ``model_config`` (``config.actor_rollout_ref.model``), and ``_validate_router_replay_config(actor_config,
    rollout_correction)`` (``verl/utils/config.py``) to run :func:`check_rollout_correction` before it. Both are
    called by ``validate_config`` after it built the actor config, which imported the plugin. Idempotent; False
    on a verl without them."""
    try:
        from verl.utils import config as verl_config
        from verl.workers.config.actor import ActorConfig
    except ImportError:
        return False
    inner = getattr(verl_config, "_validate_router_replay_config", None)
    validate = ActorConfig.__dict__.get("validate")
    if inner is None or validate is None:
        return False
    if getattr(inner, "gmc_plugin_wrapped", None) is None:
        def _validate_router_replay_config(actor_config, rollout_correction):
            check_rollout_correction(getattr(actor_config, "policy_loss", None), rollout_correction)
            return inner(actor_config, rollout_correction)

        _validate_router_replay_config.gmc_plugin_wrapped = inner
        verl_config._validate_router_replay_config = _validate_router_replay_config
    if getattr(validate, "gmc_plugin_wrapped", None) is None:
        import functools

        @functools.wraps(validate)
        def validate_actor(self, n_gpus, train_batch_size, model_config=None):
            result = validate(self, n_gpus, train_batch_size, model_config)
            check_actor_config(self, n_gpus, _root(model_config))
            return result

        validate_actor.gmc_plugin_wrapped = validate
        ActorConfig.validate = validate_actor
    return True
