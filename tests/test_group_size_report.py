"""The group-size study drawn and reported: F26's boundaries, G3 cell and Clopper-Pearson share intervals, the
report's verdict rows, the narrative's G3 line and the reading of G3 and G4 that G5 allows."""
from __future__ import annotations

import numpy as np
import pytest


def test_f26_draws_the_boundaries_and_the_g3_cell_as_the_verdicts_file_holds_them():
    import matplotlib.pyplot as plt

    from figures import style
    from studies.group_size.figures import f26_boundary_vs_g as f26

    v = {"runs": 40, "G3": {"why": "not yet run: G3"}, "G4": {"verdict": "INCONCLUSIVE"},
         "boundaries": [{"estimator": e, "G": G, "seeds": [0, 1], "boundary": b * G, "censored": None if e == "gmc"
                         else "right"} for e, b in (("gmc", 0.001), ("tic_trunc", 0.002)) for G in (4, 8, 16, 32)],
         "cells": [{"level": f26.G3_LEVEL, "G": G, "B": 128 // G, "estimator": "gmc", "n": 5,
                    "stable_share": s} for G, s in ((4, 0.0), (8, 0.2), (16, 0.6), (32, 1.0))]
         + [{"level": "adamclip3e-05", "G": 4, "B": 32, "estimator": "gmc", "n": 5, "stable_share": 0.4}]}
    fig = f26.plot(f26.with_share_intervals(v))
    lines = {ln.get_gid(): ln for ln in style.series_lines(fig)}
    assert set(lines) == {"series:boundary:gmc", "series:boundary:tic_trunc", "series:stable-share:gmc"}
    np.testing.assert_allclose(lines["series:boundary:gmc"].get_ydata(), [0.004, 0.008, 0.016, 0.032])
    np.testing.assert_allclose(lines["series:stable-share:gmc"].get_ydata(), [0.0, 0.2, 0.6, 1.0])  # G3's level only
    assert "2 at 8 boundaries" in fig._suptitle.get_text()
    assert "provisional: G3 not yet decided" in f26.caption(v)
    plt.close(fig)


def test_f26_share_intervals_are_clopper_pearson_from_scipy():
    """with_share_intervals: each cell's exact binomial 95% interval, here 3 of 5 runs, against the
    Clopper-Pearson bounds as beta quantiles (scipy.stats.beta; float64 root-finding agrees to 1e-9)."""
    from scipy import stats as st

    from studies.group_size.figures import f26_boundary_vs_g as f26

    v = {"runs": 5, "cells": [{"level": f26.G3_LEVEL, "G": 4, "B": 32, "estimator": "gmc", "n": 5,
                               "stable_share": 0.6}]}
    c = f26.with_share_intervals(v)["cells"][0]
    assert c["share_low"] == pytest.approx(st.beta.ppf(0.025, 3, 3), rel=1e-9)
    assert c["share_high"] == pytest.approx(st.beta.ppf(0.975, 4, 2), rel=1e-9)
    assert "share_low" not in v["cells"][0]  # the verdicts read are left as they are


def test_the_report_rows_give_every_decided_hypothesis_its_numbers():
    """An INCONCLUSIVE or REFUTED verdict is shown with the numbers that decided it, not an empty cell; a
    hypothesis not yet run shows why."""
    from studies.report.sections.group_size import verdict_rows

    end = {"boundary": 0.05, "censored": "right"}
    v = {"G3": {"verdict": "INCONCLUSIVE", "why": "not yet run: seeds 0-9"},
         "G4": {"verdict": "INCONCLUSIVE", "gmc": {"G4": end, "G32": {"boundary": 0.04, "censored": None},
                                                    "difference": -0.01, "ci": [-0.03, 0.02]}},
         "G5": {"verdict": "INCONCLUSIVE", "margin": 0.03, "per_G": {"32": {"mean": -0.08, "ci": [-0.15, -0.02]}}},
         "G7": {"verdict": "EXPLORATORY", "corrections": {"gmc": {"slope": None}, "tic_mask": {"slope": -0.77}}}}
    rows = {r.split(" | ")[0].strip("| "): r for r in verdict_rows(v)[2:]}
    assert "not yet run: seeds 0-9" in rows["G3"]
    assert "G = 4 0.05 (right-censored), G = 32 0.04; G = 32 - G = 4: -0.01 [-0.03, 0.02]" in rows["G4"]
    assert "G = 32 -0.08 [-0.15, -0.02] (margin 0.03)" in rows["G5"]
    assert "tic_mask -0.77" in rows["G7"] and "gmc" not in rows["G7"]
    assert rows["G1"].endswith("| n/a |  |")  # no verdict at all: nothing invented


def test_the_narrative_words_g3_s_cells_once_it_is_decided():
    from studies.report.findings import _g3_line

    assert _g3_line({"G3": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == ""
    v = {"G3": {"verdict": "REFUTED", "seeds": 10, "shares_gmc": [0.5, 0.2, 0.2, 0.0],
                "shares_tic_trunc": [1.0, 0.7, 0.6, 0.5], "slope_gmc": -0.15, "slope_gmc_ci": [-0.26, -0.04]},
         "cells": [{"estimator": "gmc", "level": "adamclip0.0001", "G": 32, "B": 16, "n": 5, "stable_share": 1.0},
                   {"estimator": "gmc", "level": "adamclip0.0001", "G": 32, "B": 4, "n": 10, "stable_share": 0.0}]}
    line = _g3_line(v)
    assert "GMC held in 5, 2, 2, 0 of 10 runs at G = 4, 8, 16, 32 and TIC-trunc in 10, 7, 6, 5" in line
    assert "[-0.26, -0.04]" in line and line.endswith("GMC held in 5 of 5")


def test_the_report_reads_g3_and_g4_as_the_g5_rule_allows():
    """Only a CONFIRMED G5 lets G3's and G4's differences be read as staleness effects (the pre-registration's
    rule); otherwise the report says the group size changes learning at d = 0 too."""
    from studies.report.sections.group_size import g5_reading

    assert g5_reading({"G5": {"verdict": "INCONCLUSIVE", "why": "not yet run"}}) == []
    held = {"4": [5, 5], "32": [5, 5]}
    text = g5_reading({"G5": {"verdict": "INCONCLUSIVE", "per_G": {}, "d0_held": held}})[0]
    assert "not read as staleness effects alone" in text and "5 of 5 at G = 4, 5 of 5 at G = 32" in text
    assert "read as staleness effects." in g5_reading({"G5": {"verdict": "CONFIRMED", "per_G": {}}})[0]
