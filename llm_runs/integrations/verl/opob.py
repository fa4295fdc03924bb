"""VCPO's off-policy optimal baseline (OPOB) in verl, for ``+actor_rollout_ref.actor.policy_loss.recipe=vcpo_exact``
with ``algorithm.adv_estimator=gmc_opob``: the advantages need each response's ``||grad log pi(o_i)||^2`` at the
update's parameters, which only the actor has. ``gmc_opob`` (:func:`opob_returns`) leaves the advantages 0 and the
response's reward in ``returns``; before each mini-batch's step (``TrainingWorker.train_batch``, wrapped by the
plugin) :func:`opob_batch` runs one forward and backward pass per response through the actor's own engine
(``engine.forward_backward_batch``, verl 0.9.1 ``verl/workers/engine/fsdp/transformer_impl.py``), reads the
gradient's squared norm, clears it, and writes OPOB's advantages (the trainer's
``llm_runs.update._opob``: :func:`llm_runs.stepsize.opob_recipe_advantages`) into the batch, as VCPO's
actor accumulates one trajectory per micro-batch (mit-han-lab/vcpo ``verl/workers/actor/megatron_actor.py``).

One data-parallel rank only: with several, FSDP averages each pass's gradient over the ranks before it can be read,
so a response's own norm is lost; several ranks are refused (when verl validates its config, and here)."""
from __future__ import annotations

import torch

from .compat import _cfg
from .settings import eps_from, estimator_options_from, group_size_from, recipe_of

OPOB_ESTIMATOR = "gmc_opob"
"""The advantage estimator that hands the rewards to the actor's OPOB (``algorithm.adv_estimator=gmc_opob``)."""


def opob_returns(token_level_rewards, response_mask, index=None, epsilon: float = 1e-6, config=None, **kw):
    """``gmc_opob``: advantages 0 (the actor writes OPOB's before the step) and, as ``returns``, each response's
    summed reward on its response tokens; the groups (rows sharing ``index``) checked as ``gmc_loo`` checks them.
    A response with an empty mask (``rollout_rs``) is refused: OPOB over a group's kept responses is not defined."""
    from .losses import groups_not_of_size, rows_by_uid

    if not bool(response_mask.bool().any(-1).all()):
        raise ValueError("advantage estimator gmc_opob: a response has an empty response_mask (rejected by "
                         "algorithm.rollout_correction.rollout_rs); OPOB over a group's kept responses is not "
                         "defined: drop rollout_rs")
    if index is None or len(index) != token_level_rewards.shape[0]:
        raise ValueError("advantage estimator gmc_opob needs `index`, the prompt uid of every row")
    rows = rows_by_uid(list(index))
    odd = groups_not_of_size(rows, len(next(iter(rows.values()))))
    if odd:
        raise ValueError(f"advantage estimator gmc_opob: prompt uids {sorted(map(str, odd))[:3]} have another number "
                         "of responses than the first: every group needs rollout.n responses")
    m = response_mask.to(token_level_rewards.dtype)
    returns = token_level_rewards.detach().sum(-1, keepdim=True) * m
    return torch.zeros_like(returns), returns


def _grad_sq_norm(module) -> float:
    """The squared norm of the gradient the engine's parameters hold (sharded DTensors on one rank: local = all)."""
    total = 0.0
    for p in module.parameters():
        g = p.grad
        if g is None:
            continue
        g = g.to_local() if hasattr(g, "to_local") else g
        total += float(g.detach().double().pow(2).sum())
    return total


def opob_batch(worker, data, config):
    """``data`` (one mini-batch of whole groups, rows regrouped by uid) with its ``advantages`` replaced by OPOB's:
    per response one pass through ``worker.engine`` for ``||grad sum_t log pi(o_t)||^2`` and ``sum_t log pi(o_t)``,
    the ratio against the behaviour log-probs the loss uses (``rollout_log_probs`` under ``behaviour=rollout``),
    the recipe's OPOB settings, float32 advantages on the response tokens."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    from llm_runs.stepsize import opob_recipe_advantages

    from .settings import behaviour_from

    engine = worker.engine
    if engine.get_data_parallel_size() != 1:
        raise ValueError(f"recipe vcpo_exact's OPOB reads each response's gradient norm, which FSDP averages over the "
                         f"{engine.get_data_parallel_size()} data-parallel ranks first: train on one data-parallel "
                         "rank, or choose algorithm.adv_estimator=gmc_loo without the recipe")
    G = group_size_from(config)
    estimator = _cfg(_cfg(config, "policy_loss"), "loss_mode")
    key = "rollout_log_probs" if behaviour_from(config) == "rollout" else "old_log_probs"
    padded = data.select("response_mask", "returns", key).to_padded_tensor()
    mask = padded["response_mask"].bool()
    B = mask.shape[0]
    if B % G or "returns" not in data.keys():  # noqa: SIM118 (TensorDict wants keys())
        raise ValueError(f"recipe vcpo_exact: a mini-batch of {B} rows is not whole groups of G = {G}, or carries no "
                         "returns (set algorithm.adv_estimator=gmc_opob)")
    m = mask.to(torch.float64)
    rewards = (padded["returns"].double() * m).sum(-1) / m.sum(-1).clamp(min=1)
    behaviour = (padded[key].double() * m).sum(-1)
    norms, logp = torch.zeros(B, dtype=torch.float64), torch.zeros(B, dtype=torch.float64)

    seen: list[float] = []

    def row_loss(model_output, data, dp_group=None):  # as verl's ppo_loss reads a micro-batch (utils/losses.py)
        lp = no_padding_2_padding(model_output["log_probs"], data)
        rm = data.select("response_mask").to_padded_tensor()["response_mask"]
        total = (lp * rm.to(lp.dtype)).sum()
        seen.append(float(total.detach()))
        return total, {}

    meta = {"use_remove_padding": worker.model_config.get("use_remove_padding", False), "use_dynamic_bsz": False,
            "max_token_len_per_gpu": worker.engine_config.max_token_len_per_gpu, "micro_batch_size_per_gpu": 1,
            "use_fused_kernels": worker.engine_config.use_fused_kernels}
    with engine.train_mode(disable_auto_offload=tu.get(data, key="disable_auto_offload", default=False)):
        for i in range(B):
            row = tu.index_select_tensor_dict(data, [i])
            tu.assign_non_tensor(row, **meta)
            seen.clear()
            engine.optimizer_zero_grad()
            engine.forward_backward_batch(row, loss_function=row_loss, forward_only=False)
            norms[i], logp[i] = _grad_sq_norm(engine.module), seen[0]
        engine.optimizer_zero_grad()
    recipe = recipe_of(_cfg(config, "policy_loss"))
    adv = opob_recipe_advantages(rewards.view(-1, G), (logp - behaviour).view(-1, G), norms.view(-1, G), estimator,
                                 eps_from(config), estimator_options_from(config, estimator), recipe["opob"])
    old = data["advantages"]
    new = adv.reshape(-1, 1).to(old.dtype) * mask.to(old.dtype)
    data["advantages"] = new
    return data
