"""The plugin's settings, read from verl's actor config and checked when verl validates it: the group size G, the
cap's eps, which behaviour ratio (:data:`BEHAVIOURS`), the step-size controls, each estimator's knobs under
``actor.policy_loss`` (:func:`estimator_options_from`, taken by verl's ``PolicyLossConfig`` once
:func:`extend_policy_loss_config` extends it) and the rollout-correction settings the plugin's losses cannot
honour (:func:`check_rollout_correction`). The losses that read them are :mod:`llm_runs.integrations.verl.losses`."""
from __future__ import annotations

from estimators._compat import renamed_keywords

from .compat import _cfg


def policy_loss_names() -> list[str]:
    """The verl policy-loss names the plugin registers: the trajectory schemes of :mod:`estimators`
    (:func:`estimators.losses.loss_names` also lists the token-level losses, which verl has its own of)."""
    import estimators

    return list(estimators.SCHEMES)


def group_size_from(config) -> int:
    """G: ``config.rollout_n`` (filled by verl from ``actor_rollout_ref.rollout.n``), else
    ``config.policy_loss.group_size`` (older DictConfig-based verl)."""
    G = _cfg(config, "rollout_n")
    source = "actor.rollout_n (from actor_rollout_ref.rollout.n)"
    if G is None:
        G = _cfg(_cfg(config, "policy_loss", {}) or {}, "group_size")
        source = "actor.policy_loss.group_size"
    if G is None:
        raise ValueError(
            "the trajectory loss needs the group size G: set actor_rollout_ref.rollout.n "
            "(verl copies it to actor.rollout_n) or, on old verl, +actor_rollout_ref.actor.policy_loss.group_size"
        )
    if isinstance(G, bool) or not isinstance(G, int) or G < 2:
        raise ValueError(f"{source} = {G!r}: group-relative trajectory losses need groups of G >= 2")
    return G


def eps_from(config) -> float:
    """eps of the cap 1+eps: ``actor.clip_ratio_high`` (else ``actor.clip_ratio``)."""
    eps = _cfg(config, "clip_ratio_high")
    if eps is None:
        eps = _cfg(config, "clip_ratio")
    if eps is None:
        raise ValueError("actor.clip_ratio_high and actor.clip_ratio are both None: the cap 1+eps needs eps; set "
                         "actor_rollout_ref.actor.clip_ratio_high (e.g. 0.28)")
    try:
        return float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"actor.clip_ratio_high / clip_ratio must be a number (eps of the cap 1+eps), got {eps!r}") \
            from None


BEHAVIOURS = ("rollout", "recomputed")
"""``actor.policy_loss.behaviour``: the ratio pi_theta / pi_rollout against the ``rollout_log_probs`` the batch
carries (``rollout``, the default), or verl's decoupled pi_theta / pi_old against the ``old_log_prob`` the
actor recomputes at the start of each step (``recomputed``)."""
PLUGIN_SETTINGS = {"behaviour": "rollout", "ess_scaling": "none", "ess_base_ratio": 1.0, "ess_use_clipped": False,
                   "gmc_step": False, "mask_denominator": "kept", "recipe": "none",
                   "early_warning": "off", "early_warning_dir": ""}  # llm_runs.integrations.warning_verl
"""The plugin's own settings under ``actor.policy_loss`` (never a knob) and their defaults: which ratio, the
step-size controls of :mod:`llm_runs.stepsize` (installed on the actor's engine by the plugin), which count a
group's term is divided by when responses are rejected (:data:`MASK_DENOMINATORS`), and a named recipe of
:data:`llm_runs.stepsize.RECIPES` (``vcpo_exact``; ``none``: no recipe)."""
STEP_SETTINGS = ("ess_scaling", "ess_base_ratio", "ess_use_clipped", "gmc_step")
MASK_DENOMINATORS = ("kept", "sampled")
"""``actor.policy_loss.mask_denominator``: a group whose responses verl's ``rollout_rs`` rejected (their
``response_mask`` emptied) has the term ``(1/k) sum_kept c_i A_i`` over its k kept responses (``kept``, the
default: THEORY §2 with G = k), or ``(1/G) sum_kept c_i A_i`` over the G sampled (``sampled``: NeMo-RL's and
OpenRLHF's count, under which rejection shrinks the step)."""
VERL_POLICY_LOSS_FIELDS = ("_target_", "loss_mode", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                           "ppo_kl_coef", "dro_beta", "rollout_correction", "group_size", *PLUGIN_SETTINGS)
"""Keys of ``actor.policy_loss`` that are verl's own (verl 0.9.1's ``PolicyLossConfig``), the plugin's
settings (:data:`PLUGIN_SETTINGS`) or ``group_size`` (old verl): never a knob."""


def behaviour_from(config) -> str:
    """``actor.policy_loss.behaviour`` (default ``rollout``), checked."""
    pl = _cfg(config, "policy_loss", None)
    b = _cfg(pl, "behaviour", None) if pl is not None else None
    b = PLUGIN_SETTINGS["behaviour"] if b is None else b
    if b not in BEHAVIOURS:
        raise ValueError(f"actor.policy_loss.behaviour = {b!r}; valid: {', '.join(BEHAVIOURS)}")
    return b


def recipe_of(policy_loss) -> dict | None:
    """The recipe ``actor.policy_loss.recipe`` names, as the adapters apply it
    (:func:`llm_runs.integrations._common.recipe_settings`); None without one. A recipe for another loss than
    ``loss_mode`` is a ValueError saying which to set."""
    name = _cfg(policy_loss, "recipe", None) if policy_loss is not None else None
    if name is None or name == PLUGIN_SETTINGS["recipe"]:
        return None
    from .._common import recipe_settings

    try:
        recipe = recipe_settings(name)
    except ValueError as exc:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.recipe: {exc}") from None
    mode = _cfg(policy_loss, "loss_mode", None)
    if mode != recipe["estimator"]:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.recipe={name} trains loss_mode "
                         f"{recipe['estimator']!r}, not {mode!r}: set actor_rollout_ref.actor.policy_loss.loss_mode="
                         f"{recipe['estimator']}")
    return recipe


def plugin_setting(policy_loss, name: str):
    """The plugin setting ``name`` under ``actor.policy_loss``: the user's value, else the recipe's
    (:func:`recipe_of`; a user's value that contradicts it is a ValueError), else :data:`PLUGIN_SETTINGS`'s."""
    given = _cfg(policy_loss, name, None) if policy_loss is not None else None
    recipe = recipe_of(policy_loss)
    from_recipe = (recipe or {}).get("step", {}).get(name)
    if given is not None and from_recipe is not None and given != from_recipe:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.{name} = {given!r} contradicts recipe "
                         f"{_cfg(policy_loss, 'recipe')!r}, which sets {from_recipe!r}: leave {name} out")
    if given is not None:
        return given
    return from_recipe if from_recipe is not None else PLUGIN_SETTINGS[name]


def opob_active(config) -> bool:
    """Whether the actor config's recipe takes OPOB's advantages (``recipe=vcpo_exact``; formed by the actor,
    :mod:`llm_runs.integrations.verl.opob`)."""
    recipe = recipe_of(_cfg(config, "policy_loss", None))
    return recipe is not None and recipe["advantage"] == "opob"


def mask_denominator_from(config) -> str:
    """``actor.policy_loss.mask_denominator`` (default ``kept``), checked (:data:`MASK_DENOMINATORS`)."""
    d = plugin_setting(_cfg(config, "policy_loss", None), "mask_denominator")
    if d not in MASK_DENOMINATORS:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.mask_denominator = {d!r}; valid: "
                         f"{', '.join(MASK_DENOMINATORS)}")
    return d


def step_controls_from(config) -> dict | None:
    """The step-size controls set under ``actor.policy_loss`` (the names of :class:`llm_runs.stepsize.StepControl`)
    or by its recipe, None when none is on."""
    from ...stepsize import StepControl, is_active

    pl = _cfg(config, "policy_loss", None)
    if pl is None:
        return None
    given = {k: plugin_setting(pl, k) for k in STEP_SETTINGS}
    control = StepControl(estimator=_cfg(pl, "loss_mode", "gmc"), eps=eps_from(config), **given)
    return given if is_active(control) else None


def knob_names() -> list[str]:
    """Every knob name of every scheme the plugin registers (:data:`estimators.params.PARAMS`)."""
    from estimators.params import params_of

    return sorted({p.name for s in policy_loss_names() for p in params_of(s)})


def _check_plugin_settings(cfg) -> None:
    """``__post_init__`` of the extended ``PolicyLossConfig`` (verl 0.9.1 ``verl/workers/config/actor.py``), which
    Hydra instantiates through ``policy_loss._target_`` when verl builds the actor config (in ``validate_config``,
    in the driver, before any rollout): the plugin's settings and the knobs are checked here. Under one of the
    plugin's losses a knob of another loss, a bad knob value (-1, NaN, 'abc'), a bad setting or a recipe for
    another loss is a ValueError naming it; under any other ``loss_mode`` (verl's own losses, which never read
    them) a knob or a plugin setting set at all is."""
    parent = getattr(super(type(cfg), cfg), "__post_init__", None)
    if parent is not None:
        parent()
    mode = _cfg(cfg, "loss_mode", None)
    if mode not in policy_loss_names():
        ours = [*getattr(type(cfg), "gmc_plugin_knobs", ()), *PLUGIN_SETTINGS]
        set_here = sorted(k for k in ours if _cfg(cfg, k, None) is not None)
        if set_here:
            raise ValueError(f"actor_rollout_ref.actor.policy_loss sets {set_here}, settings of this toolkit's losses, "
                             f"but loss_mode {mode!r} is not one of them and would ignore them: drop them, or set "
                             f"actor_rollout_ref.actor.policy_loss.loss_mode to one of "
                             f"{', '.join(policy_loss_names())}")
        return
    behaviour_from({"policy_loss": cfg})
    mask_denominator_from({"policy_loss": cfg})
    estimator_options_from({"policy_loss": cfg}, mode)  # another loss's knob, a bad value: refused by name
    from ...stepsize import StepControl

    given = {k: plugin_setting(cfg, k) for k in STEP_SETTINGS}
    try:
        StepControl(estimator=mode, **given)  # a bad setting is refused naming it
    except ValueError as exc:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss: {exc}") from None


def extend_policy_loss_config() -> type | None:
    """Make verl's ``PolicyLossConfig`` (a dataclass that refuses fields it does not declare) take every
    knob of :func:`knob_names` (``None``: not set), so that ``+actor_rollout_ref.actor.policy_loss.kappa=2``
    reaches :func:`estimator_options_from`: a subclass declaring them replaces it in
    ``verl.workers.config``, where the configs' ``_target_`` points. Idempotent; returns the class
    (None: a verl without ``verl.workers.config``). It acts in a process that imported the plugin
    before building the actor config (verl's workers, through ``external_lib``)."""
    import dataclasses
    import importlib

    try:
        wc = importlib.import_module("verl.workers.config")
    except ModuleNotFoundError:
        return None
    current = getattr(wc, "PolicyLossConfig", None)
    if current is None or getattr(current, "gmc_plugin_knobs", None) is not None:
        return current
    own = {f.name for f in dataclasses.fields(current)}
    knobs = [k for k in knob_names() if k not in own]
    settings = [(k, type(v) | None, dataclasses.field(default=None)) for k, v in PLUGIN_SETTINGS.items()
                if k not in own]  # None: not set (the default, or the recipe's)
    ext = dataclasses.make_dataclass("PolicyLossConfig", [(k, float | None, dataclasses.field(default=None))
                                                          for k in knobs] + settings, bases=(current,),
                                     namespace={"__post_init__": _check_plugin_settings})
    ext.__module__ = current.__module__
    ext.gmc_plugin_knobs = tuple(knobs)
    for module in {wc, importlib.import_module(current.__module__)}:
        if getattr(module, "PolicyLossConfig", None) is current:
            module.PolicyLossConfig = ext
    return ext


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def estimator_options_from(config, estimator: str) -> dict:
    """The knobs of ``estimator`` set in verl's actor config, each under ``actor.policy_loss.<knob>``
    (``+actor_rollout_ref.actor.policy_loss.kappa=2`` for ``gmc_cap``; the names of
    :data:`estimators.params.PARAMS`), checked (:func:`estimators.losses.check_options`). A key there
    that is neither verl's own (:data:`VERL_POLICY_LOSS_FIELDS`) nor a knob of ``estimator`` is refused
    naming it, a knob of another estimator included; a knob left unset (absent or None) takes its
    default, except a completion length (``seq_geo_mask``'s ``length``), which comes from the batch."""
    from estimators.losses import check_options
    from estimators.params import params_of

    pl = _cfg(config, "policy_loss", None)
    if pl is None:
        return {}
    if hasattr(pl, "keys"):
        keys = list(pl.keys())
    else:
        import dataclasses

        keys = [f.name for f in dataclasses.fields(pl)] if dataclasses.is_dataclass(pl) else []
    mine = {p.name for p in params_of(estimator)}
    given = {k: _cfg(pl, k) for k in keys if k not in VERL_POLICY_LOSS_FIELDS and _cfg(pl, k) is not None}
    unknown = sorted(set(given) - mine)
    if unknown:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss sets {unknown}, which loss_mode {estimator!r} does not "
                         f"take (its knobs: {', '.join(sorted(mine)) or 'none'}); remove them or choose the loss they "
                         "belong to")
    try:
        check_options(estimator, given)  # a bad value is refused naming the knob
    except ValueError as exc:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss: {exc}") from None
    recipe = recipe_of(pl) if _cfg(pl, "loss_mode", estimator) == estimator else None
    for knob, value in (recipe or {}).get("knobs", {}).items():
        if knob in given and float(given[knob]) != value:
            raise ValueError(f"actor_rollout_ref.actor.policy_loss.{knob} = {given[knob]!r} contradicts recipe "
                             f"{_cfg(pl, 'recipe')!r}, which sets {value!r}: leave {knob} out")
        given[knob] = value
    return given


def scheme_options_from(config, estimator: str) -> dict:
    """Deprecated name of :func:`estimator_options_from` (a ``DeprecationWarning``)."""
    import warnings

    warnings.warn("scheme_options_from is deprecated: use estimator_options_from", DeprecationWarning, stacklevel=2)
    return estimator_options_from(config, estimator)
