"""The one scheme -> mass-bias bound table (bounds.MASS_BOUNDS) and everything that reads it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

import bounds
from bounds import bias
from bounds.delay import DELAY_TERMS, delay_term
from bounds.mass import MASS_BOUNDS, mass_bound


def test_every_form_is_a_registered_bound_and_theorem2_is_what_the_delay_terms_compose():
    from bounds.numeric import names

    for scheme, forms in MASS_BOUNDS.items():
        assert set(forms) == set(bounds.MASS_FORMS) and set(forms.values()) <= set(names())
    G, eps, C2, M, d, eta = sp.symbols("G eps C2 M d eta", positive=True)
    R = eta * d * (1 + eps) * M
    for scheme in ("gmc", "tic_trunc", "stale"):  # D = M^2 m^2 at sigma^2 = C2 R^2, m the theorem2 form
        m = getattr(bias, MASS_BOUNDS[scheme]["theorem2"])
        args = {"gmc": (C2 * R**2, G, eps), "tic_trunc": (C2 * R**2, eps), "stale": (C2 * R**2,)}[scheme]
        D = delay_term(scheme)
        kw = {k: v for k, v in {"eta": eta, "d": d, "G": G, "eps": eps, "C2": C2, "M": M}.items()
              if k in D.signature.parameters}
        assert sp.simplify(D(**kw) - M**2 * m(*args) ** 2) == 0
    assert set(DELAY_TERMS) == set(MASS_BOUNDS)


@pytest.mark.parametrize("scheme", sorted(MASS_BOUNDS))
def test_tight_never_above_theorem2(scheme):
    rng = np.random.default_rng(0)
    s2, mu4 = rng.exponential(2.0, 200), rng.exponential(5.0, 200)
    for G, eps in ((2, 0.05), (8, 0.2), (64, 1.0)):
        t = mass_bound(scheme, s2, mu4, G, eps)
        q = mass_bound(scheme, s2, mu4, G, eps, form="theorem2")
        assert np.all(t <= q * (1 + 1e-12))


def test_values_is_zero_unknown_nan_bad_form_refused():
    assert mass_bound("gmc", 1.0, 0.0, 4, 0.25, form="theorem2") == pytest.approx(1.0 / (4 * 4 * 0.25))
    assert mass_bound("gmc", 1.0, 0.0, 4, 0.25) == pytest.approx((math.sqrt(0.25 + 0.0625) - 0.25) / 2)
    assert mass_bound("tic_trunc", 1.0, 0.0, 4, 0.25) == pytest.approx((math.sqrt(1 + 0.0625) - 0.25) / 2)
    assert float(mass_bound("is", 3.0, 1.0, 4, 0.2)) == 0.0
    assert math.isnan(float(mass_bound("snis", 3.0, 1.0, 4, 0.2)))
    with pytest.raises(ValueError, match="'scarf'"):
        mass_bound("gmc", 1.0, 0.0, 4, 0.2, form="scarf")


def test_simulators_and_llm_read_the_one_table():
    from llm_runs import theory as llm
    from simulators import theory as sim

    for scheme in (*MASS_BOUNDS, "is", "snis"):
        a = sim.mass_bound(scheme, 0.7, 0.4, 8, 0.2)
        b = mass_bound(scheme, 0.7, 0.4, 8, 0.2, form="tight")
        assert (np.isnan(a) and np.isnan(b)) or a == b
    assert llm.SCHEME_BOUNDS == {s: f[llm.BOUND_FORM] for s, f in MASS_BOUNDS.items()}
    for scheme in MASS_BOUNDS:
        assert llm.mass_bias_bound(scheme, 0.7, 0.4, 8, 0.2) == float(mass_bound(scheme, 0.7, 0.4, 8, 0.2,
                                                                                 form=llm.BOUND_FORM))
    assert math.isnan(llm.mass_bias_bound("is", 0.7, 0.4, 8, 0.2))  # IS logs no bound (m = 0 exactly)
    assert llm.mass_bias_bound("gmc", -0.3, 0.4, 8, 0.2) == 0.0  # a negative plug-in chi^2 is clamped
    assert sim.estimator_norm_bound(0.2, 3.0) == pytest.approx(3.6)
    assert sim.drift_radius(0.5, 4, 0.2, 3.0) == pytest.approx(7.2)


def test_the_committed_study_logged_exactly_the_recomputed_theorem2_bound():
    """The trainer's logged bound is the table's theorem2 form at the logged chi^2 and mu_4."""
    from grids.folders import STUDY
    from schema.results import MissingResults
    from studies.staleness.analysis import BOUND_COLUMNS, RAW_BOUND_COLUMNS, read_traces, recomputed_bound

    try:
        root = STUDY.require()
    except MissingResults:
        pytest.fail("the committed study runs are missing")
    tr = read_traces(root, BOUND_COLUMNS + RAW_BOUND_COLUMNS[1:])
    tr = tr[tr["estimator"].isin(["gmc", "tic_trunc"]) & (tr["seed"] < 2)]
    logged = tr["stale/mass_bias_bound"].to_numpy(float)
    ok = np.isfinite(logged)
    assert ok.sum() > 1000
    np.testing.assert_allclose(recomputed_bound(tr, "theorem2")[ok], logged[ok], rtol=1e-12, atol=0)
    tight = recomputed_bound(tr, "tight")[ok]
    # Scarf's (sqrt(a) - b) form rounds at about 1e-17 absolute where chi^2 is tiny
    assert np.all(tight <= logged[ok] * (1 + 1e-9) + 1e-15) and np.any(tight < 0.9 * logged[ok])
