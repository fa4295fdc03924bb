"""THEORY §8: normalising optimisers (signSGD, Adam): step bounds, sign-error bounds, the
per-scheme table beside :data:`bounds.MASS_BOUNDS`.

Every function returns a sympy expression; :func:`bounds.numeric.twin` gives its numeric twin.
A twin that takes moments checks that a law with those moments exists (``feasible=``) before it
evaluates: a second moment below the square of its mean, or a mean above what the sure bound
allows, is refused with a ``ValueError`` rather than turned into a number.

* :func:`adam_step_factor`: ``|Delta theta_j| <= lr kappa_t`` for Adam with eps -> 0, any
  gradient sequence (Cauchy-Schwarz on the momentum; tight);
* :func:`cantelli_sign_error`: ``P(sign g_j != sign grad_j J) <= 1 - mu^2 / m2`` (Cantelli), mu the
  mean of g_j along the sign of ``grad_j J``, m2 = E g_j^2;
* :func:`adam_sign_error`: the same for Adam's momentum (the sign of Adam's step) when the
  gradients are iid with one law (a frozen policy pair);
* :func:`sign_error_mass` and :func:`sign_error_iid`: the bound in terms of the ratio law, the
  first for every scheme (through the second moment of the group's mass), the second for a
  per-sample scheme with a fixed baseline (iid terms);
* :data:`SIGN_TABLE`: per scheme, the bound on E (group mass)^2, on E_b c^2, on the mass bias
  and on the largest single weight (the per-trajectory share); :func:`sign_error_bound`,
  :func:`weight_max`, :func:`trajectory_share_bound` read it; §8.4's step scales
  :func:`step_form_scale` (GMC's step form) and :func:`vcpo_scale` (VCPO's ESS-scaled step).

These are this toolkit's reconstruction ([R]), not the paper's text.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from estimators._compat import renamed_keywords

from ._core import bound
from .symbols import G, M, beta1, beta2, c2, cmax, eps, m2, mu, prompts_per_step, sigma2, t

# --------------------------------------------------------------------- feasibility checks


def _moments_feasible(m2=None, mu=None, **_):
    """A law with E g = mu and E g^2 = m2 exists iff m2 >= mu^2 (up to rounding)."""
    if np.any(m2 < mu**2 * (1 - 1e-12) - 1e-300):
        bad = np.broadcast_arrays(m2, mu)
        i = np.flatnonzero((bad[0] < bad[1] ** 2 * (1 - 1e-12) - 1e-300).ravel())[0]
        raise ValueError(f"infeasible moments: E g^2 = m2 = {bad[0].ravel()[i]!r} is below mean^2 = "
                         f"{bad[1].ravel()[i] ** 2!r} (no law has them)")


def _adam_feasible(beta1=None, beta2=None, **kw):
    if np.any(beta1**2 >= beta2):
        raise ValueError("Adam's step bound needs beta1^2 < beta2 (the momentum's Cauchy-Schwarz sum "
                         f"converges), got beta1 = {float(np.max(beta1))!r}, beta2 = {float(np.min(beta2))!r}")
    if "m2" in kw:
        _moments_feasible(**kw)


def _mass_feasible(mu=None, M=None, m2=None, **_):
    """|E g_j| <= M sqrt(E mass^2) for |g_j| <= M mass: a larger mean is infeasible."""
    if np.any(np.abs(mu) > M * np.sqrt(m2) * (1 + 1e-12)):
        raise ValueError("infeasible moments: |mu| exceeds M sqrt(m2), the most a coordinate "
                         "bounded by M times the group's mass can have on average")


def _iid_feasible(c2=None, mu=None, M=None, G=None, **_):
    """|E c X_j| <= M sqrt(E_b c^2) (Cauchy-Schwarz, |X_j| <= M)."""
    if np.any(np.abs(mu) > M * np.sqrt(c2) * (1 + 1e-12)):
        raise ValueError("infeasible moments: |mu| exceeds M sqrt(c2) (Cauchy-Schwarz with |X_j| <= M)")


# --------------------------------------------------------------------- §8.1 Adam's step


@bound(feasible=_adam_feasible)
def adam_step_factor(t=t, beta1=beta1, beta2=beta2):
    """§8.1: Adam (eps -> 0, bias-corrected) moves each coordinate by at most ``lr kappa_t`` at
    step t, for every gradient sequence:

    .. math:: \\kappa_t=\\frac{1-\\beta_1}{1-\\beta_1^t}\\sqrt{\\frac{1-\\beta_2^t}{1-\\beta_2}}
              \\sqrt{\\frac{1-\\gamma^t}{1-\\gamma}},\\quad \\gamma=\\beta_1^2/\\beta_2

    (Cauchy-Schwarz on ``m_t = (1-beta1) sum_s beta1^(t-s) g_s``; equality for ``|g_s|``
    proportional to ``(beta1/beta2)^(t-s)``). ``kappa_1 = 1``: Adam's first step is signSGD's.

    >>> adam_step_factor(1, sp.Rational(9, 10), sp.Rational(999, 1000))
    1
    """
    gam = beta1**2 / beta2
    return (1 - beta1) / (1 - beta1**t) * sp.sqrt((1 - beta2**t) / (1 - beta2)) * sp.sqrt((1 - gam**t) / (1 - gam))


@bound(feasible=_adam_feasible)
def adam_step_factor_limit(beta1=beta1, beta2=beta2):
    """§8.1: ``kappa_inf = (1-beta1) / sqrt((1-beta2)(1-beta1^2/beta2))`` = 7.2703 at (0.9, 0.999).

    >>> round(float(adam_step_factor_limit(0.9, 0.999)), 4)
    7.2703
    """
    return (1 - beta1) / sp.sqrt((1 - beta2) * (1 - beta1**2 / beta2))


@bound
def adam_momentum_var_factor(t=t, beta1=beta1):
    """§8.2: ``Var(m_hat_t) = r_t Var(g)`` for iid gradients, with Adam's bias correction:
    ``r_t = (1-beta1)(1+beta1^t) / ((1+beta1)(1-beta1^t))``; ``r_1 = 1`` (signSGD),
    ``r_inf = (1-beta1)/(1+beta1)`` (1/19 at 0.9).

    >>> adam_momentum_var_factor(1, sp.Rational(9, 10))
    1
    """
    return (1 - beta1) * (1 + beta1**t) / ((1 + beta1) * (1 - beta1**t))


# --------------------------------------------------------------------- §8.2 sign errors


@bound(feasible=_moments_feasible)
def cantelli_sign_error(m2=m2, mu=mu):
    """§8.2 (Cantelli): with ``mu = sign(grad_j J) E g_j > 0`` and ``m2 = E g_j^2``,
    ``P(sign(grad_j J) g_j <= 0) <= Var/(Var + mu^2) = 1 - mu^2/m2``; 1 (no bound) when mu <= 0.

    >>> cantelli_sign_error(2, 1)
    1/2
    """
    return sp.Piecewise((1 - mu**2 / m2, mu > 0), (1, True))


@bound(feasible=_adam_feasible)
def adam_sign_error(m2=m2, mu=mu, t=t, beta1=beta1, beta2=beta2):
    """§8.2: the sign of Adam's step is the sign of its momentum; for iid gradients of one law
    (mean mu along grad_j J, second moment m2) Cantelli on ``m_hat_t`` gives
    ``P(wrong) <= r_t v / (r_t v + mu^2)``, ``v = m2 - mu^2``, r_t :func:`adam_momentum_var_factor`.
    beta2 is not in the formula (the denominator sqrt(v_hat) > 0 does not change a sign); it is a
    parameter so that the twin refuses beta1^2 >= beta2 like the other Adam bounds.

    >>> adam_sign_error(2, 1, 1, sp.Rational(9, 10), sp.Rational(999, 1000))
    1/2
    """
    r = adam_momentum_var_factor(t, beta1)
    v = m2 - mu**2
    return sp.Piecewise((r * v / (r * v + mu**2), mu > 0), (1, True))


@bound(feasible=_mass_feasible)
def sign_error_mass(mu=mu, M=M, m2=m2):
    """§8.2, every scheme: ``|g_j| <= M (1/G) sum_i c_i`` (leave-one-out advantages, |X_ij| <= M),
    so ``E g_j^2 <= M^2 m2`` with m2 a bound on E (group mass)^2, and with mu a lower bound on
    ``sign(grad_j J) E g_j``: ``P(wrong) <= 1 - mu^2 / (M^2 m2)`` (1 when mu <= 0).

    >>> sign_error_mass(1, 2, 1)
    3/4
    """
    return sp.Piecewise((1 - mu**2 / (M**2 * m2), mu > 0), (1, True))


@bound(feasible=_mass_feasible)
def sign_error_mass_batch(mu=mu, M=M, m2=m2, prompts_per_step=prompts_per_step):
    """§8.3, B independent groups per batch (the batch's estimate is their mean): the group's variance
    is at most ``M^2 m2 - mu^2`` and is divided by B, so
    ``P(wrong) <= (M^2 m2 - mu^2) / (M^2 m2 - mu^2 + B mu^2)``; :func:`sign_error_mass` at B = 1.

    >>> sign_error_mass_batch(1, 2, 1, 3)
    1/2
    """
    v = M**2 * m2 - mu**2
    return sp.Piecewise((v / (v + prompts_per_step * mu**2), mu > 0), (1, True))


@bound(feasible=_iid_feasible)
def sign_error_iid(c2=c2, mu=mu, M=M, G=G):
    """§8.2, a per-sample scheme with a fixed baseline (iid terms X_i = (r_i - E_b r) s_i):
    ``P(wrong) <= (M^2 c2 - mu^2) / (M^2 c2 + (G-1) mu^2)``, c2 a bound on ``E_b c(w)^2`` and mu
    a lower bound on ``sign(grad_j J) E_b[c X_j]`` (the expression increases in c2, decreases in mu).

    >>> sign_error_iid(1, 1, 2, 4)
    3/7
    """
    a = M**2 * c2
    return sp.Piecewise(((a - mu**2) / (a + (G - 1) * mu**2), mu > 0), (1, True))


# --------------------------------------------------------------------- §8.3 per-scheme quantities


@bound
def mass_sq_is(sigma2=sigma2, G=G):
    """E Wbar^2 = 1 + sigma^2/G (IS's group mass is Wbar)."""
    return 1 + sigma2 / G


@bound
def mass_sq_gmc(sigma2=sigma2, G=G, eps=eps):
    """GMC: E min(Wbar, 1+eps)^2 <= min(1 + eps, 1 + sigma^2/G) ((1+eps) E min(Wbar, 1+eps) <= 1+eps)."""
    return sp.Min(1 + eps, 1 + sigma2 / G)


@bound
def weight_sq_capped(sigma2=sigma2, eps=eps):
    """TIC-mask, TIC-trunc: c <= min(w, 1+eps), so E_b c^2 <= min(1 + eps, 1 + sigma^2)."""
    return sp.Min(1 + eps, 1 + sigma2)


@bound
def mass_sq_capped(sigma2=sigma2, G=G, eps=eps):
    """TIC-mask, TIC-trunc: E ((1/G) sum c_i)^2 = Var(c)/G + (E c)^2 <= min(1+eps, 1+sigma^2)/G + 1 - 1/G."""
    return weight_sq_capped(sigma2, eps) / G + 1 - 1 / G


@bound
def weight_sq_is(sigma2=sigma2):
    """IS: E_b w^2 = 1 + sigma^2 (chi^2 enters linearly, so exponentially in the horizon)."""
    return 1 + sigma2


@bound
def weight_sq_bounded(cmax=cmax):
    """A weight bounded by c_max (TOPR, stale: 1; VESPO: its peak): E_b c^2 <= c_max^2, and so is
    E (group mass)^2."""
    return cmax**2


@bound
def m_abs_dev(sigma2=sigma2):
    """TOPR (and c = 1): |c_i - w_i| <= |w_i - 1|, so the bias is at most M E_b|w - 1| <= M sigma."""
    return sp.sqrt(sigma2)


@bound
def trajectory_share(cmax=cmax, G=G, prompts_per_step=prompts_per_step):
    """§8.3: the largest share of a batch's nominal mass (B G trajectories of weight 1) that one
    trajectory can carry: ``c_max / (B G)``."""
    return cmax / (prompts_per_step * G)


# --------------------------------------------------------------------- §8.3 the per-scheme table


def _twin(name: str):
    """The numeric twin of a registered bound, through the package (``bounds.twin``): this module is
    imported by :mod:`bounds.numeric` to register its bounds, so it does not import that module back."""
    import bounds

    return bounds.twin(name)


def phi_peak(k: float, lam: float) -> float:
    """``max_w w^k exp(lam (1 - w))`` (VESPO's weight): ``(k/lam)^k exp(lam - k)`` at ``w = k/lam``;
    ``exp(lam)`` as w -> 0 when k = 0."""
    return math.exp(k * math.log(k / lam) + lam - k) if k > 0 else math.exp(lam)


def _vespo_peak(k_pos, lambda_pos, k_neg, lambda_neg):
    return max(phi_peak(k_pos, lambda_pos), phi_peak(k_neg, lambda_neg))


@renamed_keywords(ngroups="prompts_per_step")  # deprecated 2026-12-07, removed after 2027-06-01
def weight_max(scheme: str, G, eps, prompts_per_step=1, **params) -> float:
    """§8.3: ``sup_w max_i c_i``, the largest weight one trajectory can get (exact, from the scheme's
    definition in :mod:`estimators`): IS inf; GMC G(1+eps); TOPR 1; ... (:data:`SIGN_TABLE`). A
    scheme with knobs takes them as keywords; a knob not given takes its default from the scheme's
    record (:func:`estimators.params.resolve`, which also refuses an unknown knob or a bad value)."""
    from estimators.params import resolve

    row = SIGN_TABLE.get(scheme)
    if row is None:
        raise ValueError(f"no §8 entry for scheme {scheme!r}; schemes: {', '.join(SIGN_TABLE)}")
    knobs = resolve(scheme, params)
    try:
        return float(row["c_max"](float(G), float(eps), int(prompts_per_step), **knobs))
    except TypeError as e:
        raise ValueError(f"weight_max({scheme!r}): pass exactly its knobs as keywords ({e})") from None


SIGN_TABLE: dict[str, dict] = {
    # scheme: c_max(G, eps, B, **knobs): the largest single weight (every knob of the scheme's record, passed by
    # weight_max with its record's default where not given); mass_sq: twin of a bound on
    # E (group mass)^2 (every scheme, leave-one-out); weight_sq: twin of a bound on E_b c^2 (per-sample
    # schemes only: the iid form); mass_bias: twin of a bound on m (||b|| <= M m)
    "is": {"c_max": lambda G, e, B: math.inf, "mass_sq": "mass_sq_is", "weight_sq": "weight_sq_is",
           "mass_bias": None},
    "stale": {"c_max": lambda G, e, B: 1.0, "mass_sq": 1.0, "weight_sq": 1.0, "mass_bias": "m_stale_bound"},
    "tic_mask": {"c_max": lambda G, e, B: 1 + e, "mass_sq": "mass_sq_capped", "weight_sq": "weight_sq_capped",
                 "mass_bias": "m_mask_markov"},
    "tic_trunc": {"c_max": lambda G, e, B: 1 + e, "mass_sq": "mass_sq_capped", "weight_sq": "weight_sq_capped",
                  "mass_bias": "m_trunc_scarf"},
    "gmc": {"c_max": lambda G, e, B: G * (1 + e), "mass_sq": "mass_sq_gmc", "weight_sq": None,
            "mass_bias": "m_gmc_scarf"},
    "snis": {"c_max": lambda G, e, B: G, "mass_sq": 1.0, "weight_sq": None, "mass_bias": None},
    "topr": {"c_max": lambda G, e, B: 1.0, "mass_sq": 1.0, "weight_sq": None, "mass_bias": "m_abs_dev"},
    "vespo": {"c_max": lambda G, e, B, k_pos, lambda_pos, k_neg, lambda_neg:
              _vespo_peak(k_pos, lambda_pos, k_neg, lambda_neg), "mass_sq": "peak", "weight_sq": None,
              "mass_bias": None},
    "seq_tis_bn": {"c_max": lambda G, e, B, C: B * G, "mass_sq": None, "weight_sq": None, "mass_bias": None},
    "seq_mis": {"c_max": lambda G, e, B, lo, hi: hi, "mass_sq": None, "weight_sq": None, "mass_bias": None},
    "gmc_cap": {"c_max": lambda G, e, B, kappa: (1 + e) * kappa, "mass_sq": None, "weight_sq": None,
                "mass_bias": None},
    "gmc_topr": {"c_max": lambda G, e, B: G * (1 + e), "mass_sq": None, "weight_sq": None, "mass_bias": None},
    "topr_gmc": {"c_max": lambda G, e, B: max(1.0, (G - 1) * (1 + e)), "mass_sq": None, "weight_sq": None,
                 "mass_bias": None},
}
"""THEORY §8.3's table, one row per scheme (the per-trajectory share column is ``c_max / (B G)``).
``c_max`` of gmc_topr/topr_gmc: the one-sign scale makes a sign's mean at most 1+eps over its |S|
trajectories, |S| <= G (positive: every A_i = 0 counts as positive) or G - 1 (negative: leave-one-out
advantages sum to 0, so at least one is >= 0)."""


def _value(entry, **kw):
    if entry is None:
        return math.nan
    if isinstance(entry, (int, float)):
        return float(entry)
    f = _twin(entry)
    return f(**{k: kw[k] for k in f.params})


@renamed_keywords(ngroups="prompts_per_step")  # deprecated 2026-12-07, removed after 2027-06-01
def sign_error_bound(scheme: str, grad_abs, M_, sigma2_, G_, eps_, form: str = "mass", mu4_=0.0,
                     prompts_per_step: int = 1, **knobs):
    """§8.3's sign-error bound of ``scheme`` at one coordinate: ``grad_abs = |grad_j J|``, M the A2
    bound, (sigma^2, mu_4) the ratio law, G, eps. ``form="mass"``: :func:`sign_error_mass` (every
    scheme with a mass_sq entry, leave-one-out); ``"iid"``: :func:`sign_error_iid` (per-sample
    schemes, fixed baseline; ``knobs``: a scheme's knobs where its row needs them). With ``prompts_per_step = B``
    independent groups per batch the mass form is :func:`sign_error_mass_batch` and the iid form
    has B G terms. The mean is bounded below by ``(|grad_j J| - M m)_+``, m the
    scheme's mass-bias bound (0 for IS). NaN where the table has no entry (no mass-bias bound, or no
    second-moment bound in that form)."""
    row = SIGN_TABLE.get(scheme)
    if row is None or form not in ("mass", "iid"):
        raise ValueError(f"no §8 sign-error bound for scheme {scheme!r} in form {form!r}")
    kw = {"sigma2": np.asarray(sigma2_, float), "G": G_, "eps": eps_, "mu4": mu4_}
    m = 0.0 if scheme == "is" else _value(row["mass_bias"], **kw)
    if np.all(np.isnan(m)):  # no bound on the bias: nothing bounds the mean from below
        return np.full(np.shape(grad_abs), np.nan)
    mu_lo = np.maximum(np.asarray(grad_abs, float) - M_ * np.asarray(m, float), 0.0)
    twin = _twin
    if form == "mass":
        entry = row["mass_sq"]
        sq = weight_max(scheme, G_, eps_, **knobs) ** 2 if entry == "peak" else _value(entry, **kw)
        if np.all(np.isnan(sq)):
            return np.full_like(mu_lo, np.nan)
        if prompts_per_step == 1:
            return twin("sign_error_mass")(mu=mu_lo, M=M_, m2=sq)
        return twin("sign_error_mass_batch")(mu=mu_lo, M=M_, m2=sq, prompts_per_step=prompts_per_step)
    sq = _value(row["weight_sq"], **kw)
    if np.all(np.isnan(sq)):
        return np.full_like(mu_lo, np.nan)
    return twin("sign_error_iid")(c2=sq, mu=mu_lo, M=M_, G=int(prompts_per_step) * G_)


@renamed_keywords(ngroups="prompts_per_step")  # deprecated 2026-12-07, removed after 2027-06-01
def trajectory_share_bound(scheme: str, G, eps, prompts_per_step=1, **params) -> float:
    """§8.3: ``c_max / (B G)``, the largest share of the batch's nominal mass one trajectory can carry."""
    return weight_max(scheme, G, eps, prompts_per_step, **params) / (int(prompts_per_step) * float(G))


def step_form_scale(log_ratio, eps):
    """§8.4: the step form of GMC's cap, ``s_t = (1/B) sum_g lambda_g`` over the batch's B groups
    (rows of ``log_ratio``, raw trajectory log-ratios), lambda_g = min(1, (1+eps)/mean_i w_gi),
    in log space (a group's log mean ratio by log-sum-exp)."""
    from scipy.special import logsumexp

    lr = np.atleast_2d(np.asarray(log_ratio, float))
    log_mean = logsumexp(lr, axis=-1) - math.log(lr.shape[-1])
    return float(np.mean(np.exp(np.minimum(0.0, math.log1p(eps) - log_mean))))


def vcpo_scale(log_ratio):
    """§8.4, for comparison: VCPO's ``sqrt(rho_ess)``, ``rho_ess = (sum w)^2 / (n sum w^2)`` over
    the n sequences of the batch (all rows of ``log_ratio``), computed stably in log space."""
    lr = np.asarray(log_ratio, float).ravel()
    m = lr.max()
    a, b = np.exp(lr - m).sum(), np.exp(2 * (lr - m)).sum()
    return float(math.sqrt(a * a / (lr.size * b)))


__all__ = ["SIGN_TABLE", "adam_momentum_var_factor", "adam_sign_error", "adam_step_factor", "adam_step_factor_limit",
           "cantelli_sign_error", "phi_peak", "sign_error_bound", "sign_error_iid", "sign_error_mass",
           "sign_error_mass_batch",
           "step_form_scale", "trajectory_share_bound", "vcpo_scale", "weight_max"]
