"""Estimators core: the class C_eps, Theorem 1, numerics, bad input (the surrogate losses' gradients:
tests/test_estimators_losses.py)."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

import estimators
from estimators import SCHEMES, advantages, diagnostics, weights

IN_CLASS = [n for n, s in SCHEMES.items() if s.in_class]
ALL = list(SCHEMES)


def _lr(seed, n, G, scale):
    return np.random.default_rng(seed).normal(0.0, scale, size=(n, G))


def _adv(seed, n, G):
    return np.random.default_rng(seed + 1).normal(size=(n, G))


seeds = st.integers(0, 2**32 - 1)
group_sizes = st.integers(1, 12)
scales = st.sampled_from([0.01, 0.3, 1.0, 3.0, 30.0])
epss = st.sampled_from([1e-3, 0.05, 0.2, 1.0, 5.0])


def test_gmc_weights_worked_example():
    assert np.allclose(weights("gmc", np.log([[3.0, 1.0, 1.0, 1.0]]), 0.2), [[2.4, 0.8, 0.8, 0.8]], atol=1e-12)


SHIPPED_IN_CLASS = {"is": False, "stale": True, "tic_mask": True, "tic_trunc": True, "tic_ppo": False, "gmc": True,
                    "snis": True, "topr": True, "seq_tis": False, "seq_tis_bn": False, "seq_mis": False,
                    "seq_geo_mask": True, "vespo": False, "gmc_cap": True, "gmc_topr": True, "topr_gmc": True}
"""The toolkit's own schemes and whether each is a member of C_eps at its default knobs (THEORY §2; the peers'
rules in :mod:`estimators.peers`): a correction added later is checked by the properties below instead."""


def test_schemes_registered():
    assert set(ALL) >= set(SHIPPED_IN_CLASS)
    assert {n: SCHEMES[n].in_class for n in SHIPPED_IN_CLASS} == SHIPPED_IN_CLASS
    assert {n for n in SHIPPED_IN_CLASS if SCHEMES[n].surrogate == "clamp"} == {"tic_mask"}


@pytest.mark.parametrize("name", ALL)
def test_every_registered_scheme_keeps_its_declaration(name):
    """Properties of every registered scheme (a new one included): its record, its knobs' defaults, the
    declared supremum of a group's mass never exceeded, needs_advantages and batch_coupled as declared."""
    from estimators.params import params_of, resolve
    from estimators.records import records
    from estimators.schemes import FAMILIES, SURROGATES

    s = SCHEMES[name]
    assert records()[name].name == s.name == name and s.family in FAMILIES and s.surrogate in SURROGATES
    knobs = resolve(name, None)  # every default passes its own range check (and the check across knobs)
    assert knobs == {p.name: p.default for p in params_of(name)}
    assert all(p.symbol and p.doc for p in params_of(name))
    rng = np.random.default_rng(11)
    B, G, eps = 6, 5, 0.2
    lr = rng.normal(0.0, 2.0, size=(B, G))
    lr[0] = 6.0 + rng.normal(0.0, 0.1, size=G)  # a group far above the cap
    lr[1] = -6.0 + rng.normal(0.0, 0.1, size=G)  # and one far below
    adv = _adv(11, B, G)
    c = weights(name, lr, eps, adv)
    assert np.all(c >= 0)
    sup = s.group_mass_sup(eps, B)
    assert np.all(c.mean(1) <= sup * (1 + 1e-12)), (c.mean(1), sup)
    if s.needs_advantages:
        with pytest.raises(ValueError, match="advantages"):
            weights(name, lr, eps)
    else:
        np.testing.assert_array_equal(weights(name, lr, eps), weights(name, lr, eps, adv))
    if not s.batch_coupled:  # a group's weights are its own: the same alone as in the batch
        for g in range(B):
            np.testing.assert_allclose(weights(name, lr[g:g + 1], eps, adv[g:g + 1])[0], c[g], rtol=1e-12, atol=0)


# ----------------------------------------------------------------- the class C_eps (Lemma 2)


@settings(max_examples=60)
@given(seed=seeds, G=group_sizes, scale=scales, eps=epss)
def test_class_members_mass_and_norm_bound(seed, G, scale, eps):
    lr = _lr(seed, 16, G, scale)
    adv = _adv(seed, 16, G)
    X = np.random.default_rng(seed + 2).normal(size=(16, G, 3))  # X_i = A_i s_i, any vectors
    for name in IN_CLASS:
        c = weights(name, lr, eps, adv)
        assert np.all(c >= 0)
        assert np.all(c.mean(1) <= (1 + eps) * (1 + 1e-12)), name
        g = (c[..., None] * X).mean(1)
        bound = (1 + eps) * np.linalg.norm(X, axis=-1).max(1)
        assert np.all(np.linalg.norm(g, axis=-1) <= bound * (1 + 1e-12)), name


@pytest.mark.parametrize("name", ["is", "tic_ppo"])
def test_is_and_tic_ppo_leave_the_class(name):
    G, eps = 4, 0.2
    w = np.array([[G * (1 + eps) + 1, 1.0, 1.0, 1.0]])  # THEORY §5 claim 2 counterexample
    adv = np.array([[-1.0, 1.0, 1.0, 1.0]])  # negative advantage keeps tic_ppo's big weight
    c = weights(name, np.log(w), eps, adv)
    assert c.mean() > 1 + eps
    X = np.ones((1, G, 1))
    assert np.linalg.norm((c[..., None] * X).mean(1)) > (1 + eps) * 1.0


# ----------------------------------------------------------------- GMC and Theorem 1


@settings(max_examples=60)
@given(seed=seeds, G=group_sizes, scale=scales, eps=epss)
def test_gmc_mass_and_direction(seed, G, scale, eps):
    lr = _lr(seed, 32, G, scale)
    w = np.exp(lr)
    c = weights("gmc", lr, eps)
    np.testing.assert_allclose(c.mean(1), np.minimum(w.mean(1), 1 + eps), rtol=1e-12)
    assert np.all(c <= w * (1 + 1e-12))
    lam = c / w  # hat g_GMC = lambda hat g_IS: one lambda per group
    np.testing.assert_allclose(lam, np.broadcast_to(lam[:, :1], lam.shape), rtol=1e-12)
    np.testing.assert_allclose(lam[:, :1], estimators.gmc_lambda(lr, eps), rtol=1e-12)


def _beta_inf(c, w):
    return w.mean() * np.max(np.abs(1 - c / w))


def _beta_1(c, w):
    return np.mean(w * np.abs(1 - c / w))


@settings(max_examples=25)
@given(seed=seeds, G=st.integers(2, 6), scale=st.sampled_from([0.3, 1.0, 2.0]), eps=st.sampled_from([0.05, 0.2, 0.5]))
def test_theorem1_gmc_is_the_unique_beta_inf_minimiser(seed, G, scale, eps):
    w = np.exp(_lr(seed, 1, G, scale)[0])
    W = w.mean()
    # variables (c_1..c_G, delta): minimise delta s.t. (1-delta) w <= c <= (1+delta) w, sum c <= G(1+eps)
    n = G + 1
    A_ub, b_ub = [], []
    for i in range(G):
        row = np.zeros(n); row[i] = -1; row[-1] = -w[i]; A_ub.append(row); b_ub.append(-w[i])
        row = np.zeros(n); row[i] = 1; row[-1] = -w[i]; A_ub.append(row); b_ub.append(w[i])
    row = np.zeros(n); row[:G] = 1; A_ub.append(row); b_ub.append(G * (1 + eps))
    obj = np.zeros(n); obj[-1] = 1
    res = linprog(obj, A_ub=np.array(A_ub), b_ub=b_ub, bounds=[(0, None)] * n, method="highs")
    assert res.status == 0
    expected = max(W - 1 - eps, 0.0)
    assert abs(W * res.fun - expected) <= 1e-7 * max(1, W)
    gmc = weights("gmc", np.log(w)[None], eps)[0]
    assert abs(_beta_inf(gmc, w) - expected) <= 1e-9 * max(1, W)
    assert abs(_beta_1(gmc, w) - expected) <= 1e-9 * max(1, W)
    # uniqueness: at the optimal delta, every c_i is pinned to GMC's value
    delta = res.x[-1] + 1e-10
    A2, b2 = np.array(A_ub)[:, :G], np.array(b_ub, dtype=float).copy()
    b2[: 2 * G : 2] += delta * w
    b2[1 : 2 * G : 2] += delta * w
    for i in range(G):
        for sign in (1, -1):
            o = np.zeros(G); o[i] = sign
            r = linprog(o, A_ub=A2, b_ub=b2, bounds=[(0, None)] * G, method="highs")
            assert r.status == 0
            assert abs(r.x[i] - gmc[i]) <= 1e-6 * max(1, w[i])


@settings(max_examples=60)
@given(seed=seeds, G=group_sizes, scale=scales, eps=epss)
def test_beta1_ordering_gmc_trunc_mask(seed, G, scale, eps):
    lr = _lr(seed, 32, G, scale)
    w = np.exp(lr)
    b = {n: np.mean(np.abs(w - weights(n, lr, eps)), axis=1) for n in ("gmc", "tic_trunc", "tic_mask")}
    tol = 1e-12 * (1 + w.mean(1))
    assert np.all(b["gmc"] <= b["tic_trunc"] + tol)
    assert np.all(b["tic_trunc"] <= b["tic_mask"] + tol)


# ----------------------------------------------------------------- reductions and invariances


@settings(max_examples=40)
@given(seed=seeds, G=group_sizes, scale=scales, eps=epss)
def test_capping_is_idempotent(seed, G, scale, eps):
    lr = _lr(seed, 16, G, scale)
    for name in ("gmc", "tic_trunc", "snis"):
        c = weights(name, lr, eps)
        if np.all(c > 0):
            np.testing.assert_allclose(weights(name, np.log(c), eps), c, rtol=1e-10)
    c = weights("tic_mask", lr, eps)
    keep = c > 0
    np.testing.assert_allclose(c[keep], np.exp(lr)[keep], rtol=1e-12)


@settings(max_examples=40)
@given(seed=seeds, G=st.integers(2, 10), scale=scales, eps=epss)
def test_permutation_equivariance(seed, G, scale, eps):
    lr, adv = _lr(seed, 8, G, scale), _adv(seed, 8, G)
    perm = np.random.default_rng(seed).permutation(G)
    for name in ALL:
        a = weights(name, lr, eps, adv)[:, perm]
        b = weights(name, lr[:, perm], eps, adv[:, perm])
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("name", ["gmc", "tic_trunc", "tic_mask", "tic_ppo"])
def test_large_eps_disables_capping(name):
    lr = _lr(0, 64, 8, 1.0)
    np.testing.assert_allclose(weights(name, lr, 1e9, _adv(0, 64, 8)), np.exp(lr), rtol=1e-12)


def test_delay_zero_gives_unit_weights():
    lr = np.zeros((5, 4))
    for name in ALL:
        np.testing.assert_array_equal(weights(name, lr, 0.2, _adv(0, 5, 4)), np.ones((5, 4)))


@settings(max_examples=40)
@given(seed=seeds, G=group_sizes, scale=scales, eps=epss)
def test_numpy_and_torch_agree(seed, G, scale, eps):
    lr, adv = _lr(seed, 16, G, scale), _adv(seed, 16, G)
    for name in ALL:
        a = weights(name, lr, eps, adv)
        b = weights(name, torch.from_numpy(lr), eps, torch.from_numpy(adv))
        assert isinstance(b, torch.Tensor) and b.dtype == torch.float64
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-12, atol=1e-300)


def test_float32_torch_keeps_dtype():
    lr = torch.randn(4, 8, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
    assert weights("gmc", lr, 0.2).dtype == torch.float32
    assert weights("gmc", lr.bfloat16(), 0.2).dtype == torch.bfloat16


# ----------------------------------------------------------------- numerics and bad input


@pytest.mark.parametrize("name", ALL)
def test_extreme_log_ratios(name):
    lr = np.array([[1000.0, -1000.0, 0.0, 3.0], [-1000.0, -1000.0, -999.0, -1000.0], [1000.0, 999.0, 1000.0, 0.0]])
    adv = np.array([[-1.0, 1.0, 1.0, -1.0]] * 3)
    for x in (lr, torch.from_numpy(lr)):
        c = np.asarray(weights(name, x, 0.2, adv if SCHEMES[name].needs_advantages else None))
        assert not np.isnan(c).any()
        if SCHEMES[name].bounded:
            assert np.isfinite(c).all()
        else:
            assert np.isinf(c[0, 0])
    if name == "gmc":  # the largest trajectory takes the whole capped mass
        np.testing.assert_allclose(c[0], [4 * 1.2, 0, 0, 0], atol=1e-12)
        np.testing.assert_allclose(c[2].sum(), 4 * 1.2, rtol=1e-12)
    if name == "tic_trunc":
        np.testing.assert_allclose(c[0], [1.2, 0, 1, 1.2], atol=1e-12)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([[0.0, np.nan]]), r"NaN.*index \(0, 1\)|nan.*index \(0, 1\)"),
        (np.array([[0.0, 1.0], [np.inf, 0.0]]), r"inf.*index \(1, 0\)"),
        (np.array([[0.0, 1.0], [0.0, -np.inf]]), r"-inf.*index \(1, 1\)"),
        (np.zeros(4), "rank 2"),
        (np.zeros((2, 2, 2)), "rank 2"),
        (np.zeros((3, 0)), "G = 0"),
        (np.zeros((0, 4)), "no groups"),
    ],
)
def test_bad_log_ratio(bad, match):
    for name in ALL:
        with pytest.raises(ValueError, match=match):
            weights(name, bad, 0.2, np.zeros_like(bad) if bad.ndim == 2 else None)
    with pytest.raises(ValueError, match=match):
        weights("gmc", torch.from_numpy(bad), 0.2)


@pytest.mark.parametrize("eps", [0.0, -0.1, float("nan"), "0.2", None])
def test_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        weights("gmc", np.zeros((1, 4)), eps)


def test_missing_advantages_and_unknown_scheme_and_duplicates():
    with pytest.raises(ValueError, match="tic_ppo.*advantages"):
        weights("tic_ppo", np.zeros((1, 4)), 0.2)
    with pytest.raises(ValueError, match=r"advantages must have the shape"):
        weights("tic_ppo", np.zeros((1, 4)), 0.2, np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"advantages contains a non-finite"):
        weights("tic_ppo", np.zeros((1, 4)), 0.2, np.array([[0.0, np.nan, 0, 0]]))
    with pytest.raises(ValueError, match=r"unknown scheme 'gmcc'.*gmc.*is.*snis"):
        weights("gmcc", np.zeros((1, 4)), 0.2)
    with pytest.raises(ValueError, match="already registered"):
        estimators.register_scheme("gmc", family="theory", in_class=True,
                                   sup_mass=lambda eps, B: 1.0)(lambda lr, eps, adv, ops: lr)
    assert SCHEMES["gmc"].log_weights.__name__ == "gmc_log_weights"


# ----------------------------------------------------------------- advantages and diagnostics


def test_advantages_kinds():
    r = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    np.testing.assert_allclose(advantages(r, "loo"), r - (r.sum(1, keepdims=True) - r) / 3)
    np.testing.assert_allclose(advantages(r, "drgrpo"), r - r.mean(1, keepdims=True))
    g = advantages(r, "grpo")
    np.testing.assert_allclose(g[1], (r[1] - 0.25) / (np.std(r[1], ddof=1) + 1e-6))
    np.testing.assert_allclose(advantages(torch.tensor(r), "loo").numpy(), advantages(r, "loo"))
    with pytest.raises(ValueError, match="G >= 2"):
        advantages(np.ones((3, 1)), "loo")
    with pytest.raises(ValueError, match="unknown advantage kind 'ppo'"):
        advantages(r, "ppo")


def test_diagnostics_use_raw_ratios():
    lr = np.log(np.array([[3.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    d = diagnostics(lr, 0.2)
    assert d["mass_max"] == pytest.approx(1.5)
    assert d["mass_mean"] == pytest.approx(1.25)
    assert d["frac_groups_capped"] == 0.5
    assert d["frac_clipped"] == pytest.approx(1 / 8)
    assert d["ess_frac_min"] == pytest.approx(36 / 12 / 4)
    assert d["gmc_lambda_mean"] == pytest.approx((0.8 + 1.0) / 2)
    assert d["log_ratio_max"] == pytest.approx(math.log(3))
    assert diagnostics(torch.tensor(lr), 0.2) == pytest.approx(d)


def test_gmc_uncapped_groups_are_exact_and_batch_independent():
    rng = np.random.default_rng(5)
    lr = rng.normal(0.0, 0.3, size=(200, 8))
    lr[0, 0] = 650.0  # a huge ratio elsewhere in the batch must not change other groups
    c = weights("gmc", lr, 0.2)
    lam = estimators.gmc_lambda(lr, 0.2)[:, 0]
    unc = lam == 1.0
    assert unc.sum() > 10
    np.testing.assert_array_equal(c[unc], np.exp(lr[unc]))
    for row in range(1, 200, 37):
        np.testing.assert_array_equal(weights("gmc", lr[row:row + 1], 0.2)[0], c[row])


def test_the_lists_written_out_where_torch_is_not_imported_equal_the_registry_query():
    from claims.measures import CLASS

    assert CLASS == estimators.scheme_names(family="theory", in_class=True)
    with pytest.raises(ValueError, match="unknown scheme family 'peers'"):
        estimators.scheme_names(family="peers")
    assert set(estimators.scheme_names()) == set(estimators.scheme_names(in_class=True)) | set(
        estimators.scheme_names(in_class=False))
