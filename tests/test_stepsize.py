"""Step-size control (llm_runs.stepsize): VCPO's ESS ratio and learning-rate rules against their
code's formulas, GMC's step form against the group factors, the learning rate scaled only for
the step, OPOB against a hand computation, the controls' edge cases (non-finite ratios, every setting
checked where a control is built) and the hooks of other loops (TRL, verl, any optimiser step). The
controls in the trainer's update: tests/test_stepsize_update.py; in the run's config:
tests/test_stepsize_config.py."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from llm_runs import stepsize


def _vcpo_ess_ratio(values) -> float:
    """mit-han-lab/vcpo recipe/fully_async_policy/staleness_utils.py compute_ess_info, unclipped branch:
    Python floats, (sum w)^2 / (sum w^2 + 1e-8) / N."""
    s1 = s2 = 0.0
    for v in values:
        s1 += float(v)
        s2 += float(v) ** 2
    return s1 ** 2 / (s2 + 1e-8) / len(values)


def test_ess_ratio_is_vcpo_s():
    rng = np.random.default_rng(0)
    w = np.exp(rng.normal(0, 1.5, size=128))
    assert stepsize.ess_ratio(torch.tensor(w)) == pytest.approx(_vcpo_ess_ratio(w), rel=1e-12)
    assert stepsize.ess_ratio(torch.ones(64)) == pytest.approx(1.0, abs=1e-9)
    one_heavy = torch.tensor([1e6] + [1e-6] * 15, dtype=torch.float64)
    assert stepsize.ess_ratio(one_heavy) == pytest.approx(1 / 16, rel=1e-6)
    huge = torch.tensor([1e200, 1e200, 1.0, 1.0], dtype=torch.float64)  # w^2 overflows float64: log space
    assert stepsize.ess_ratio(huge) == pytest.approx(0.5, rel=1e-9)


def test_ess_scale_rules():
    assert stepsize.ess_scale("sqrt", 0.25) == pytest.approx(0.5)
    assert stepsize.ess_scale("linear", 0.25) == pytest.approx(0.25)
    assert stepsize.ess_scale("sqrt", 0.25, base=0.5) == pytest.approx(math.sqrt(0.5))
    assert stepsize.ess_scale("sqrt", 0.9, base=0.5) == 1.0  # never above the base step
    assert stepsize.ess_scale("none", 0.01) == 1.0
    with pytest.raises(ValueError, match="unknown ess_scaling 'cubic'"):
        stepsize.ess_scale("cubic", 0.5)


def test_gmc_step_scale_is_the_mean_group_factor():
    rng = np.random.default_rng(1)
    lr = rng.normal(0, 1.0, size=(6, 8))
    eps = 0.2
    lam = np.minimum(1.0, (1 + eps) / np.exp(lr).mean(axis=1))
    assert stepsize.gmc_step_scale(torch.tensor(lr), eps) == pytest.approx(lam.mean(), rel=1e-12)
    assert stepsize.gmc_step_scale(torch.zeros(4, 8), eps) == 1.0


def test_scaled_lr_scales_only_the_step_and_restores():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.full((3,), 2.0)
    with stepsize.scaled_lr(opt, 0.25):
        assert opt.param_groups[0]["lr"] == pytest.approx(0.025)
        opt.step()
    assert opt.param_groups[0]["lr"] == 0.1
    assert torch.allclose(p.detach(), torch.full((3,), 1 - 0.025 * 2))
    with pytest.raises(ValueError, match="finite float >= 0"), stepsize.scaled_lr(opt, float("nan")):
        pass
    with pytest.raises(RuntimeError), stepsize.scaled_lr(opt, 0.5):  # restored even when the step raises
        raise RuntimeError
    assert opt.param_groups[0]["lr"] == 0.1


def test_opob_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    lr = torch.tensor([[0.0, math.log(2.0), 0.0, math.log(0.5)], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    g2 = torch.tensor([[1.0, 1.0, 4.0, 2.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    W = np.array([1.0, 4.0, 4.0, 0.5])
    b = (W * np.array([1, 0, 0, 1])).sum() / (W.sum() + 1e-8)
    std = np.std([1, 0, 0, 1], ddof=1)
    got = stepsize.opob_advantages(r, lr, g2, norm_by_std=True).numpy()
    np.testing.assert_allclose(got[0], (np.array([1, 0, 0, 1]) - b) / std, rtol=1e-12)
    np.testing.assert_array_equal(got[1], np.zeros(4))  # equal rewards: no signal, no division by 0
    raw = stepsize.opob_advantages(r, lr, g2, norm_by_std=False).numpy()
    np.testing.assert_allclose(raw[0], np.array([1, 0, 0, 1]) - b, rtol=1e-12)
    with pytest.raises(ValueError, match="share one"):
        stepsize.opob_advantages(r, lr[:, :3], g2)


# --- edge cases of the step controls: never a full step from a non-finite ratio, every setting checked
# where a control is built, a setting accepted only where it is applied ---------------------------------

@pytest.mark.parametrize("bad", [math.inf, math.nan, 1e308])
def test_a_non_finite_weight_never_gives_a_full_step(bad):
    for n in (2, 8, 64):
        w = torch.ones(n, dtype=torch.float64)
        w[n // 2] = bad
        rho = stepsize.ess_ratio(w)
        assert math.isfinite(rho) and rho == pytest.approx(1 / n, rel=1e-6)
        for rule in ("sqrt", "linear"):
            assert stepsize.ess_scale(rule, rho) < 1.0
    for big in (800.0, math.inf):  # a log-ratio whose exp overflows float64
        lw = torch.zeros(1, 8, dtype=torch.float64)
        lw[0, 3] = big
        cols = stepsize.step_scale(stepsize.StepControl(ess_scaling="linear"), lw, None)
        assert cols["step/ess_ratio"] == pytest.approx(1 / 8) and cols["step/lr_scale"] == pytest.approx(1 / 8)
    with pytest.raises(ValueError, match="finite"):
        stepsize.ess_scale("sqrt", math.nan)


def test_opob_is_finite_at_large_log_ratios_and_zero_on_flat_groups():
    r = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.3, 0.3, 0.3, 0.3], [0.0, 0.0, 1.0, 0.0]])
    g2 = torch.tensor([[2.0, 1.0, 3.0, 1.0]] * 4)
    for big in (400.0, 800.0, 1e4, math.inf):
        lr = torch.zeros(4, 4, dtype=torch.float64)
        lr[:, 0] = big
        for norm in (True, False):
            adv = stepsize.opob_advantages(r, lr, g2, norm_by_std=norm)
            assert torch.isfinite(adv).all()
            assert (adv[1:3] == 0).all()  # equal rewards: exactly 0
            # the heaviest trajectory dominates the baseline: b* -> its reward
            want = r - r[:, :1]
            if norm:
                std = r.std(-1, correction=1, keepdim=True)
                want = torch.where(std > 1e-8, want / torch.where(std > 1e-8, std, 1.0), want)
            np.testing.assert_allclose(adv[[0, 3]].numpy(), want[[0, 3]].double().numpy(), atol=1e-6)
    small = stepsize.opob_advantages(r, torch.zeros(4, 4), g2)  # finite W: VCPO's formula, flat groups 0
    assert (small[1:3] == 0).all() and (small[0] != 0).all()
    legacy = stepsize.opob_advantages(r, torch.zeros(4, 4), g2, flat_zero=False)
    assert (legacy[1] != 0).all() and torch.equal(legacy[[0, 3]], small[[0, 3]])
    with pytest.raises(ValueError, match="NaN"):
        stepsize.opob_advantages(r, torch.full((4, 4), math.nan), g2)


@pytest.mark.parametrize("kw, match", [
    ({"gmc_step": True, "eps": math.inf}, "eps"),
    ({"gmc_step": True, "eps": 0.0}, "eps"),
    ({"estimator": "gmc2", "gmc_step": True}, "unknown estimator 'gmc2'"),
    ({"ess_scaling": "SQRT"}, "unknown ess_scaling"),
    ({"ess_scaling": "sqrt", "ess_base_ratio": math.nan}, "ess_base_ratio"),
    ({"gmc_step": 1}, "gmc_step must be true or false"),
    ({"skip_zero_grad": "yes"}, "skip_zero_grad must be true or false"),
])
def test_every_step_control_setting_is_checked_when_built(kw, match):
    """(The trainer-only OPOB and aggregation settings are checked with the run's config:
    tests/test_stepsize_config.py.)"""
    with pytest.raises(ValueError, match=match):
        stepsize.StepControl(**kw)


def test_a_hook_refuses_settings_it_cannot_apply_or_does_not_know():
    for kw, match in [({"ess_scaling": "sqrt", "skip_zero_grad": True}, "skip_zero_grad = True cannot be applied"),
                      ({"ess_scaling": "sqrt", "drift_diagnostics": True}, "drift_diagnostics"),
                      ({"ess_scaling": "sqrt", "opob_norm_by_std": False}, "opob_norm_by_std"),
                      ({"ess_scaling": "sqrt", "lr_scale": 2}, "unknown setting 'lr_scale'"),
                      ({"ess_scaling": "sqrt", "estimator": "is"}, "contradicts the trainer's estimator"),
                      ({}, "no control on")]:
        with pytest.raises(ValueError, match=match):
            stepsize.hook_control("StepSizeCallback", kw, estimator="gmc", eps=0.2)
    same = stepsize.hook_control("StepSizeCallback", {"ess_scaling": "sqrt", "estimator": "gmc"}, estimator="gmc",
                                 eps=0.2)
    assert same.estimator == "gmc" and same.ess_scaling == "sqrt"


def test_the_trl_callback_takes_the_trainer_s_estimator_without_a_type_error():
    from types import SimpleNamespace

    from llm_runs.integrations.stepsize_hooks import StepSizeCallback

    trainer = SimpleNamespace(args=SimpleNamespace(gradient_accumulation_steps=1), estimator="gmc", eps=0.2,
                              step_ratios=[], record_step_ratios=False)
    cb = StepSizeCallback(trainer, estimator="gmc", eps=0.2, gmc_step=True)
    assert cb.control.gmc_step
    for kw, match in [({"estimator": "is", "gmc_step": True}, "trainer's estimator is 'gmc'"),
                      ({"gmc_step": True, "no_such_setting": 1}, "unknown setting 'no_such_setting'"),
                      ({"gmc_step": True, "skip_zero_grad": True}, "cannot be applied")]:
        with pytest.raises(ValueError, match=match):
            StepSizeCallback(trainer, **kw)


def test_the_step_of_any_loop_honours_the_zero_gradient_skip():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5))
    opt = torch.optim.AdamW([p], lr=0.1, weight_decay=0.1)
    p.grad = torch.randn(5)
    ctl = stepsize.StepControl(skip_zero_grad=True)
    assert stepsize.optimizer_step(ctl, opt)
    before, state = p.detach().clone(), copy.deepcopy(opt.state_dict())
    p.grad = torch.zeros(5)
    assert not stepsize.optimizer_step(ctl, opt)
    assert torch.equal(p.detach(), before) and str(opt.state_dict()) == str(state)
    p.grad = torch.zeros(5)
    assert stepsize.optimizer_step(stepsize.StepControl(), opt)  # no skip: weight decay and momentum move it
    assert not torch.equal(p.detach(), before)


def test_installing_the_verl_hook_twice_is_one_install():
    from llm_runs.integrations.verl import stepsize as hook

    class Engine:
        def __init__(self):
            self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
            self.calls = 0

        def optimizer_step(self):
            self.calls += 1
            return 1.0

    e = Engine()
    a = hook.install_step_control(e, ess_scaling="sqrt")
    try:
        assert hook.install_step_control(e, ess_scaling="sqrt") is a
        hook.record(torch.zeros(2, 4), None)
        assert e.optimizer_step() == 1.0 and e.calls == 1 and e.step_control_last["step/lr_scale"] <= 1
        with pytest.raises(ValueError, match="already has a step control"):
            hook.install_step_control(e, ess_scaling="linear")
        with pytest.raises(ValueError, match="skip_zero_grad"):
            hook.install_step_control(Engine(), ess_scaling="sqrt", skip_zero_grad=True)
    finally:
        hook._HOOKS[0] -= 1
        hook.take()


def _lr(*shape):
    return torch.zeros(*shape, dtype=torch.float64)


@pytest.mark.parametrize("call, match", [
    (lambda: stepsize.ess_ratio(torch.tensor([1.0, -2.0, 1.0])), r"got -2.0 at index \(1,\)"),
    (lambda: stepsize.ess_scale("sqrt", 0.5, -1.0), "ess_base_ratio must be in"),
    (lambda: stepsize.ess_scale("sqrt", 0.5, math.nan), "ess_base_ratio must be in"),
    (lambda: stepsize.ess_scale("linear", "a"), "ESS ratio must be a finite number"),
    (lambda: stepsize.step_scale(stepsize.StepControl(ess_scaling="sqrt"), _lr(4), None), r"shape \(prompts_per_step"),
    (lambda: stepsize.step_scale(stepsize.StepControl(ess_scaling="sqrt"), _lr(2, 2, 2), None), r"got \(2, 2, 2\)"),
    (lambda: stepsize.step_scale(stepsize.StepControl(ess_scaling="sqrt"), _lr(0, 4), None), "no sequence"),
    (lambda: stepsize.step_scale(stepsize.StepControl(ess_scaling="sqrt", ess_use_clipped=True), _lr(2, 2),
                                 torch.ones(3)), r"weights must have seq_log_ratio's shape \(2, 2\), got \(3,\)"),
    (lambda: stepsize.step_scale(stepsize.StepControl(ess_scaling="sqrt", ess_use_clipped=True), _lr(2, 2),
                                 -torch.ones(2, 2)), r"got -1.0 at index \(0, 0\)"),
])
def test_the_step_controls_refuse_what_no_batch_gives(call, match):
    """The step controls' entry points refuse, naming it, what no batch of ratios gives (each was a silent
    number: a negative weight's ESS, a NaN or negative base's full step, a scale from a 1-D or 3-D tensor, a
    zero step from an empty batch, weights of another shape)."""
    with pytest.raises(ValueError, match=match):
        call()
