"""bounds/ symbolic modules: hand-derived values, numeric twins, domain errors, doctests."""
import doctest
import importlib
import math

import numpy as np
import pytest
import sympy as sp

from bounds import assumptions, bias, delay, exponents, numeric
from bounds.symbols import C2, Delta, G, M, d, eps, eta, mu4, sigma2

MODULES = ["bounds.symbols", "bounds._core", "bounds.assumptions", "bounds.bias", "bounds.delay",
           "bounds.exponents", "bounds.numeric", "bounds.normalised"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert res.failed == 0
    assert res.attempted > 0


# --- values derived by hand ------------------------------------------------------------------


def test_scarf_gmc_by_hand():
    # sigma^2/G = 1, eps = 1/2: (sqrt(1 + 1/4) - 1/2)/2 = (sqrt 5 - 1)/4
    assert sp.simplify(bias.m_gmc_scarf(4, 4, sp.Rational(1, 2)) - (sp.sqrt(5) - 1) / 4) == 0
    # Scarf <= quadratic bound, equality only as sigma -> 0
    assert bias.m_gmc_scarf(4, 4, sp.Rational(1, 2)) < bias.m_gmc_quadratic(4, 4, sp.Rational(1, 2))
    assert bias.m_gmc_quadratic(4, 4, sp.Rational(1, 2)) == sp.Rational(1, 2)


def test_trunc_bounds_by_hand():
    # sigma = 4, eps = 3: (5 - 3)/2 = 1; quadratic 16/12 = 4/3
    assert bias.m_trunc_scarf(16, 3) == 1
    assert bias.m_trunc_quadratic(16, 3) == sp.Rational(4, 3)
    assert bias.m_stale_bound(9) == 3


def test_mask_bound_by_hand():
    # sqrt(1+3) sqrt(4) / 2^2 = 1
    assert bias.m_mask_markov(3, 4, 2) == 1
    assert bias.m_mask_two_point(1, 1) == 1  # (1+1)*1/(1+1)


def test_fourth_moment_gaussian_by_hand():
    # Gaussian Y: mu4 = 3 sigma^4; Wbar - 1 ~ N(0, sigma^2/G), so E(.)^4 = 3 sigma^4 / G^2
    assert sp.simplify(bias.fourth_moment_group_mean(sigma2, 3 * sigma2**2, G) - 3 * sigma2**2 / G**2) == 0
    assert bias.central_moment_of_mean(2) == sigma2 / G
    assert bias.central_moment_of_mean(3) == sp.Symbol("mu3", real=True) / G**2


def test_two_point_law_by_hand():
    # sigma^2 = 1/10, eps = 1/2: p = (1/10)/(1/10 + 1/4) = 2/7, lo = 1 - sigma^2/eps = 4/5
    law = bias.mask_two_point_law(sp.Rational(1, 10), sp.Rational(1, 2), 0)
    assert law["p"] == sp.Rational(2, 7)
    assert sp.simplify(law["lo"] - sp.Rational(4, 5)) == 0
    assert bias.law_moments(law) == (1, sp.Rational(1, 10))


def test_rare_jump_law_variance():
    law = bias.rare_jump_law(sp.Rational(1, 100), 4, sp.Rational(1, 10))
    mean, var = bias.law_moments(law)
    assert mean == 1
    assert var == sp.Rational(4 * 16, 100) * sp.Rational(1, 100) / sp.Rational(99, 100)  # 4 G^2 eps^2 p/(1-p)


def test_lognormal_by_hand():
    assert bias.lognormal_sigma2(1) == sp.E - 1
    # small Delta: mu4 ~ 3 sigma^4 ~ 3 Delta^4 (the Gaussian limit)
    assert sp.limit(bias.lognormal_mu4(Delta) / Delta**4, Delta, 0) == 3
    # m_mask at eps with log(1+eps) = Delta^2/2 is exactly 1/2
    assert sp.simplify(bias.lognormal_m_mask(Delta, sp.exp(Delta**2 / 2) - 1) - sp.Rational(1, 2)) == 0


def test_delay_terms_by_hand():
    # eta = d = eps = C2 = M = 1, G = 1: R = 2, sigma^2 <= 4, m_GMC <= 1, D = 1
    assert delay.D_gmc(1, 1, 1, 1, 1, 1) == 1
    assert delay.D_gmc(1, 1, 2, 1, 1, 1) == sp.Rational(1, 4)  # 1/G^2
    # TIC-mask: M^2 (1 + C2 r0^2) C4 R^4 / eps^4 = 2 * 16
    assert delay.D_tic_mask(1, 1, 1, 1, 1, 1, 1) == 32
    assert delay.D_stale(1, 1, 1, 1, 1) == 4  # M^2 C2 R^2
    assert delay.D_tic_trunc(1, 2, 1, 1, 1) == 16  # R = 4, sigma^2 = 16, m = 4
    for scheme, stated in delay.stated_delay_terms().items():
        assert sp.simplify(delay.delay_term(scheme)() - stated) == 0


def test_corollary3_by_hand():
    assert delay.eta_D(4, 1, 1) == 1
    assert delay.cor3_objective(1, 4, 0, 1, 1) == 5 == delay.cor3_delay_part(4, 1, 1)
    assert delay.cor3_tuned_bound(4, 1, 1, 1) == 9  # 2 sqrt(4) + 5
    assert delay.lemma3_bound(1, 1, 2, 1, 1, 0) == 2  # 2/2 + 1
    assert assumptions.drift_radius(sp.Rational(1, 10), 4, 1, 5) == 4


def test_gmc_lambda_symbolic():
    assert bias.gmc_lambda([3, 1, 1, 1], sp.Rational(1, 5)) == sp.Rational(4, 5)
    assert bias.gmc_lambda([1, 1], 1) == 1
    assert bias.gmc_excess(3, 1) == 1


# --- numeric twins ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["m_gmc_scarf", "m_mask_markov", "D_gmc", "D_tic_mask", "cor3_tuned_bound",
                                  "lognormal_m_trunc", "beta1_term_mask", "hinge"])
def test_twin_matches_symbolic(name):
    fn = numeric.BOUNDS[name]
    twin = numeric.twin(name)
    rng = np.random.default_rng(7)
    for _ in range(5):
        # group sizes and delays are counts: integers in their domain
        vals = {p: float(rng.integers(1, 4)) if p in ("G", "d") else float(rng.uniform(1.0, 3.0))
                for p in fn.signature.parameters}
        exact = float(sp.N(fn(**{k: sp.Float(v, 30) for k, v in vals.items()}), 20))
        assert twin(**vals) == pytest.approx(exact, rel=1e-12)


def test_twin_broadcasts_and_requires_all_arguments():
    f = numeric.twin("m_gmc_quadratic")
    out = f(sigma2=np.array([[1.0], [2.0]]), G=np.array([1.0, 2.0, 4.0]), eps=0.25)
    assert out.shape == (2, 3)
    assert out[1, 2] == pytest.approx(2.0 / (4 * 4 * 0.25))
    with pytest.raises(ValueError, match="missing argument"):
        f(sigma2=1.0, G=2.0)
    with pytest.raises(ValueError, match="unknown bound"):
        numeric.twin("no_such_bound")


# --- domain -----------------------------------------------------------------------------------


@pytest.mark.parametrize("call, bad", [
    (lambda: bias.m_gmc_quadratic(1, 4, 0), "eps"),
    (lambda: bias.m_gmc_scarf(1, 4, -0.1), "eps"),
    (lambda: bias.m_gmc_quadratic(1, 0.5, 0.2), "G"),
    (lambda: delay.D_gmc(0.1, -1, 4, 0.2, 1, 1), "d"),
    (lambda: delay.D_tic_mask(0, 1, 0.2, 1, 1, 1, 1), "eta"),
    (lambda: delay.cor3_delay_part(1, 1, 0.5), "T"),
    (lambda: delay.lemma3_bound(1, 1, 0, 1, 1, 0), "T"),
    (lambda: bias.m_trunc_scarf(-1, 0.2), "sigma2"),
    (lambda: bias.m_gmc_quadratic(1, 4, -eps), "eps"),  # symbolic, known negative
    (lambda: bias.fourth_moment_group_mean(1, 3, 0), "G"),
    (lambda: bias.central_moment_of_mean(4, 0), "G"),
    (lambda: numeric.twin("D_gmc")(eta=0.1, d=np.array([1.0, -2.0]), G=4, eps=0.2, C2=1, M=1), "d"),
    (lambda: numeric.twin("m_gmc_scarf")(sigma2=1.0, G=4, eps=np.array([0.2, 0.0])), "eps"),
    (lambda: numeric.twin("eta_D")(a=1.0, D=1.0, T=0.0), "T"),
    (lambda: numeric.twin("m_gmc_scarf")(sigma2=1.0, G=4, eps=math.nan), "eps"),
])
def test_domain_errors(call, bad):
    with pytest.raises(ValueError, match=rf"^{bad} must be"):
        call()


def test_symbols_pass_domain():
    # symbolic arguments with the right assumptions are accepted
    assert delay.D_gmc(eta, d, G, eps, C2, M).has(eps)
    assert bias.fourth_moment_group_mean(sigma2, mu4, G).has(G)


def test_exponents_module_exports():
    assert exponents.exponent(delay.D_gmc() / eta**4, eps, 0) == -2


def test_twins_that_take_ratio_moments_refuse_infeasible_ones():
    """No law has mu_4 < sigma^4 (Jensen); a ratio w >= 0 of mean 1 with sigma^2 > 1 needs
    mu_4 >= sigma^6 - sigma^4 + sigma^2 (the two-point law on {0, 1 + sigma^2} attains it)."""
    for name in ("m2_gmc_quartic", "fourth_moment_group_mean"):
        f = numeric.twin(name)
        kw = {"G": 2.0, **({"eps": 0.2} if "eps" in f.params else {})}
        with pytest.raises(ValueError, match=r"infeasible ratio moments: mu4 = 1\.0 .* sigma2 = 2\.0"):
            f(sigma2=2.0, mu4=1.0, **kw)
        with pytest.raises(ValueError, match="infeasible ratio moments"):
            f(sigma2=np.array([0.5, 4.0]), mu4=np.array([1.0, 20.0]), **kw)  # 20 >= 4^2, but < 52
        assert np.isfinite(f(sigma2=np.array([0.5, 4.0, 1.0]), mu4=np.array([0.25, 52.0, 1.0]), **kw)).all()
    with pytest.raises(ValueError, match="infeasible ratio moments"):
        bias.fourth_moment_group_mean(2, 1, 2)
    # the two-point law on {0, 1 + s} has exactly these moments: the condition is tight
    s = 4.0
    p = 1 / (1 + s)  # P(w = 1 + s), mean 1
    assert p * s**2 + (1 - p) == pytest.approx(s) and p * s**4 + (1 - p) == pytest.approx(s**3 - s**2 + s)
