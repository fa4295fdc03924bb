"""The exponent extractor: known expressions, and refusal where there is no power law."""
import pytest
import sympy as sp

from bounds.exponents import elasticity, exponent, exponents
from bounds.symbols import G, T, d, eps

x = sp.Symbol("x", positive=True)


@pytest.mark.parametrize("expr, var, at, want", [
    (x**3, x, 0, 3),
    (x**3, x, sp.oo, 3),
    (5 * x ** sp.Rational(-2, 5), x, sp.oo, sp.Rational(-2, 5)),
    ((1 + eps) ** 4 / eps**2, eps, 0, -2),  # THEORY claim 11, GMC
    ((1 + eps) ** 4 / eps**4, eps, 0, -4),  # THEORY claim 11, TIC-mask
    ((1 + eps) ** 4 / eps**4, eps, sp.oo, 0),  # at infinity the (1+eps)^4 wins
    (x**2 + x**5, x, 0, 2),  # the lowest power near 0 ...
    (x**2 + x**5, x, sp.oo, 5),  # ... the highest near infinity
    (sp.log(1 / x) / x**2, x, 0, -2),  # logs do not change the exponent
    (sp.sqrt(x) * sp.exp(-x) + x**3, x, 0, sp.Rational(1, 2)),
    (sp.Integer(7), G, sp.oo, 0),  # independent of the variable
    (G ** sp.Rational(-2, 5) * d ** sp.Rational(4, 5) * T ** sp.Rational(-4, 5), d, sp.oo, sp.Rational(4, 5)),
])
def test_known_exponents(expr, var, at, want):
    got = exponent(expr, var, at)
    assert got == want
    assert isinstance(got, sp.Rational)


def test_exponents_dict():
    f = G ** sp.Rational(-2, 5) * eps ** sp.Rational(-2, 5) * T ** sp.Rational(-4, 5)
    assert exponents(f, {G: sp.oo, eps: 0, T: sp.oo}) == {
        "G": sp.Rational(-2, 5), "epsilon": sp.Rational(-2, 5), "T": sp.Rational(-4, 5)}


def test_elasticity_matches_exponent_for_pure_powers():
    f = 3 * x ** sp.Rational(7, 3)
    assert elasticity(f, x) == sp.Rational(7, 3)
    assert elasticity((1 + x) ** 4 / x**2, x, 0) == -2


@pytest.mark.parametrize("expr", [sp.exp(-1 / x), sp.exp(1 / x), sp.Integer(0)])
def test_no_power_law_raises(expr):
    with pytest.raises(ValueError, match="exponent"):
        exponent(expr, x, 0)


def test_bad_point_and_variable():
    with pytest.raises(ValueError, match="`at` must be 0 or oo"):
        exponent(x**2, x, 1)
    with pytest.raises(ValueError, match="Symbol"):
        exponent(x**2, x**2, 0)
