"""Losses at their edges through the verl adapter: a config without clip ratios, an empty response row,
padding in the old-style (tuple4) return, and every knob read from ``actor.policy_loss``."""
from __future__ import annotations

import math

import pytest
import torch

import estimators

# ----------------------------------------------------------------------------- verl adapter edges


def test_verl_config_without_clip_ratios_is_refused():
    from llm_runs.integrations.verl import eps_from

    with pytest.raises(ValueError, match="clip_ratio_high and actor.clip_ratio are both None"):
        eps_from({"clip_ratio_high": None, "clip_ratio": None})
    assert eps_from({"clip_ratio_high": None, "clip_ratio": 0.2}) == 0.2


def test_verl_empty_response_row_is_a_rejected_response_with_weight_zero():
    """An empty response_mask (verl's rollout_rs rejected the response) weighs 0: no error, no gradient on
    its row, a finite loss from the kept responses."""
    from llm_runs.integrations.verl import trajectory_policy_loss

    mask = torch.ones(4, 3)
    mask[2] = 0
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None] * mask
    logp = torch.full((4, 3), -0.5, requires_grad=True)
    loss, _ = trajectory_policy_loss("gmc", torch.full((4, 3), -0.5), logp, adv, mask,
                                     {"rollout_n": 2, "clip_ratio_high": 0.2},
                                     rollout_log_probs=torch.full((4, 3), -0.6))
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.equal(logp.grad[2], torch.zeros(3)) and bool(logp.grad[[0, 1, 3]].abs().sum() > 0)


def test_verl_tuple4_loss_ignores_padding_in_ppo_kl_and_advantages():
    """verl's old-style (tuple4) return: ``ppo_kl`` was NaN with -inf or NaN log-prob padding, and NaN
    advantages in padding positions only were refused as non-finite."""
    from llm_runs.integrations.verl.compat import TUPLE4_STYLE
    from llm_runs.integrations.verl.losses import make_policy_loss, trajectory_policy_loss

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    old = torch.tensor([[-1.0, -0.5, 0.0], [-0.7, 0.0, 0.0], [-0.2, -0.3, -0.4], [-1.1, -0.9, 0.0]])
    new = old + 0.1 * torch.arange(12.0).reshape(4, 3).sin()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 3).clone()
    # verl 0.4 passes no rollout log-probs: its callers take the decoupled ratio
    cfg = {"rollout_n": 2, "clip_ratio_high": 0.2, "policy_loss": {"behaviour": "recomputed"}}
    ref = make_policy_loss("gmc", TUPLE4_STYLE)(old, new.clone().requires_grad_(), adv * mask, mask, config=cfg)
    pad = mask == 0
    for fill in (-math.inf, math.nan):
        o, n, a = old.masked_fill(pad, fill), new.masked_fill(pad, fill), adv.masked_fill(pad, math.nan)
        got = make_policy_loss("gmc", TUPLE4_STYLE)(o, n.requires_grad_(), a, mask, config=cfg)
        for x, y in zip(got, ref):
            assert torch.isfinite(x).all() and float(x) == pytest.approx(float(y), abs=1e-7)
        loss, _ = trajectory_policy_loss("gmc", o, n, a, mask, cfg)
        assert float(loss) == pytest.approx(float(ref[0]), abs=1e-7)


def test_verl_plugin_reads_every_knob_from_policy_loss_and_refuses_an_unknown_one():
    """loss_mode gmc_cap, seq_geo_mask, vespo ran at their defaults whatever actor.policy_loss set; and
    seq_geo_mask ran with L = 1 whatever the response length."""
    from llm_runs.integrations.verl.losses import trajectory_policy_loss
    from llm_runs.integrations.verl.settings import knob_names

    old = torch.tensor([[-1.0, -0.5, -0.2], [-0.7, -0.4, -0.9], [-0.3, -0.2, -0.4], [-1.1, -0.9, -0.3]])
    new = old + torch.tensor([[0.9, 0.4, 0.3], [-0.2, 0.1, 0.0], [0.05, -0.3, 0.2], [0.3, 0.2, -0.1]])
    mask = torch.ones(4, 3)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 3).clone()
    base = {"rollout_n": 2, "clip_ratio_high": 0.2}
    for scheme, knobs in (("gmc_cap", {"kappa": 0.7}), ("vespo", {"k_pos": 1.0, "lambda_pos": 0.5}),
                          ("seq_geo_mask", {"lo": 0.9, "hi": 1.2, "C": 1.5})):
        _, out = trajectory_policy_loss(scheme, old, new, adv, mask, {**base, "policy_loss": {"loss_mode": scheme,
                                                                                              **knobs}},
                                        rollout_log_probs=old)
        length = {"length": 3.0} if scheme == "seq_geo_mask" else {}  # every response has 3 tokens
        expected = estimators.weights(scheme, out.seq_log_ratio, 0.2, torch.tensor([[1.0, -1.0], [0.5, -0.5]]),
                                      **knobs, **length)
        default = estimators.weights(scheme, out.seq_log_ratio, 0.2, torch.tensor([[1.0, -1.0], [0.5, -0.5]]))
        assert torch.equal(out.weights, expected) and not torch.equal(expected, default), scheme
    with pytest.raises(ValueError, match=r"actor.policy_loss sets \['kapa'\], which loss_mode 'gmc_cap' does not take"):
        trajectory_policy_loss("gmc_cap", old, new, adv, mask, {**base, "policy_loss": {"kapa": 2.0}},
                               rollout_log_probs=old)
    with pytest.raises(ValueError, match=r"sets \['kappa'\], which loss_mode 'gmc'"):
        trajectory_policy_loss("gmc", old, new, adv, mask, {**base, "policy_loss": {"kappa": 2.0}},
                               rollout_log_probs=old)
    with pytest.raises(ValueError, match="kappa"):
        trajectory_policy_loss("gmc_cap", old, new, adv, mask, {**base, "policy_loss": {"kappa": -1.0}},
                               rollout_log_probs=old)
    ragged = mask.clone()
    ragged[0, 2] = 0
    with pytest.raises(ValueError, match="seq_geo_mask: its knob length"):
        trajectory_policy_loss("seq_geo_mask", old, new, adv, ragged, base, rollout_log_probs=old)
    assert {"kappa", "length", "k_pos", "lambda_neg", "C", "lo", "hi"} <= set(knob_names())
