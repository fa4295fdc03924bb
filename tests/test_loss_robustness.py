"""Losses and advantages at their edges: padding, narrow dtypes, extreme ratios, bad shapes.

Every registered loss (:func:`estimators.losses.loss_names`), in float64 / float32 / bfloat16 /
float16: positions outside the completion mask never influence a value or a gradient, whatever
they hold (``-inf``, NaN); bounded losses give a finite value and gradient for every finite input;
the unbounded ones give ``+inf`` (token losses) or refuse with a ValueError (``is``, ``tic_ppo``),
never NaN.
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


# ----------------------------------------------------------------------------- degenerate batches and extreme knobs


def _tiny_batch(dtype=torch.float32):
    logp = torch.tensor([[-1.0, -0.5], [-0.7, -0.2], [-0.3, -0.9], [-1.2, -0.1]], dtype=dtype)
    old = torch.tensor([[-1.1, -0.4], [-0.6, -0.3], [-0.3, -1.0], [-1.0, -0.2]], dtype=dtype)
    return logp, old, torch.ones(4, 2), torch.tensor([1.0, -1.0, 0.5, -0.5])


@pytest.mark.parametrize("name", loss_names())
def test_an_empty_batch_is_refused_never_a_nan_loss(name):
    empty = torch.zeros(0, 3)
    with pytest.raises(ValueError, match="empty batch"):
        policy_loss(name, empty.clone().requires_grad_(), empty, torch.ones(0, 3), torch.zeros(0), 2, 0.2)


@pytest.mark.parametrize("name", loss_names())
def test_a_mask_value_outside_0_1_is_refused(name):
    logp, old, mask, adv = _tiny_batch()
    mask[1, 1] = -1.0
    with pytest.raises(ValueError, match=r"mask .* 0 or 1 .*\(1, 1\)"):
        policy_loss(name, logp.requires_grad_(), old, mask, adv, 2, 0.2)


def test_dppo_tv_refuses_log_probabilities_above_0():
    logp, old, mask, adv = _tiny_batch()
    old[2, 0] = 0.5
    with pytest.raises(ValueError, match=r"old_logp .* above 0 .*\(2, 0\)"):
        policy_loss("dppo_tv", logp.requires_grad_(), old, mask, adv, 2, 0.2)


@pytest.mark.parametrize("name, knobs, log_ratio", [
    ("sapo", {"tau_pos": 1e-40}, 0.5), ("sapo", {"tau_pos": 1e300}, 0.5),
    ("vespo", {"k_pos": 30.0, "lambda_pos": 0.5}, 4.5)])
def test_an_extreme_knob_is_refused_or_the_loss_stays_finite(name, knobs, log_ratio):
    logp, old, mask, adv = _tiny_batch()
    logp = old + torch.tensor([log_ratio / 2, log_ratio / 2])  # every trajectory at the same log-ratio
    x = logp.clone().requires_grad_()
    try:
        out = policy_loss(name, x, old, mask, adv, 2, 0.2, **knobs)
    except ValueError as exc:
        assert any(k in str(exc) for k in knobs), exc
        return
    out.loss.backward()
    assert torch.isfinite(out.loss) and bool(torch.isfinite(x.grad).all())


BAD_KNOB_VALUES = (math.nan, -1.0, "abc", 1e300)
"""Values no knob may take: not a number, negative, not a number at all, and one float32 cannot hold (the
batch is float32: in range or not, 1e300 must be refused, naming the knob, never a torch RuntimeError)."""


def _knobs_of(name: str) -> list[str]:
    """``eps`` (every loss is passed one, used or not), the knobs of its record, and a token loss's options."""
    from estimators.params import params_of

    return ["eps", *(p.name for p in params_of(name)), *(TOKEN_LOSSES[name].options if name in TOKEN_LOSSES else ())]


@pytest.mark.parametrize("name", loss_names())
def test_every_loss_checks_every_knob_it_is_passed_used_or_not(name):
    """Every registered loss, through ``policy_loss`` and (token losses) its registered function called
    directly: each knob it takes, ``eps`` included where the loss ignores it (p3o, ctpo, dispo, oapl, ...), is
    refused at NaN, -1, 'abc' and 1e300 with a ValueError naming it; 1e300 names float32 where the knob's
    range admits it; a knob the loss does not take is refused by name; the defaults pass."""
    from estimators.losses import check_options

    logp, old, mask, adv = _tiny_batch(torch.float32)

    def via_policy_loss(eps, kw):
        return policy_loss(name, logp.clone().requires_grad_(), old, mask, adv, 2, eps, **kw)

    calls = [via_policy_loss]
    if name in TOKEN_LOSSES:
        calls.append(lambda eps, kw: TOKEN_LOSSES[name].fn(logp.clone().requires_grad_(), old, mask, adv, 2, eps, **kw))
    for knob in _knobs_of(name):
        for bad in BAD_KNOB_VALUES:
            for call in calls:
                eps, kw = (bad, {}) if knob == "eps" else (0.2, {knob: bad})
                with pytest.raises(ValueError, match=knob) as info:
                    call(eps, kw)
                if bad == 1e300 and (knob == "eps" or _in_range(check_options, name, knob, bad)):
                    assert "overflows torch.float32" in str(info.value), (name, knob, info.value)
    for call in calls:
        with pytest.raises(ValueError, match="no_such_knob"):
            call(0.2, {"no_such_knob": 1.0})
        assert torch.isfinite(call(0.2, {}).loss)
    # the same knob of 1e300 in float64, where it fits, is not refused for its size
    big = [k for k in _knobs_of(name) if k == "eps" or _in_range(check_options, name, k, 1e300)]
    for knob in big:
        lp, od = logp.double(), old.double()
        eps, kw = (1e300, {}) if knob == "eps" else (0.2, {knob: 1e300})
        try:
            policy_loss(name, lp.clone().requires_grad_(), od, mask, adv, 2, eps, **kw)
        except ValueError as exc:  # a loss that overflows float64 at such a knob may say so, but not of its size
            assert "the dtype the loss computes in" not in str(exc), (name, knob, exc)


def _in_range(check_options, name, knob, value) -> bool:
    try:
        check_options(name, {knob: value})
    except ValueError:
        return False
    return True


def _config_knobs() -> list[tuple[str, str]]:
    """(config field, the name its refusal must give) of every knob field, ``eps`` and ``eps_high``."""
    from llm_runs.config import TrainConfig

    fields = TrainConfig.__dataclass_fields__
    return [("eps", "eps"), ("eps_high", "eps_high"),
            *sorted((f, v.metadata["knob"][1]) for f, v in fields.items() if "knob" in v.metadata)]


@pytest.mark.parametrize("field, knob", _config_knobs())
def test_the_trainer_s_config_refuses_a_knob_its_loss_dtype_cannot_hold(field, knob):
    """Every knob field of the trainer's config (every estimator's, not only the chosen one's), ``eps`` and
    ``eps_high``: 1e300 is refused when the config is validated (the loss computes in float32), naming the knob,
    before any work."""
    from llm_runs.config import TrainConfig

    with pytest.raises(ValueError, match=rf"\b{knob} (\(.*\) )?(=|must)"):
        TrainConfig(**{field: 1e300}).validate()


def test_vespo_group_mass_sup_at_a_large_lambda_is_inf_not_an_overflow_error():
    assert estimators.get_scheme("vespo").group_mass_sup(0.2, lambda_pos=800.0, k_pos=2.0) == math.inf
    assert not estimators.get_scheme("vespo").member(0.2, lambda_pos=800.0, k_pos=2.0)


@pytest.mark.parametrize("name", [n for n in loss_names() if is_bounded(n)])
def test_bf16_log_probs_with_advantages_near_float32s_range_are_refused_or_finite(name):
    _, old, mask, _ = _tiny_batch(torch.bfloat16)
    adv = torch.tensor([3e38, -3e38, 3e38, -3e38])
    x = (old + 1.5).clamp(max=0).clone().requires_grad_()
    try:
        out = policy_loss(name, x, old, mask, adv, 2, 0.2)
    except ValueError as exc:
        assert "advantage" in str(exc), exc
        return
    out.loss.backward()
    assert torch.isfinite(out.loss) and bool(torch.isfinite(x.grad).all()), name


def test_a_sapo_temperature_float32_cannot_hold_is_a_config_error_not_a_torch_error():
    from llm_runs.config import resolve_config

    with pytest.raises(ValueError, match=r"tau_pos .* 1e\+30.*sapo_tau_pos"):
        resolve_config({"estimator": "sapo", "sapo_tau_pos": 1e300})


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


@pytest.mark.parametrize("name", LOGPROB_LOSSES)
@pytest.mark.parametrize("where", ["logp", "old_logp"])
def test_a_log_probability_above_0_is_refused(name, where):
    logp, old = torch.full((4, 3), -0.5), torch.full((4, 3), -0.4)
    {"logp": logp, "old_logp": old}[where][2, 1] = 0.25
    with pytest.raises(ValueError, match=f"{name}: {where} holds a log-probability above 0"):
        policy_loss(name, logp, old, torch.ones(4, 3), torch.tensor([1.0, -1.0, 0.5, -0.5]), 2, 0.2)


@pytest.mark.parametrize("G", [np.int32(2), np.int64(2), torch.tensor(2), np.array(2)])
def test_any_integral_group_size_is_accepted(G):
    logp, old = torch.full((4, 3), -0.5, requires_grad=True), torch.full((4, 3), -0.4)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    for name in ("gmc", "icepop", "token_clip"):
        want = policy_loss(name, logp, old, torch.ones(4, 3), adv, 2, 0.2).loss
        assert torch.equal(policy_loss(name, logp, old, torch.ones(4, 3), adv, G, 0.2).loss, want)
    for bad in (2.0, True, torch.tensor(2.0), np.float64(2)):
        with pytest.raises(ValueError, match="group_size G must be an integer"):
            policy_loss("gmc", logp, old, torch.ones(4, 3), adv, bad, 0.2)


@pytest.mark.parametrize("name", loss_names())
def test_no_gradient_flows_into_the_advantages(name):
    logp = (torch.full((4, 3), -0.5) + 0.05 * torch.arange(12.0).reshape(4, 3) / 12).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], requires_grad=True)
    out = policy_loss(name, logp, torch.full((4, 3), -0.5), torch.ones(4, 3), adv, 2, 0.2)
    out.loss.backward()
    assert adv.grad is None and logp.grad is not None
