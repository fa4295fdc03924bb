"""Losses and advantages at their edges: padding, narrow dtypes, extreme ratios, bad shapes.

Every registered loss (:func:`estimators.losses.loss_names`), in float64 / float32 / bfloat16 /
float16: positions outside the completion mask never influence a value or a gradient, whatever
they hold (``-inf``, NaN); bounded losses give a finite value and gradient for every finite input;
the unbounded ones give ``+inf`` (token losses) or refuse with a ValueError (``is``, ``tic_ppo``),
never NaN. (Degenerate batches and extreme knobs: tests/test_loss_robustness_knobs.py; the
verl adapter's edges: tests/test_loss_robustness_verl.py.)
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimators
from estimators.losses import LOGPROB_LOSSES, TOKEN_LOSSES, is_bounded, loss_names, policy_loss
from report_card.robustness import padded_batch as _batch

DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _loss_and_grad(name, logp, old, mask, adv, G=2):
    x = logp.clone().requires_grad_()
    out = policy_loss(name, x, old, mask, adv, G, 0.2)
    out.loss.backward()
    return out.loss.detach(), x.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pad", [-math.inf, math.nan, 1e30], ids=["-inf", "nan", "huge"])
@pytest.mark.parametrize("name", loss_names())
def test_masked_positions_never_influence_a_loss(name, pad, dtype):
    (logp, old), (plogp, pold), mask, adv = _batch(dtype, pad if dtype != torch.float16 or math.isnan(pad)
                                                   or pad < 0 else 6e4)
    ref_loss, ref_grad = _loss_and_grad(name, logp, old, mask, adv)
    loss, grad = _loss_and_grad(name, plogp, pold, mask, adv)
    assert torch.isfinite(loss), (name, dtype, pad, loss)
    assert torch.equal(loss, ref_loss)
    assert bool(torch.isfinite(grad).all())
    assert torch.equal(grad, ref_grad)
    assert bool((grad[mask == 0] == 0).all())


def test_masked_token_log_ratio_selects():
    from estimators.losses import masked_token_log_ratio, trajectory_log_ratio

    logp = torch.tensor([[-1.0, -math.inf, math.nan]], requires_grad=True)
    old = torch.tensor([[-2.0, math.nan, -math.inf]])
    mask = torch.tensor([[1.0, 0.0, 0.0]])
    lr = masked_token_log_ratio(logp, old, mask)
    assert lr.tolist() == [[1.0, 0.0, 0.0]]
    trajectory_log_ratio(logp, old, mask).sum().backward()
    assert logp.grad.tolist() == [[1.0, 0.0, 0.0]]


# ----------------------------------------------------------------------------- the sweep

_FINITE = {"allow_nan": False, "allow_infinity": False}


@st.composite
def _cases(draw):
    name = draw(st.sampled_from(loss_names()))
    dtype = draw(st.sampled_from(DTYPES))
    G = draw(st.sampled_from([2, 4]))
    prompts_per_step = draw(st.integers(1, 2))
    T = draw(st.integers(1, 4))
    B = G * prompts_per_step
    lr = draw(st.lists(st.one_of(st.floats(-1e4, 1e4, **_FINITE), st.sampled_from([1e4, -1e4, 0.0, 30.0, -30.0])),
                       min_size=B * T, max_size=B * T))
    old = draw(st.lists(st.floats(-30.0, 0.0, **_FINITE), min_size=B * T, max_size=B * T))
    keep = draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T))
    pad = draw(st.sampled_from([-math.inf, math.nan, 0.0]))
    adv = draw(st.lists(st.one_of(st.just(0.0), st.floats(-10.0, 10.0, **_FINITE)), min_size=B, max_size=B))
    return name, dtype, G, B, T, lr, old, keep, pad, adv


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_every_loss_finite_or_documented(case):
    """Bounded losses: finite value and gradient; token losses that are not bounded: +inf, never
    NaN; ``is`` / ``tic_ppo``: finite, or a ValueError saying the surrogate overflows. And the
    padding never matters: the same batch padded with zeros gives the same bits."""
    name, dtype, G, B, T, lr, old, keep, pad, adv = case
    mask = torch.tensor(keep, dtype=torch.float64).reshape(B, T)
    mask[:, 0] = 1.0  # every completion has a token
    adv_t = torch.tensor(adv, dtype=torch.float64)

    def run(pad_value):
        old_t = torch.tensor(old, dtype=torch.float64).reshape(B, T)
        logp = old_t + torch.tensor(lr, dtype=torch.float64).reshape(B, T)
        logp[mask == 0] = pad_value
        old_t[mask == 0] = pad_value
        x = logp.to(dtype).requires_grad_()
        out = policy_loss(name, x, old_t.to(dtype), mask, adv_t, G, 0.2)
        out.loss.backward()
        return out.loss.detach(), x.grad

    logp = (torch.tensor(old, dtype=torch.float64) + torch.tensor(lr, dtype=torch.float64)).reshape(B, T)
    above = bool(((logp.to(dtype) > 0) & (mask > 0)).any()) or bool(((torch.tensor(old).reshape(B, T)
                                                                     .to(dtype) > 0) & (mask > 0)).any())
    try:
        loss, grad = run(pad)
    except ValueError as exc:
        if name in LOGPROB_LOSSES:  # they read log-probabilities: one above 0 is refused
            assert above and "above 0" in str(exc), (name, str(exc))
            return
        assert name in ("is", "tic_ppo") and "unbounded" in str(exc), (name, str(exc))
        return
    # the refusal is pinned both ways: a log-probability above 0 accepted by such a loss fails here
    assert not (name in LOGPROB_LOSSES and above), (name, "accepted a log-probability above 0")
    loss0, grad0 = run(0.0)
    assert torch.equal(loss, loss0)
    assert torch.equal(grad, grad0)
    assert not bool(torch.isnan(loss)), (name, dtype)
    assert not bool(torch.isnan(grad).any()), (name, dtype)
    assert bool((grad[mask == 0] == 0).all())
    if is_bounded(name) or name in ("is", "tic_ppo"):
        assert bool(torch.isfinite(loss)), (name, dtype, float(loss))
        assert bool(torch.isfinite(grad).all()), (name, dtype)
    else:
        assert float(loss) != -math.inf  # unbounded above only: +inf, never -inf


def test_unbounded_token_losses_give_plus_inf():
    """PPO's one-sided clip with A < 0: the value grows with r; once r overflows, +inf (not NaN)."""
    logp = torch.tensor([[1e4, 0.0], [0.0, 0.0]], requires_grad=True)
    old = torch.zeros(2, 2)
    for name in ("token_clip", "gspo", "opsm"):
        assert not is_bounded(name)
        x = logp.detach().clone().requires_grad_()
        out = policy_loss(name, x, old, torch.ones(2, 2), torch.tensor([-1.0, 1.0]), 2, 0.2)
        out.loss.backward()
        assert float(out.loss.detach()) == math.inf
        assert not bool(torch.isnan(x.grad).any())
        # with A > 0 the same ratio is clipped: finite value, no gradient through it
        y = logp.detach().clone().requires_grad_()
        out = policy_loss(name, y, old, torch.ones(2, 2), torch.tensor([1.0, -1.0]), 2, 0.2)
        out.loss.backward()
        assert math.isfinite(float(out.loss.detach())) and bool(torch.isfinite(y.grad).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["is", "tic_ppo"])
def test_unbounded_schemes_refuse_overflow(name, dtype):
    logp = torch.tensor([[1e4, 0.0], [0.0, 0.0]], dtype=dtype, requires_grad=True)
    with pytest.raises(ValueError, match=rf"scheme '{name}' is unbounded .*group 0, completion 0"):
        policy_loss(name, logp, torch.zeros(2, 2, dtype=dtype), torch.ones(2, 2), torch.tensor([-1.0, 1.0]),
                    2, 0.2)


def test_bounded_token_losses_in_float16_at_large_ratios():
    """float16: a per-token log-ratio of 20 with A > 0 (r = 5e8 overflows float16) gave a NaN gradient.
    Every loss but ``is`` (whose weight 5e8 is the overflow) is finite there."""
    for name in [n for n in loss_names() if n != "is"]:
        # the same per-token log-ratios as log-probs of a policy (<= 0: dppo_tv reads exp(logp) as one)
        x = torch.tensor([[0.0, -20.0], [-20.0, -20.0]], dtype=torch.float16, requires_grad=True)
        out = policy_loss(name, x, torch.full((2, 2), -20.0, dtype=torch.float16), torch.ones(2, 2),
                          torch.tensor([1.0, -1.0]), 2, 0.2)
        out.loss.backward()
        assert math.isfinite(float(out.loss.detach())), name
        assert bool(torch.isfinite(x.grad).all()), name


def test_advantages_finite_but_beyond_half_range_are_not_blamed():
    """Advantages of 1e6 are finite: with float16 log-probs the loss is computed in float32."""
    x = torch.zeros(2, 2, dtype=torch.float16, requires_grad=True)
    out = policy_loss("topr", x, torch.zeros(2, 2, dtype=torch.float16), torch.ones(2, 2),
                      torch.tensor([1e6, -1e6]), 2, 0.2)
    out.loss.backward()
    assert float(out.loss.detach()) == 0.0
    assert not bool(torch.isnan(x.grad).any())  # A / 2 = 5e5 per token: beyond float16, so +-inf there
    # called directly with float16 log-probs the overflow is named, never blamed on the value
    with pytest.raises(ValueError, match=r"advantage 1000000.0 at index \(0,\) overflows .*float16"):
        TOKEN_LOSSES["token_clip"].fn(x, torch.zeros(2, 2, dtype=torch.float16), torch.ones(2, 2),
                                      torch.tensor([1e6, -1e6]), 2, 0.2)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name", ["gmc", "token_clip"])
def test_advantages_of_another_shape_are_refused(name):
    G, prompts_per_step, T = 4, 2, 3
    logp = torch.zeros(G * prompts_per_step, T, requires_grad=True)
    ok = torch.arange(G * prompts_per_step, dtype=torch.float32) - 3.5
    policy_loss(name, logp, torch.zeros_like(logp), torch.ones_like(logp), ok, G, 0.2)
    policy_loss(name, logp, torch.zeros_like(logp), torch.ones_like(logp), ok.reshape(prompts_per_step, G), G, 0.2)
    for bad in (ok.reshape(G, prompts_per_step), ok.reshape(1, -1), ok.reshape(-1, 1), ok.reshape(2, 2, 2)):
        with pytest.raises(ValueError, match=r"advantages must have shape \(8,\) .* or \(2, 4\)"):
            policy_loss(name, logp, torch.zeros_like(logp), torch.ones_like(logp), bad, G, 0.2)


# ----------------------------------------------------------------------------- GMC and advantages


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gmc_weights_are_differentiable(dtype):
    x = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.1, -0.1, 0.0, 0.0]], dtype=dtype, requires_grad=True)
    c = estimators.weights("gmc", x, 0.2)
    c.sum().backward()
    # capped group: c = G(1+eps) w / sum w, so sum_i c_i is constant and its gradient 0; uncapped: c = w
    assert torch.allclose(x.grad[0], torch.zeros(4, dtype=dtype), atol=1e-6)
    assert torch.allclose(x.grad[1], torch.exp(x.detach()[1]))
    # numpy's in-place path is unchanged: the same numbers
    np.testing.assert_allclose(estimators.weights("gmc", x.detach().numpy(), 0.2), c.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_grpo_advantages_of_equal_rewards_are_zero(lib):
    r = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
    r = torch.from_numpy(r) if lib == "torch" else r
    a = estimators.advantages(r, "grpo", delta=0.0)
    a = np.asarray(a)
    assert np.isfinite(a).all()
    assert (a[:2] == 0).all()
    np.testing.assert_allclose(a[2], [math.sqrt(3) / 2, -math.sqrt(3) / 2, -math.sqrt(3) / 2, math.sqrt(3) / 2])


@pytest.mark.parametrize("delta", [math.nan, -1e-6, math.inf, "0.1", None])
def test_grpo_bad_delta_refused(delta):
    with pytest.raises(ValueError, match="delta must be a finite real number >= 0"):
        estimators.advantages(np.ones((1, 4)), "grpo", delta=delta)


def test_verl_advantage_estimator_equal_rewards():
    from llm_runs.integrations.verl import grouped_advantages

    rewards = torch.zeros(8, 3)
    rewards[:4, -1] = 1.0  # group "a": all 1; group "b": all 0
    adv, _ = grouped_advantages("grpo", rewards, torch.ones(8, 3), index=["a"] * 4 + ["b"] * 4, epsilon=0.0)
    assert bool(torch.isfinite(adv).all()) and bool((adv == 0).all())
    with pytest.raises(ValueError, match="delta must be a finite real number >= 0, got nan"):
        grouped_advantages("grpo", rewards, torch.ones(8, 3), index=["a"] * 4 + ["b"] * 4, epsilon=math.nan)
