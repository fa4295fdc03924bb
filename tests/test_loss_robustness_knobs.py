"""Losses at their edges: degenerate batches (empty, a mask value outside 0/1, a log-probability above 0)
and extreme knobs (every knob each loss is passed checked, used or not, by the loss and by the trainer's
config), any integral group size, no gradient into the advantages."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import estimators
from estimators.losses import LOGPROB_LOSSES, TOKEN_LOSSES, is_bounded, loss_names, policy_loss

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
