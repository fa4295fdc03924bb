"""E4 sweep as data: squared mass-bias against eps on each scheme's extremal law (figure F2)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import theory
from ..sweep_spec import Sweep
from .laws import rare_jump, scarf, two_point_mask

LAWS = {
    "two_point_mask": lambda sigma2, G, eps: two_point_mask(sigma2, eps),
    "scarf": lambda sigma2, G, eps: scarf(sigma2, eps),
    "rare_jump": lambda sigma2, G, eps: rare_jump(G, eps, p=None, sigma2=sigma2),
}
"""law name -> constructor at fixed variance sigma^2 (rare_jump: p from sigma^2, G and eps)."""

WORST_FOR = {"two_point_mask": "tic_mask", "scarf": "tic_trunc", "rare_jump": "gmc"}
"""The scheme whose worst case each law attains."""


def run_sqbias_vs_eps(setting: dict, seeds: list[int]):
    law = LAWS[setting["law"]](setting["sigma2"], setting["G"], setting["eps"])
    G, eps, s2 = setting["G"], setting["eps"], law.sigma2
    m = law.mass_bias(setting["schemes"], G, eps)
    rows = []
    for estimator in setting["schemes"]:
        bound = float(theory.mass_bound(estimator, s2, law.mu4, G, eps))
        for seed in seeds:  # exact: the seed does not enter
            rows.append({"seed": seed, "scheme": estimator, "worst_case_law": WORST_FOR[setting["law"]] == estimator,
                         "mass_bias_exact": m[estimator], "sq_bias_exact": m[estimator] ** 2,
                         "bound": bound, "bound_sq": bound**2, "law_sigma2": s2, "law_mu4": law.mu4,
                         "p_upper": float(law.probs[1]), "w_upper": float(law.values[1])})
    return pd.DataFrame(rows)


_EPS = np.round(np.geomspace(0.005, 1.0, 16), 5).tolist()

SETTINGS = {
    "sqbias_vs_eps": {
        # sigma^2 = 1e-6 shows the eps -> 0 exponents (sigma << eps << 1); 1e-3 the bend where sigma ~ eps
        "full": {"grid": {"law": list(LAWS), "sigma2": [1e-6, 1e-3], "G": [8], "eps": _EPS},
                 "fixed": {"schemes": ["tic_mask", "tic_trunc", "gmc"]}, "seeds": [0]},
        "quick": {"grid": {"law": list(LAWS), "sigma2": [1e-6, 1e-3], "G": [8], "eps": _EPS[::3]},
                  "fixed": {"schemes": ["tic_mask", "tic_trunc", "gmc"]}, "seeds": [0]},
    },
}

SWEEPS = [
    Sweep("sqbias_vs_eps", "E4: exact squared mass-bias (M = 1) against eps on the extremal laws (F2)",
          SETTINGS["sqbias_vs_eps"], run_sqbias_vs_eps,
          {"law": "extremal law (two_point_mask, scarf, rare_jump)", "sigma2": "target Var_b(w)",
           "G": "group size", "eps": "cap 1+eps", "seed": "0 (exact; no randomness)", "scheme": "weighting scheme",
           "worst_case_law": "the law is this scheme's extremal law", "mass_bias_exact": "E[(1/G) sum (w_i - c_i)]",
           "sq_bias_exact": "its square (the squared bias with M = 1)",
           "bound": "THEORY §3's bound on m (Markov for mask, Scarf for trunc and GMC)", "bound_sq": "its square",
           "law_sigma2": "the law's Var_b(w)", "law_mu4": "the law's E_b (w-1)^4",
           "p_upper": "probability of the upper point", "w_upper": "upper ratio value"}),
]
