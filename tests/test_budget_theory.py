"""THEORY §9's terms (claims.budget_terms, bounds.budget): the decomposition against the joint law of B groups, the
per-sample schemes' Hoeffding form against the enumeration, on random instances; the bounds' twins; refusals."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounds.numeric import twin
from claims.budget_terms import (
    batch_mse_brute,
    exact_budget_per_sample,
    exact_terms,
    group_law,
    hoeffding,
    per_outcome_weights,
    per_sample_schemes,
)
from claims.common import REL_EXACT


def random_instance(seed: int, Q: int = 2, K: int = 3, binary: bool = False):
    """Q prompts of K outcomes, each in its own block (as E1 with several prompts)."""
    rng = np.random.default_rng(seed)
    th, tb = rng.normal(0, 1, (Q, K)), rng.normal(0, 1, (Q, K))
    lp = th - np.log(np.exp(th).sum(-1, keepdims=True))
    lpb = tb - np.log(np.exp(tb).sum(-1, keepdims=True))
    rew = (rng.random((Q, K)) < 0.5).astype(float) if binary else rng.random((Q, K))
    pi = np.exp(lp)
    S = np.zeros((Q, K, Q * K))
    for q in range(Q):
        S[q, :, q * K:(q + 1) * K] = np.eye(K) - pi[q]
    gJ = np.concatenate([pi[q] * rew[q] - pi[q] * (pi[q] * rew[q]).sum() for q in range(Q)]) / Q
    return lp - lpb, lpb, rew, S, gJ


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), G=st.sampled_from([2, 3]), B=st.sampled_from([2, 3]))
def test_the_decomposition_is_the_joint_law_of_B_groups(seed, G, B):
    lr, lpb, rew, S, gJ = random_instance(seed)
    for s in ("gmc", "tic_trunc", "snis"):
        t = exact_terms(lr, lpb, rew, S, gJ, G, 0.2, [s])[s]
        x, p = group_law(lr, lpb, rew, S, G, 0.2, s)
        assert abs(p.sum() - 1) < 1e-12
        lhs = batch_mse_brute(x, p, gJ, B)
        assert abs(lhs - (t["b_sq"] + (t["V_b"] + t["W"]) / B)) <= REL_EXACT * lhs


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), binary=st.booleans())
def test_per_sample_terms_are_hoeffdings_and_G_free(seed, binary):
    lr, lpb, rew, S, gJ = random_instance(seed, binary=binary)
    assert ("topr" in per_sample_schemes(rew)) == binary
    for s in per_sample_schemes(rew):
        ref = None
        for G in (2, 3, 5):
            t = exact_terms(lr, lpb, rew, S, gJ, G, 0.2, [s])[s]
            h = exact_budget_per_sample(lr, lpb, rew, S, gJ, G, 0.2, s)
            scale = t["S_w"] + t["b_sq"] + 1e-300
            assert abs(t["S_w"] - h["S_w"]) <= REL_EXACT * scale and abs(t["b_sq"] - h["b_sq"]) <= REL_EXACT * scale
            assert h["zeta2"] >= 2 * h["zeta1"] - REL_EXACT * scale  # Hoeffding: zeta2 >= 2 zeta1
            if ref is not None:  # the conditional means do not depend on G
                assert np.allclose(t["mu"], ref["mu"], rtol=0, atol=REL_EXACT * np.abs(ref["mu"]).max())
            ref = t


def test_hoeffdings_mean_is_the_per_sample_mean_and_is_is_unbiased():
    lr, lpb, rew, S, gJ = random_instance(3)
    c = per_outcome_weights("is", lr, rew, 0.2)
    h = hoeffding(lr, lpb, rew, S, c)
    assert np.allclose(h["mu"].mean(0), gJ, atol=1e-14)  # Lemma 1: IS with leave-one-out is unbiased


def test_twins_of_the_section_9_bounds():
    assert twin("batch_mse")(bsq=1.0, Vb=2.0, Sw=3.0, prompts_per_step=2, G=4) == pytest.approx(1 + 1 + 3 / 8)
    assert twin("fixed_budget_mse")(bsq=1.0, Vb=2.0, Sw=3.0, G=4, Nbud=8) == pytest.approx(1 + 1 + 3 / 8)
    assert twin("per_sample_within")(zeta1=1.0, zeta2=3.0, G=2) == pytest.approx(6.0)  # G = 2: 2 zeta2
    assert twin("per_sample_best_G")(zeta1=1.0, zeta2=3.0, Vb=2.0) == pytest.approx(2.0)
    g = twin("gmc_is_within_gap")
    assert g(M=1.0, mu4=1.0, sigma2=1.0, G=64, eps=0.2) < g(M=1.0, mu4=1.0, sigma2=1.0, G=4, eps=0.2)


def test_a_group_coupled_scheme_is_refused_by_the_per_sample_form():
    lr, lpb, rew, S, gJ = random_instance(1)
    with pytest.raises(ValueError, match="'gmc' is not a per-sample scheme"):
        exact_budget_per_sample(lr, lpb, rew, S, gJ, 4, 0.2, "gmc")
    with pytest.raises(ValueError, match="'topr' is not a per-sample scheme"):
        exact_budget_per_sample(lr, lpb, rew, S, gJ, 4, 0.2, "topr")  # rewards not binary
    with pytest.raises(ValueError, match="G >= 2, got G = 1"):
        exact_budget_per_sample(lr, lpb, rew, S, gJ, 1, 0.2, "is")


def test_claims_28_to_30_match_the_ledger():
    """§9's share bound and GMC-to-IS distance hold, and claim 30 fails again exactly where THEORY records it."""
    from claims.ledger import annotate, read_ledger
    from claims.registry import run_claims

    rows = annotate(run_claims([28, 29, 30], quick=True), read_ledger())
    assert [r["status"] for r in rows] == ["PASS", "PASS", "FAIL"]
    assert all(r["matches"] for r in rows), [r["ledger_note"] for r in rows]
