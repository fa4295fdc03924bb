"""What the drift test modules share (tests/test_drift_reader.py, test_drift_map.py, test_drift_verdicts.py): a
synthetic metrics table whose KL grows after the delay (:func:`_table`) and synthetic level runs of GMC under SGD
and Adam + clip (:func:`_runs`)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def _table(n=100, d=10):
    steps = np.arange(n)
    kl = np.where(steps < d, 0.0, 0.01 * (1 + (steps - d)))  # grows after the delay
    return pd.DataFrame({"step": steps, "drift/kl": kl, "stale/chi2": 2 * kl, "drift/ess_ratio": 1 - kl,
                         "drift/abs_log_w_median": kl / 2})


def _runs(shares_sgd, shares_clip, drifts_sgd, drifts_clip, n=5):
    rows = []
    for fam, shares, drifts in (("sgd", shares_sgd, drifts_sgd), ("adamclip", shares_clip, drifts_clip)):
        for i, (share, d) in enumerate(zip(shares, drifts)):
            level = f"{fam}{(i + 1) * 1e-4:g}"
            for s in range(n):
                rows.append({"level": level, "family": fam, "estimator": "gmc", "delay": 64, "seed": s,
                             "complete": True, "stable": s < round(share * n), "kl_early": d, "pc_final": 0.5})
    return pd.DataFrame(rows)
