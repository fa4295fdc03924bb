"""The patch of verl's engine path (``TrainingWorker``) that gives the plugin's losses whole groups,
taken from the prompt uids the data carries (see :mod:`llm_runs.integrations.verl`)."""
from __future__ import annotations

from estimators._compat import renamed_keywords

from .compat import _cfg
from .losses import group_ids, rollout_log_probs, rows_by_uid, whole_groups
from .opob import opob_batch
from .settings import eps_from, group_size_from, opob_active, policy_loss_names, step_controls_from


def _rollout_log_probs(data):
    """The micro-batch's ``rollout_log_probs`` padded as verl's ``ppo_loss`` pads ``old_log_probs``
    (``data.select(...).to_padded_tensor()``, verl/workers/utils/losses.py), None when the data carries none."""
    if data is None or "rollout_log_probs" not in data.keys():  # noqa: SIM118 (TensorDict wants keys())
        return None
    return data.select("rollout_log_probs", "old_log_probs").to_padded_tensor()["rollout_log_probs"]


def _uids(data) -> list | None:
    """The prompt uid of every row of a verl TensorDict (None: the data carries none)."""
    if data is None or "uid" not in data.keys():  # noqa: SIM118 (TensorDict wants keys())
        return None
    from verl.utils import tensordict_utils as tu

    uids = tu.get(data, "uid")
    return list(uids) if isinstance(uids, (list, tuple)) or hasattr(uids, "__len__") else None


def _plugin_estimator(loss_fn) -> str | None:
    """The plugin estimator a verl engine loss (``partial(ppo_loss, config=actor_config)``) selects, else None."""
    config = getattr(loss_fn, "keywords", {}).get("config") if loss_fn is not None else None
    policy_loss = _cfg(config, "policy_loss") if config is not None else None
    mode = _cfg(policy_loss, "loss_mode") if policy_loss is not None else None
    return mode if mode in policy_loss_names() else None


class EngineLoss:
    """verl's engine loss (``partial(ppo_loss, config=...)``) with the micro-batch's prompt uids
    handed to the plugin's policy loss, which ``ppo_loss`` calls without them."""

    @renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
    def __init__(self, inner, estimator: str):
        self.inner, self.estimator = inner, estimator
        self.keywords = getattr(inner, "keywords", {})  # still looks like the partial verl built

    def __call__(self, model_output, data, dp_group=None):
        # by keyword, as verl's engines call it (config is bound by keyword)
        with group_ids(_uids(data)), rollout_log_probs(_rollout_log_probs(data)):
            return self.inner(model_output=model_output, data=data, dp_group=dp_group)

    def __repr__(self):
        return f"EngineLoss({self.estimator!r}, {self.inner!r})"


def regroup_by_uid(data):
    """``data`` (a verl TensorDict) with the rows of each prompt uid made contiguous, groups in
    order of first appearance (unchanged when they already are, or when there is no uid)."""
    ids = _uids(data)
    if ids is None:
        return data
    order = [i for r in rows_by_uid(ids).values() for i in r]
    if order == list(range(len(ids))):
        return data
    from verl.utils import tensordict_utils as tu

    return tu.index_select_tensor_dict(data, order)


def check_whole_groups_on_rank(data, G: int) -> None:
    """Refuse a rank's training batch that holds part of a group (``ValueError`` naming the uid).

    Each data-parallel rank trains on its own share of the batch; the regrouping inside the
    rank cannot bring back rows that verl dispatched to another rank. With several ranks
    verl's ``trainer.balance_batch=True`` partitions the rows by sequence length, ignoring the
    prompt uids, so a group's responses end up on different ranks.
    """
    ids = _uids(data)
    if ids is None:
        return
    whole_groups(ids, G, "in this rank's training batch",
                 "the group is split across data-parallel ranks. With several data-parallel ranks set "
                 "trainer.balance_batch=False (verl's balancing partitions "
                 "rows by length, ignoring groups) and keep train_batch_size a multiple of the number of ranks")


def _regrouping(method, step_metrics: bool = False):
    """A TrainingWorker method that first checks and regroups its batch by uid when the plugin's loss is set, and
    adds the step control's factor of the optimiser step it took (:func:`add_step_metrics`) to its metrics."""
    import functools

    @functools.wraps(method)
    def wrapper(self, data, *args, **kwargs):
        loss_fn = getattr(self, "loss_fn", None)
        if isinstance(loss_fn, EngineLoss):
            config = loss_fn.keywords.get("config")
            if config is not None:
                check_whole_groups_on_rank(data, group_size_from(config))
            data = regroup_by_uid(data)
            if step_metrics and config is not None and opob_active(config):  # one mini-batch, before its step
                data = opob_batch(self, data, config)
        result = method(self, data, *args, **kwargs)
        if step_metrics:
            add_step_metrics(result, getattr(self, "engine", None))
        return result

    wrapper.gmc_plugin_wrapped = method
    return wrapper


def add_step_metrics(output, engine) -> None:
    """Put the factor of the optimiser step ``engine`` just took under a step control
    (``engine.step_control_last``: ``step/lr_scale``, ``step/ess_ratio``, ``step/gmc_scale``) into the metrics of
    ``TrainingWorker.train_batch``'s ``output`` (verl 0.9.1 ``verl/workers/engine_workers.py``), as
    ``actor/step/...``: once per mini-batch, where verl logs ``grad_norm``. Nothing without a control, or on a rank
    that returns no output."""
    last = getattr(engine, "step_control_last", None) if engine is not None else None
    if not last or output is None or "metrics" not in output.keys():  # noqa: SIM118 (TensorDict wants keys())
        return
    from verl.utils import tensordict_utils as tu

    metrics = dict(tu.get(output, "metrics"))
    metrics.update({f"actor/{k}": float(v) for k, v in last.items()})
    tu.assign_non_tensor(output, metrics=metrics)


def _wrapping_set_loss_fn(method):
    import functools

    @functools.wraps(method)
    def set_loss_fn(self, loss_fn):
        estimator = _plugin_estimator(loss_fn)
        if estimator is not None and not isinstance(loss_fn, EngineLoss):
            loss_fn = EngineLoss(loss_fn, estimator)
        result = method(self, loss_fn)
        config = loss_fn.keywords.get("config") if isinstance(loss_fn, EngineLoss) else None
        controls = step_controls_from(config) if config is not None else None
        engine = getattr(self, "engine", None)
        if controls and engine is not None and not getattr(engine, "gmc_step_control", None):
            from .stepsize import install_step_control

            engine.gmc_step_control = install_step_control(engine, estimator=estimator, eps=eps_from(config),
                                                           **controls)
        if config is not None:  # the early warning, when actor.policy_loss.early_warning switches it on
            from ..warning_verl import install_from_config

            install_from_config(engine, config)
        return result

    set_loss_fn.gmc_plugin_wrapped = method
    return set_loss_fn


def patch_engine_path(engine_workers=None) -> bool:
    """Make verl's engine path give the plugin's losses whole groups, taken from the data.

    Why a patch: verl's engine loss ``ppo_loss`` (verl/workers/utils/losses.py) calls a
    registered policy loss with log-probs, advantages and the mask only, although the
    micro-batch it holds carries every row's prompt ``uid``; and the batch reaches
    ``TrainingWorker`` in whatever order the trainer left it (``balance_batch`` sorts rows by
    length), which then cuts it into mini- and micro-batches of consecutive rows. Three
    methods of ``verl.workers.engine_workers.TrainingWorker`` are wrapped (idempotent):

    * ``set_loss_fn``: a loss whose ``config.policy_loss.loss_mode`` is a plugin scheme is
      wrapped in :class:`EngineLoss`, which hands the micro-batch's uids and ``rollout_log_probs``
      to the policy loss; the policy loss then forms the groups from them (any row order inside a
      micro-batch) and refuses a micro-batch holding part of a group. When ``config.policy_loss``
      sets a step-size control (``ess_scaling``, ``gmc_step``, ...), it is installed on the worker's
      engine (:func:`llm_runs.integrations.verl.stepsize.install_step_control`);
    * ``train_mini_batch`` and ``train_batch``: with such a loss, the batch is first
      regrouped by uid (:func:`regroup_by_uid`), so that consecutive rows, and so every
      mini- and micro-batch of a multiple of G rows, hold whole groups; ``train_batch``'s metrics get the
      step control's factor of its optimiser step (:func:`add_step_metrics`); under recipe ``vcpo_exact``
      ``train_batch`` first writes OPOB's advantages into its mini-batch
      (:func:`llm_runs.integrations.verl.opob.opob_batch`).

    Other losses pass through untouched. Tested with verl 0.9.1 (``ActorRolloutRefWorker``
    builds ``partial(ppo_loss, config=actor_config)`` after importing ``external_lib`` and
    hands it to its ``TrainingWorker`` with ``set_loss_fn``). Returns False when verl's
    engine workers cannot be imported (older verl: the layout checks of the loss remain).
    """
    if engine_workers is None:
        try:
            from verl.workers import engine_workers
        except ImportError:
            return False
    worker = getattr(engine_workers, "TrainingWorker", None)
    if worker is None:
        return False
    for name, wrap in (("set_loss_fn", _wrapping_set_loss_fn), ("train_mini_batch", _regrouping),
                       ("train_batch", lambda m: _regrouping(m, step_metrics=True))):
        method = worker.__dict__.get(name)
        if method is None:
            raise RuntimeError(f"verl's TrainingWorker has no {name}: this verl is not one the plugin is tested with")
        if not hasattr(method, "gmc_plugin_wrapped"):
            setattr(worker, name, wrap(method))
    return True
