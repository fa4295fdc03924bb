"""THEORY §9: the mean squared error of the batch's estimate at B prompts x G completions, and the split of a
sample budget N = B G it prefers. Every function returns a sympy expression; :func:`bounds.numeric.twin` gives
its numeric twin.

* :func:`batch_mse`: Proposition 9.1, ``E||g_(B,G) - grad J||^2 = ||b(G)||^2 + V_b(G)/B + S_w(G)/(B G)`` (exact for
  every scheme whose groups are independent);
* :func:`fixed_budget_mse`: the same at ``B = N / G``;
* :func:`per_sample_within`: Proposition 9.2, ``S_w(G)`` of a per-sample scheme with leave-one-out advantages
  (a U-statistic of order 2: Hoeffding's decomposition, exact);
* :func:`per_sample_best_G`: the real G that minimises a per-sample scheme's MSE at fixed N;
* :func:`share_within_bound`: Proposition 9.4, the within part bounded through §8.3's share column;
* :func:`gmc_is_within_gap`: Proposition 9.3, how far GMC's ``sqrt(S_w)`` can lie from IS's.

These are this toolkit's reconstruction ([R]), not the paper's text.
"""
from __future__ import annotations

import sympy as sp

from ._core import bound
from .symbols import (
    G,
    M,
    Nbud,
    Sw,
    Vb,
    bsq,
    eps,
    kappa_w,
    mass_mean,
    mu4,
    prompts_per_step,
    share,
    sigma2,
    zeta1,
    zeta2,
)


@bound
def batch_mse(bsq=bsq, Vb=Vb, Sw=Sw, prompts_per_step=prompts_per_step, G=G):
    """Proposition 9.1: the batch's mean squared error at B prompts x G completions.

    .. math:: \\mathbb E\\|g_{(B,G)}-\\nabla J\\|^2=\\|b(G)\\|^2+V_b(G)/B+S_w(G)/(BG)
    """
    return bsq + Vb / prompts_per_step + Sw / (prompts_per_step * G)


@bound
def fixed_budget_mse(bsq=bsq, Vb=Vb, Sw=Sw, G=G, Nbud=Nbud):
    """The batch's mean squared error at a sample budget N split as B = N / G prompts of G.

    .. math:: \\|b(G)\\|^2+V_b(G)\\,G/N+S_w(G)/N
    """
    return bsq + Vb * G / Nbud + Sw / Nbud


@bound
def per_sample_within(zeta1=zeta1, zeta2=zeta2, G=G):
    """Proposition 9.2: ``S_w(G) = G W(G)`` of a per-sample scheme with leave-one-out advantages, from the
    Hoeffding variances of its kernel ``k(x, y) = (r_x - r_y)(c_x s_x - c_y s_y) / 2`` (averaged over prompts).

    .. math:: S_w(G)=\\frac{4(G-2)\\zeta_1+2\\zeta_2}{G-1}=4\\zeta_1+\\frac{2(\\zeta_2-2\\zeta_1)}{G-1}
    """
    return (4 * (G - 2) * zeta1 + 2 * zeta2) / (G - 1)


@bound
def per_sample_best_G(zeta1=zeta1, zeta2=zeta2, Vb=Vb):
    """The real G >= 1 that minimises a per-sample scheme's :func:`fixed_budget_mse` (its bias does not depend
    on G; the G-dependent part ``V_b G + 2(zeta2 - 2 zeta1)/(G - 1)`` is convex).

    .. math:: G^*=1+\\sqrt{2(\\zeta_2-2\\zeta_1)/V_b}
    """
    return 1 + sp.sqrt(2 * (zeta2 - 2 * zeta1) / Vb)


@bound
def share_within_bound(kappa_w=kappa_w, share=share, M=M, mass_mean=mass_mean):
    """Proposition 9.4: the within part of the batch's MSE, ``S_w(G)/(B G) = W(G)/B``, is at most
    ``kappa s M^2 E[mass]`` with ``s`` §8.3's share ``c_max / (B G)``: kappa = 1 for GMC (its group mass is at
    most 1 + eps = c_max / G), 2 for a per-sample scheme with leave-one-out advantages.

    .. math:: \\frac{S_w(G)}{BG}\\le\\kappa\\,s\\,M^2\\,\\mathbb E[\\mathrm{mass}]
    """
    return kappa_w * share * M**2 * mass_mean


@bound
def gmc_is_within_gap(M=M, mu4=mu4, sigma2=sigma2, G=G, eps=eps):
    """Proposition 9.3: ``|sqrt(S_w^GMC(G)) - sqrt(S_w^IS(G))| <= sqrt(G E||g_GMC - g_IS||^2)`` and
    ``||g_GMC - g_IS|| <= M (Wbar - 1 - eps)_+ <= M (Wbar - 1)^2 / (4 eps)``, with claim 6's fourth moment.

    .. math:: \\frac{M}{4\\epsilon}\\sqrt{\\frac{\\mu_4+3(G-1)\\sigma^4}{G^2}}
    """
    return M / (4 * eps) * sp.sqrt((mu4 + 3 * (G - 1) * sigma2**2) / G**2)
