"""Claim 18 at LLM scale (F12): whether the trajectory chi^2 the horizon grid measured follows the
independence prediction 1 + chi^2 = (1 + chi^2_token)^H, so that log(1 + chi^2) grows linearly in H.
The per-H table is F12's (the staleness study's figure, which draws it and quotes this verdict); this module
decides, the study above it reads."""
from __future__ import annotations

import numpy as np
import pandas as pd

AGREE_FACTOR = 2.0
"""The independence prediction holds at an H when the measured 1 + chi^2 (mean over seeds) is
within this factor of the predicted (1 + chi^2_token)^H (mean over seeds)."""


def agrees(ratio: float) -> bool:
    """Whether a measured / predicted ratio of 1 + chi^2 is within :data:`AGREE_FACTOR`."""
    return 1 / AGREE_FACTOR <= ratio <= AGREE_FACTOR


def independence_verdict(tab: pd.DataFrame) -> dict:
    """Whether the independence prediction holds within :data:`AGREE_FACTOR` at every H of the
    horizon grid (the rows whose ``source`` is ``horizon``), the ratios, and the least-squares slopes
    in H of log(1 + chi^2) measured and predicted (claim 18: linear in H)."""
    g = tab[tab["source"] == "horizon"].sort_values("H")
    holds = bool(len(g)) and all(agrees(float(r)) for r in g["ratio"])
    slope = lambda y: float(np.polyfit(g["H"], np.log1p(y), 1)[0]) if len(g) > 1 else float("nan")
    return {"holds": holds, "ratios": dict(zip(g["H"].astype(int), g["ratio"])), "slope_measured": slope(g["chi2"]),
            "slope_predicted": slope(g["pred"]),
            "log1p_token": float(np.log1p(g["chi2_token"]).mean()) if len(g) else float("nan")}
