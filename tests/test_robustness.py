"""Bad input, extreme values and narrow dtypes across the toolkit's entry points.

Estimators: every bounded scheme is finite and equals the exact answer (mpmath, 50 digits)
to the rounding of the input's dtype, for any finite log-ratio, in float64 / float32 /
bfloat16 / float16, numpy and torch alike. Bounds, simulators: values outside a domain are
refused with a ValueError naming them.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimators
from estimators import diagnostics, policy_loss, weights

BOUNDED = ("stale", "tic_mask", "tic_trunc", "gmc", "snis", "tic_ppo")
"""Bounded schemes; tic_ppo is bounded where the advantage is >= 0 (the sweep uses A = +1)."""

DTYPES = {  # name -> (numpy dtype or None, torch dtype)
    "float64": (np.float64, torch.float64),
    "float32": (np.float32, torch.float32),
    "bfloat16": (None, torch.bfloat16),
    "float16": (np.float16, torch.float16),
}


def _finfo(name):
    return torch.finfo(DTYPES[name][1])


def exact_weights(scheme: str, lr: np.ndarray, eps: float) -> np.ndarray:
    """THEORY §2's c for one float64 group array, in 50-digit arithmetic, rounded to float64."""
    mpmath.mp.dps = 50
    out = np.empty(lr.shape)
    cap = mpmath.log1p(mpmath.mpf(eps))
    for g, row in enumerate(lr):
        ls = [mpmath.mpf(float(v)) for v in row]
        G = len(ls)
        lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in ls))
        for i, v in enumerate(ls):
            if scheme == "stale":
                c = mpmath.mpf(1)
            elif scheme in ("tic_mask", "tic_ppo"):  # A >= 0 here: tic_ppo == tic_mask
                c = mpmath.exp(v) if v <= cap else mpmath.mpf(0)
            elif scheme == "tic_trunc":
                c = mpmath.exp(min(v, cap))
            elif scheme == "gmc":
                c = mpmath.exp(v + min(mpmath.mpf(0), cap + mpmath.log(G) - lse))
            elif scheme == "snis":
                c = mpmath.exp(v - lse + mpmath.log(G))
            else:  # pragma: no cover
                raise AssertionError(scheme)
            out[g, i] = float(c)
    return out


def assert_rounded_close(got, ref: np.ndarray, dtype_name: str, lr: np.ndarray):
    """|got - ref| <= u_dtype |ref| + the dtype's smallest subnormal, plus float64's own rounding in
    log space, 8 u_64 (1 + |log ref| + max_j |l_j|) relative: GMC's direct path forms
    log(G(1+eps)) - log sum_j w_j, whose absolute error grows with the group's largest log-ratio
    (at most 700 on that path, so at most ~1.6e-13 relative; it only shows in float64 itself)."""
    fi = _finfo(dtype_name)
    g = got.detach().to(torch.float64).numpy() if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    assert np.isfinite(g).all(), (dtype_name, lr, g)
    with np.errstate(divide="ignore"):
        log_ref = np.where(ref > 0, np.abs(np.log(np.where(ref > 0, ref, 1.0))), 0.0)
    row_max = np.abs(lr).max(axis=-1, keepdims=True)
    tol = (fi.eps + 8 * np.finfo(np.float64).eps * (1 + log_ref + row_max)) * np.abs(ref) + fi.smallest_normal * fi.eps
    err = np.abs(g - ref)
    assert (err <= tol).all(), (f"{dtype_name}: max excess {np.max(err - tol)} at {np.argmax(err - tol)}; lr={lr}, "
                                f"got={g}, ref={ref}")


def _as(lr64: np.ndarray, dtype_name: str, backend: str):
    np_dt, t_dt = DTYPES[dtype_name]
    if backend == "numpy":
        return lr64.astype(np_dt)
    return torch.from_numpy(lr64).to(t_dt)


def _rounded_input(x) -> np.ndarray:
    """The log-ratios the function actually received, in float64 (the input dtype's rounding)."""
    return x.to(torch.float64).numpy() if isinstance(x, torch.Tensor) else x.astype(np.float64)


CASES = [(d, b) for d in DTYPES for b in ("numpy", "torch") if not (d == "bfloat16" and b == "numpy")]


@pytest.mark.parametrize("dtype_name,backend", CASES)
@pytest.mark.parametrize("scheme", BOUNDED)
def test_bounded_schemes_large_log_ratio_exact_in_every_dtype(scheme, dtype_name, backend):
    """Log-ratio 100 overflows exp in float32/bf16 (88.7) and float16 (11.1): the weights stay the
    exact answer rounded (GMC here was NaN in float32 and bf16 above 88.7)."""
    lr64 = np.array([[100.0, 0.0, 0.0, 0.0], [-100.0, 5.0, 20.0, 0.0], [1e4, -1e4, 0.5, 0.0]])
    x = _as(lr64, dtype_name, backend)
    adv = np.ones(lr64.shape)
    got = weights(scheme, x, 0.2, adv if scheme == "tic_ppo" else None)
    assert type(got) is type(x) and got.dtype == x.dtype
    assert_rounded_close(got, exact_weights(scheme, _rounded_input(x), 0.2), dtype_name, lr64)


def test_gmc_float32_at_100_is_the_capped_value():
    """The reported case: [[100, 0, 0, 0]] in float32 gives [[G(1+eps), ~0, ~0, ~0]], not NaN."""
    for x in (torch.tensor([[100.0, 0, 0, 0]]), np.array([[100.0, 0, 0, 0]], dtype=np.float32),
              torch.tensor([[100.0, 0, 0, 0]], dtype=torch.bfloat16)):
        c = weights("gmc", x, 0.2)
        c = c.to(torch.float64).numpy() if isinstance(c, torch.Tensor) else c.astype(np.float64)
        assert c[0, 0] == pytest.approx(4.8, rel=1e-2)
        assert (c[0, 1:] < 1e-40).all()


@pytest.mark.parametrize("dtype_name,backend", CASES)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=st.sampled_from(BOUNDED), G=st.integers(1, 12), prompts_per_step=st.integers(1, 3),
       eps=st.sampled_from([0.01, 0.2, 1.0]), data=st.data())
def test_hypothesis_bounded_schemes_match_exact_reference(dtype_name, backend, scheme, G, prompts_per_step, eps, data):
    """Any dtype, group size, eps and log-ratios in [-1e4, 1e4] (derandomized: the same examples
    every run): bounded schemes are finite and equal the exact answer to the dtype's rounding."""
    scale = data.draw(st.sampled_from([1.0, 30.0, 100.0, 1e3, 1e4]))
    vals = data.draw(st.lists(st.floats(-scale, scale, allow_nan=False), min_size=G * prompts_per_step,
                              max_size=G * prompts_per_step))
    lr64 = np.array(vals, dtype=np.float64).reshape(prompts_per_step, G)
    x = _as(lr64, dtype_name, backend)
    got = weights(scheme, x, eps, np.ones(lr64.shape) if scheme == "tic_ppo" else None)
    assert got.dtype == x.dtype
    assert_rounded_close(got, exact_weights(scheme, _rounded_input(x), eps), dtype_name, lr64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("scheme", ["gmc", "tic_mask", "tic_trunc", "snis", "stale", "tic_ppo"])
def test_policy_loss_finite_loss_and_gradient_for_large_trajectory_ratios(scheme, dtype):
    """A trajectory log-ratio of 200 (per-token 50 x 4 tokens) in a float32/bf16/fp16 model: the
    loss and gradient are finite and equal those of the float64 model (the loss was NaN for GMC)."""
    def run(dt):
        logp = torch.tensor([[50.0] * 4, [0.0] * 4, [-1.0] * 4, [0.5] * 4], dtype=dt, requires_grad=True)
        out = policy_loss(scheme, logp, torch.zeros(4, 4, dtype=dt), torch.ones(4, 4),
                          torch.tensor([1.0, -1.0, 0.5, 0.2]), 4, 0.2)
        out.loss.backward()
        return out.loss.detach().double(), logp.grad.double()

    loss, grad = run(dtype)
    loss64, grad64 = run(torch.float64)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    tol = torch.finfo(dtype).eps * 8
    assert abs(float(loss - loss64)) <= tol * max(1.0, abs(float(loss64)))
    assert torch.allclose(grad, grad64, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_diagnostics_finite_ess_for_extreme_float16_ratios(dtype):
    """ESS (sum w)^2 / sum w^2 of [6e4, -6e4, 0, 0] is 1/G, not NaN (it was NaN for numpy float16)."""
    d = diagnostics(np.array([[6e4, -6e4, 0.0, 0.0]], dtype=dtype), 0.2)
    assert d["ess_frac_mean"] == pytest.approx(0.25, rel=1e-12)
    assert d["ess_frac_min"] == pytest.approx(0.25, rel=1e-12)
    assert d["gmc_lambda_mean"] == 0.0 and d["frac_groups_capped"] == 1.0
    assert d["log_ratio_max"] == pytest.approx(6e4, rel=1e-3)
    t = diagnostics(torch.tensor([[6e4, -6e4, 0.0, 0.0]], dtype=torch.float16), 0.2)
    assert t["ess_frac_mean"] == pytest.approx(0.25, rel=1e-12)


def test_gmc_lambda_narrow_dtypes_match_float64():
    lr = np.array([[100.0, 0.0, 0.0, 0.0], [0.1, 0.0, -0.1, 0.0]])
    ref = estimators.gmc_lambda(lr, 0.2)
    for x in (lr.astype(np.float32), torch.tensor(lr, dtype=torch.float32), torch.tensor(lr, dtype=torch.bfloat16)):
        lam = estimators.gmc_lambda(x, 0.2)
        lam = lam.double().numpy() if isinstance(lam, torch.Tensor) else lam.astype(np.float64)
        assert np.isfinite(lam).all()
        assert np.allclose(lam, ref, rtol=1e-2, atol=1e-30)


# --------------------------------------------------------------------------- estimators: bad input


@pytest.mark.parametrize("eps", [math.inf, -math.inf, math.nan])
def test_weights_refuse_non_finite_eps(eps):
    with pytest.raises(ValueError, match=r"eps"):
        weights("gmc", np.zeros((1, 2)), eps)


@pytest.mark.parametrize("x", [np.array([[1 + 2j, 0.0]]), torch.tensor([[1 + 2j, 0.0]]), [[1j, 0.0]]],
                         ids=["numpy", "torch", "list"])
def test_weights_refuse_complex_log_ratios(x):
    with pytest.raises(ValueError, match=r"log_ratio must be real"):
        weights("gmc", x, 0.2)


# --------------------------------------------------------------------------- bounds: domains of the twins


@pytest.mark.parametrize("kwargs,match", [
    ({"sigma2": 1.0, "G": 1.5, "eps": 0.2}, r"G must be an integer >= 1, got G = 1.5"),
    ({"sigma2": 1.0, "G": "4", "eps": 0.2}, r"G must be a real number"),
    ({"sigma2": 1.0, "G": True, "eps": 0.2}, r"G must be a real number"),
    ({"sigma2": 1.0, "G": 4, "eps": math.inf}, r"eps must be finite, got eps = inf"),
    ({"sigma2": math.nan, "G": 4, "eps": 0.2}, r"sigma2 must be finite"),
    ({"sigma2": [1.0, 2.0], "G": [2, 2.5], "eps": 0.2}, r"G must be an integer >= 1, got G = 2.5"),
])
def test_twin_m_gmc_quadratic_refuses_values_outside_domain(kwargs, match):
    from bounds.numeric import twin

    with pytest.raises(ValueError, match=match):
        twin("m_gmc_quadratic")(**kwargs)


@pytest.mark.parametrize("d,match", [(0.5, r"d must be an integer >= 0, got d = 0.5"), (math.inf, r"d must be finite"),
                                     (-1, r"d must be an integer >= 0")])
def test_twin_delay_term_refuses_bad_delay(d, match):
    from bounds.numeric import twin

    with pytest.raises(ValueError, match=match):
        twin("D_gmc")(eta=0.1, d=d, G=4, eps=0.2, C2=1.0, M=1.0)
    assert np.isfinite(twin("D_gmc")(eta=0.1, d=2, G=4, eps=0.2, C2=1.0, M=1.0))


@pytest.mark.parametrize("name,kwargs,bad", [
    ("beta1_term_mask", {"w": math.nan, "eps": 0.2}, "w"),
    ("beta1_term_mask", {"w": -1.0, "eps": 0.2}, "w"),
    ("beta1_term_trunc", {"w": math.inf, "eps": 0.2}, "w"),
    ("gmc_excess", {"wbar": -0.5, "eps": 0.2}, "wbar"),
    ("beta_inf_trunc", {"wbar": 1.0, "wmax": math.nan, "eps": 0.2}, "wmax"),
    ("beta_inf_mask", {"wbar": math.nan, "wmax": 2.0, "eps": 0.2}, "wbar"),
])
def test_twins_over_ratios_refuse_nan_and_negative(name, kwargs, bad):
    """twin("beta1_term_mask")(w=nan, eps=.2) returned 0 (and w=-1 too)."""
    from bounds.numeric import twin

    with pytest.raises(ValueError, match=rf"^{bad} must be"):
        twin(name)(**kwargs)


def test_twins_over_ratios_still_accept_their_domain():
    from bounds.numeric import twin

    assert float(twin("beta1_term_mask")(w=2.0, eps=0.2)) == pytest.approx(2.0)  # masked: w 1{w > 1+eps}
    assert float(twin("beta1_term_mask")(w=1.0, eps=0.2)) == 0.0


def test_bound_symbolic_call_refuses_fractional_group_size():
    from bounds import bias

    with pytest.raises(ValueError, match=r"G must be an integer >= 1"):
        bias.m_gmc_quadratic(1, 1.5, 0.2)


# --------------------------------------------------------------------------- simulators: ranges


def test_gaussian_policy_closed_forms_refuse_overflowing_delta():
    """GaussianPolicy(100, 0).closed_forms(.2) returned mu4 = NaN (inf - inf) with RuntimeWarnings."""
    from simulators.lognormal.env import GaussianPolicy

    with pytest.raises(ValueError, match=r"Delta = 100.0 is too large .* Delta < 10.8"):
        GaussianPolicy(100, 0).closed_forms(0.2)
    ok = GaussianPolicy(10, 0).closed_forms(0.2)
    assert all(math.isfinite(v) for v in ok.values())
    assert ok["sigma2"] == pytest.approx(math.expm1(100.0))


def test_rare_jump_without_p_or_sigma2_is_a_clear_error():
    from simulators.extremal.laws import rare_jump

    with pytest.raises(ValueError, match=r"rare_jump: give p .* or sigma2"):
        rare_jump(4, 0.2, p=None)
    with pytest.raises(ValueError, match=r"p must lie in \(0, 1\)"):
        rare_jump(4, 0.2, p=1.5)
    law = rare_jump(4, 0.2, p=None, sigma2=0.5)
    assert law.sigma2 == pytest.approx(0.5)
