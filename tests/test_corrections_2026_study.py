"""The 2026 corrections' mini-study on the drift map (docs/PREREGISTRATION-2026.md): its grid is the
pre-registered one, and N1-N3 decide synthetic runs by their stated rules."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from estimators.losses import CORRECTIONS_2026


def test_the_grid_is_the_pre_registered_one():
    from studies.corrections_2026.analysis import LEVELS, SEEDS
    from studies.grids import GRIDS

    cells = GRIDS["corrections_2026"].cells()
    assert len(cells) == 7 * 3 * 5 and {c.seed for c in cells} == set(SEEDS)
    assert {c.overrides["estimator"] for c in cells} == set(CORRECTIONS_2026)
    assert all(c.overrides["delay"] == 64 and c.overrides["drift_diagnostics"] for c in cells)
    levels = {("sgd" if c.overrides.get("optimizer") == "sgd" else "adamclip") + f"{c.overrides['lr']:g}"
              for c in cells}
    assert levels == set(LEVELS)
    assert all(c.overrides.get("max_grad_norm") == 1.0 for c in cells if c.overrides.get("optimizer") != "sgd")


def _runs(stable_of, drift_of=lambda est, level: {"adamclip3e-05": 0.01, "adamclip0.0001": 0.05,
                                                  "sgd0.0003": 0.02}[level]):
    rows = []
    for est in (*CORRECTIONS_2026, "gmc", "topr", "tic_trunc", "is"):
        for level in ("adamclip3e-05", "adamclip0.0001", "sgd0.0003"):
            for seed in range(5):
                ok = stable_of(est, level, seed)
                rows.append({"run": f"{level}-{est}-s{seed}", "estimator": est, "level": level, "seed": seed,
                             "family": "sgd" if level.startswith("sgd") else "adamclip", "delay": 64,
                             "stable": ok, "complete": True, "pc0": 0.5, "pc_final": 0.6 + 0.01 * seed if ok else 0.0,
                             "kl_early": drift_of(est, level) * (1 + 0.01 * seed)})
    return pd.DataFrame(rows)


def test_n1_confirms_refutes_and_leaves_undecided_by_the_stated_rule():
    from studies.corrections_2026.analysis import analyse

    def stable(est, level, seed):
        if est == "gmc":
            return level != "adamclip0.0001"  # GMC fails at Adam + clip 1e-4 only
        if est == "p3o":
            return level != "sgd0.0003"  # fails where GMC holds: significantly worse (5 vs 0)
        if est == "dispo":
            return seed < 3  # 3 of 5 where GMC has 0: not decided (power)
        return True

    out = analyse(_runs(stable))
    n1 = out["N1"]
    assert n1["ctpo"]["verdict"] == "CONFIRMED" and n1["minpro"]["verdict"] == "CONFIRMED"
    assert n1["p3o"]["verdict"] == "REFUTED" and n1["p3o"]["levels"]["sgd0.0003"]["worse_holm"]
    assert n1["dispo"]["verdict"] == "INCONCLUSIVE"
    n2 = out["N2"]
    assert n2["ctpo"]["adamclip0.0001"]["label"] == "learned"
    assert n2["p3o"]["sgd0.0003"]["label"] == "not held"
    assert n2["ctpo"]["sgd0.0003"]["minus_topr"] == pytest.approx(0.0)  # identical synthetic pcs, paired by seed


def test_n3_places_a_correction_that_never_fails_beyond_gmcs_boundary():
    from studies.corrections_2026.analysis import analyse

    def stable(est, level, seed):
        return not (est in ("gmc", "oapl") and level == "adamclip0.0001")

    def drift(est, level):
        return {"adamclip3e-05": 0.01, "adamclip0.0001": 0.2 if est == "ctpo" else 0.05, "sgd0.0003": 0.02}[level]

    n3 = analyse(_runs(stable, drift))["N3"]
    assert n3["ctpo"]["adamclip"]["verdict"] == "CONFIRMED"  # held to KL 0.2, GMC failed by 0.05
    assert n3["oapl"]["adamclip"]["verdict"] == "INCONCLUSIVE"  # fails where GMC fails
    assert n3["ctpo"]["sgd"]["verdict"] == "INCONCLUSIVE"  # neither fails under SGD's one level


def test_a_missing_seed_leaves_every_hypothesis_not_yet_run():
    from studies.corrections_2026.analysis import analyse

    runs = _runs(lambda *a: True)
    out = analyse(runs[~((runs["estimator"] == "oapl") & (runs["seed"] == 4) & (runs["level"] == "sgd0.0003"))])
    assert all(out[h]["why"].startswith("not yet run: 1 cells") for h in ("N1", "N2", "N3"))
    assert "oapl at sgd0.0003 (4 of 5 seeds)" in out["N1"]["why"]


def test_the_report_section_shows_the_verdicts_or_the_cells_so_far_and_the_departures(tmp_path, monkeypatch):
    import json

    from studies.corrections_2026.analysis import analyse
    from studies.report.sections import corrections_2026 as section

    path = tmp_path / "verdicts.json"
    monkeypatch.setattr(section, "verdicts_path", lambda: path)
    assert "Not yet decided" in "\n".join(section.corrections_2026_section())
    runs = _runs(lambda est, level, seed: not (est == "gmc" and level == "adamclip0.0001"))
    path.write_text(json.dumps(analyse(runs), default=float))
    md = "\n".join(section.corrections_2026_section())
    assert "(in progress)" not in md and "| ctpo | CONFIRMED (predicted beyond GMC at: adamclip3e-05" in md
    assert "`claims.drift`; no such module exists" in md and "| gmc | 5/5 stable" in md
    part = runs[runs["seed"] < 4]
    path.write_text(json.dumps(analyse(part), default=float))
    md = "\n".join(section.corrections_2026_section())
    assert "(in progress)" in md and "N1-N3: INCONCLUSIVE (not yet run" in md and "4/4 stable" in md


def test_n3_reads_censored_boundaries_as_limits():
    """A correction that fails at every level (left-censored: its boundary is at most its smallest drift) is never
    placed beyond GMC's, however far its runs drifted; one that fails at no level is beyond a GMC that fails
    at every level when its largest drift exceeds GMC's smallest."""
    from studies.corrections_2026.analysis import analyse, limits

    assert limits({"boundary": 0.2, "censored": "left", "low": 0.1, "high": 0.3}) == (-math.inf, 0.2)
    assert limits({"boundary": 0.2, "censored": "right", "low": None, "high": None}) == (0.2, math.inf)
    assert limits(None) == (-math.inf, math.inf)

    def stable(est, level, seed):
        if est == "ctpo":
            return level.startswith("sgd")  # fails at both Adam levels, far out on the KL axis
        return not (est == "gmc" and level != "adamclip3e-05")  # GMC fails at 1e-4 and under SGD

    def drift(est, level):
        if est == "ctpo" and level.startswith("adam"):
            return 0.3 if level == "adamclip3e-05" else 0.8
        return {"adamclip3e-05": 0.01, "adamclip0.0001": 0.05, "sgd0.0003": 0.04 if est == "dispo" else 0.02}[level]

    n3 = analyse(_runs(stable, drift))["N3"]
    assert n3["ctpo"]["adamclip"]["verdict"] == "INCONCLUSIVE"  # left-censored at 0.3: nothing beyond GMC's
    assert n3["dispo"]["sgd"]["verdict"] == "CONFIRMED"  # held at KL 0.04 where GMC failed by 0.02
    assert n3["minpro"]["sgd"]["verdict"] == "INCONCLUSIVE"  # held at 0.02, GMC failed at 0.02: no order
