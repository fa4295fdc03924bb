"""Symbolic bounds of THEORY.md (sympy) and their numeric twins.

* :mod:`bounds.symbols`     every symbol, declared once with its assumptions
* :mod:`bounds.assumptions` §1: A1-A5 constants and the drift lemma
* :mod:`bounds.bias`        §2-§3: beta functionals, mass-bias bounds, key inequalities, laws
* :mod:`bounds.delay`       §4: Lemma 3, Theorem 2's delay terms, Corollary 3
* :mod:`bounds.exponents`   exponent of a variable in an expression, derived by sympy
* :mod:`bounds.numeric`     ``twin(name)``: the lambdified numeric twin of a bound
* :mod:`bounds.tuning`      Corollary 3's step size, tuned numerically on the twin of its objective

The claims of §5 that these bounds state are checked by :mod:`claims` (``python -m claims``).

The bounds are THEORY.md's reconstruction ([R]), not the paper's text.
"""
