"""``actor.loss_agg_mode`` and the masking denominator under the plugin's trajectory losses, against verl 0.9.1's
own ``agg_loss`` (``verl/trainer/ppo/core_algos.py``) applied to the per-token loss whose gradient is the trajectory
term, ``-c_i A_i (log pi(o_t) - sg(log pi(o_t)))``."""
from __future__ import annotations

import pytest
import torch
from test_integrations_verl import actor_config, random_batch, snippet_overrides, verl_config
from verl.trainer.ppo import core_algos

import estimators
from estimators.losses import trajectory_loss
from llm_runs.integrations import verl_plugin  # noqa: F401 (installs the plugin, as external_lib does)

ESTIMATOR = "gmc"


def actor_with(*overrides: str):
    actor = actor_config(verl_config(snippet_overrides() + list(overrides)))
    return actor


def plugin_gradient(actor, batch, adv, mode: str):
    """The plugin loss's value and its gradient with respect to the log-probs, one micro-batch of the whole batch."""
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    logp = batch.new.clone().requires_grad_(True)
    loss, _ = core_algos.get_policy_loss_fn(ESTIMATOR)(
        old_log_prob=batch.old, log_prob=logp, advantages=adv, response_mask=batch.mask, loss_agg_mode=mode,
        config=actor, rollout_log_probs=batch.old)
    loss.backward()
    return loss.detach(), logp.grad


def verl_gradient(batch, adv, eps: float, G: int, mode: str):
    """verl's ``agg_loss`` in ``mode`` of the per-token loss ``-c_i A_i (log pi - sg(log pi))``: its gradient."""
    lr = ((batch.new - batch.old) * batch.mask).sum(-1).reshape(-1, G)
    c = estimators.weights(ESTIMATOR, lr, eps).reshape(-1, 1)
    logp = batch.new.clone().requires_grad_(True)
    loss_mat = -c * adv[:, :1] * (logp - logp.detach())
    loss = core_algos.agg_loss(loss_mat, batch.mask.to(loss_mat.dtype), mode, dp_size=1,
                               batch_num_tokens=int(batch.mask.sum()), global_batch_size=batch.B)
    loss.backward()
    return logp.grad


@pytest.fixture(scope="module")
def case():
    actor = actor_with()
    G = actor.rollout_n
    batch = random_batch(seed=51, prompts_per_step=3, G=G, binary=False, spread=0.5)
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    assert len(set(batch.mask.sum(-1).tolist())) > 2  # responses of several lengths: the modes differ
    return actor, batch, adv, G


def test_seq_mean_token_sum_and_token_mean_are_theorys_term_and_token_mean_is_unchanged(case):
    """Both give THEORY's term: the gradient of verl's seq-mean-token-sum exactly, and verl's token-mean times the
    batch's tokens over its responses (one factor for the whole batch: the same direction). token-mean is the
    same computation as before the setting was read (the core surrogate, bit for bit)."""
    actor, batch, adv, G = case
    eps = actor.clip_ratio_high
    loss_tm, grad_tm = plugin_gradient(actor_with(), batch, adv, "token-mean")
    loss_ts, grad_ts = plugin_gradient(actor_with("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"), batch,
                                       adv, "seq-mean-token-sum")
    assert torch.equal(loss_tm, loss_ts) and torch.equal(grad_tm, grad_ts)
    core = trajectory_loss(ESTIMATOR, batch.new, batch.old, batch.mask, adv[:, 0], G, eps)
    assert torch.equal(loss_tm, core.loss.detach())
    # float64 throughout: the two gradients are the same sums in another order
    torch.testing.assert_close(grad_tm, verl_gradient(batch, adv, eps, G, "seq-mean-token-sum"), rtol=1e-12, atol=0)
    tokens_per_response = float(batch.mask.sum()) / batch.B
    torch.testing.assert_close(grad_tm, tokens_per_response * verl_gradient(batch, adv, eps, G, "token-mean"),
                               rtol=1e-12, atol=0)


def test_seq_mean_token_mean_divides_each_responses_term_by_its_tokens(case):
    """VCPO's mode: the gradient of verl's seq-mean-token-mean, and the core surrogate with A_i / |o_i| (the
    trainer's traj_agg = token-mean); different from token-mean on responses of several lengths."""
    actor, batch, adv, G = case
    eps = actor.clip_ratio_high
    vcpo = actor_with("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean")
    loss, grad = plugin_gradient(vcpo, batch, adv, "seq-mean-token-mean")
    # verl divides by |o_i| + 1e-8 (agg_loss's guard): a relative difference of 1e-8 / |o_i| <= 1e-8, beside rounding
    torch.testing.assert_close(grad, verl_gradient(batch, adv, eps, G, "seq-mean-token-mean"), rtol=1e-8 + 1e-12,
                               atol=0)
    lengths = batch.mask.sum(-1).to(adv.dtype)
    core = trajectory_loss(ESTIMATOR, batch.new, batch.old, batch.mask, adv[:, 0] / lengths, G, eps)
    assert float(loss) == pytest.approx(float(core.loss), abs=1e-15)
    _, grad_tm = plugin_gradient(actor_with(), batch, adv, "token-mean")
    assert float((grad - grad_tm).abs().max()) > 1e-3


@pytest.mark.parametrize("mode", ["token-sum", "seq-mean-token-sum-norm"])
def test_the_other_modes_are_refused_where_the_loss_runs_too(case, mode):
    actor, batch, adv, _ = case
    with pytest.raises(ValueError, match=f"actor_rollout_ref.actor.loss_agg_mode = '{mode}' has no meaning"):
        plugin_gradient(actor, batch, adv, mode)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_the_masking_denominator_is_the_kept_count_or_the_sampled_one(agg):
    """Responses rejected by rollout_rs (an empty mask): each group's term is (1/k) sum over its k kept responses
    (``mask_denominator=kept``, the default) or (1/G) the same sum (``sampled``, under which rejection shrinks
    the step): the core surrogate on each group's kept rows, times 1 or k / G."""
    actor = actor_with()
    G = actor.rollout_n
    batch = random_batch(seed=52, prompts_per_step=3, G=G, binary=False, spread=0.6)
    rejected = [0, 1, G + 3, 2 * G + 1, 2 * G + 2, 2 * G + 5]
    batch.mask[rejected] = False
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    mode = [f"actor_rollout_ref.actor.loss_agg_mode={agg}"]
    got = {d: float(plugin_gradient(actor_with(*mode, f"+actor_rollout_ref.actor.policy_loss.mask_denominator={d}"),
                                    batch, adv, agg)[0]) for d in ("kept", "sampled")}
    assert got["kept"] == float(plugin_gradient(actor_with(*mode), batch, adv, agg)[0])  # kept: the default
    want = {"kept": 0.0, "sampled": 0.0}
    lengths = batch.mask.sum(-1).to(adv.dtype)
    for g in range(3):
        keep = [i for i in range(g * G, (g + 1) * G) if i not in rejected]
        a = adv[keep, 0] / (lengths[keep] if agg == "seq-mean-token-mean" else 1.0)
        core = float(trajectory_loss(ESTIMATOR, batch.new[keep], batch.old[keep], batch.mask[keep], a, len(keep),
                                     actor.clip_ratio_high).loss)  # -(1/k) sum_kept c_i A_i
        want["kept"] += core / 3
        want["sampled"] += core * len(keep) / G / 3
    assert got == pytest.approx(want, abs=1e-12)
    assert abs(got["sampled"] - got["kept"]) > 1e-4
