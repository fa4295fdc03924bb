"""The mechanism study's decision rules (studies.mechanism) on planted outcomes, the arm of a
run's settings, and the replay comparison that lets the committed runs stand for unclipped Adam."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from studies.common.mechanism_rules import m1, paired_difference
from studies.mechanism.analysis import _m2, _m3, _m4, arm_of, m5_verdict, whole_seeds_of


def _runs(cells: dict) -> pd.DataFrame:
    """``{(arm, estimator): (stable flags per seed, final pc per seed)}`` -> a runs frame at d = 64."""
    rows = []
    for (arm, est), (stable, pc) in cells.items():
        for s, (st, p) in enumerate(zip(stable, pc)):
            rows.append({"arm": arm, "estimator": est, "delay": 64, "seed": s, "complete": True, "stable": bool(st),
                         "pc_final": float(p), "pc0": 0.514, "mass_bias": float(p), "source": "mechanism",
                         "run": f"{arm}-{est}-s{s}"})
    return pd.DataFrame(rows)


GOOD, BAD = [True] * 10, [False] * 7 + [True] * 3
RNG = np.random.default_rng(0)


def _pc(level):
    return level + RNG.normal(0, 0.01, 10)


def test_arm_of_reads_the_optimiser_setting():
    assert arm_of({"estimator": "gmc"}) == "adam"  # a committed run (legacy fields: Adam, no clip, no decay)
    assert arm_of({"optimizer": "sgd", "lr": 1e-4}) == "sgd"
    assert arm_of({"optimizer": "adam", "max_grad_norm": 1.0, "weight_decay": 0.0}) == "adamclip"
    assert arm_of({"optimizer": "adamw", "max_grad_norm": 1.0, "weight_decay": 0.01}) == "adamwclip"
    assert arm_of({"estimator": "gmc_cap", "gmc_cap_kappa": 2.0}) == "adamk2"
    assert arm_of({"optimizer": "adamw", "max_grad_norm": None, "weight_decay": 0.1}) == "adamw-clipNone-wd0.1"


def test_m2_confirms_a_planted_rise_in_stability_and_refutes_a_fall():
    up = _runs({("adamclip", "gmc"): (GOOD, _pc(0.6)), ("adam", "gmc"): (BAD, _pc(0.2)),
                ("adamclip", "is"): (GOOD, _pc(0.6)), ("adam", "is"): ([False] * 10, _pc(0.0))})
    r = _m2(up)
    assert r["verdict"] == "CONFIRMED" and r["gmc"]["up"] == 7 and r["is"]["up"] == 10
    assert r["gmc"]["p_mcnemar"] == pytest.approx(2 * 0.5**7)
    down = _runs({("adamclip", "gmc"): (BAD, _pc(0.2)), ("adam", "gmc"): (GOOD, _pc(0.6)),
                  ("adamclip", "is"): (GOOD, _pc(0.6)), ("adam", "is"): ([False] * 10, _pc(0.0))})
    assert _m2(down)["verdict"] == "REFUTED"


def test_m1_m4_m3_on_planted_orderings():
    ok = _runs({("sgd", "gmc"): (GOOD, _pc(0.65)), ("sgd", "tic_mask"): (GOOD, _pc(0.6)),
                ("sgd", "is"): (BAD, _pc(0.2))})
    assert m1(ok)["verdict"] == "CONFIRMED"
    bad = _runs({("sgd", "gmc"): (BAD, _pc(0.2)), ("sgd", "tic_mask"): (GOOD, _pc(0.6)),
                 ("sgd", "is"): (BAD, _pc(0.2))})
    assert m1(bad)["verdict"] == "REFUTED"
    sign = _runs({("adam", "topr"): (GOOD, _pc(0.62)), ("adam", "gmc_topr"): (BAD, _pc(0.2)),
                  ("adam", "topr_gmc"): (GOOD, _pc(0.62))})
    r = _m4(sign)
    assert r["verdict"] == "CONFIRMED" and r["topr_gmc"]["noninferior"] and r["gmc_topr"]["worse"]
    both_bad = _runs({("adam", "topr"): (GOOD, _pc(0.62)), ("adam", "gmc_topr"): (BAD, _pc(0.2)),
                      ("adam", "topr_gmc"): (BAD, _pc(0.1))})
    assert _m4(both_bad)["verdict"] == "REFUTED"
    cap = _runs({("adam", "gmc_cap"): (GOOD, _pc(0.05)), ("adam", "tic_trunc"): (GOOD, _pc(0.5)),
                 ("adamk2", "gmc_cap"): (GOOD, _pc(0.6)), ("adam", "topr"): (GOOD, _pc(0.6))})
    assert _m3(cap)["verdict"] == "CONFIRMED"  # mass bias (planted as pc) below TIC-trunc's, stable
    assert _m3(cap.assign(stable=cap["arm"] != "adam"))["verdict"] == "REFUTED"


def test_whole_seeds_need_every_cell():
    r = _runs({("sgd", "gmc"): (GOOD, _pc(0.6)), ("sgd", "is"): (GOOD, _pc(0.6))})
    r.loc[(r["estimator"] == "is") & (r["seed"] == 3), "complete"] = False
    assert whole_seeds_of(r) == [s for s in range(10) if s != 3]


def test_replay_comparison_ignores_columns_only_the_replay_has(tmp_path):
    from llm_runs.replay import compare_metrics

    ref = tmp_path / "ref.csv"
    new = tmp_path / "new.csv"
    ref.write_text("step,train/loss,perf/step_s\n0,0.5,1.0\n1,0.25,2.0\n")
    new.write_text("step,train/loss,perf/step_s,mech/cos_is\n0,0.5,9.0,0.9\n1,0.25,9.0,0.8\n")
    assert compare_metrics(ref, new, 2) == []
    new.write_text("step,train/loss,perf/step_s,mech/cos_is\n0,0.5,9.0,0.9\n1,0.26,9.0,0.8\n")
    assert compare_metrics(ref, new, 2) == ["step 1 train/loss: '0.25' vs '0.26'"]
    new.write_text("step,perf/step_s\n0,1.0\n1,1.0\n")
    assert compare_metrics(ref, new, 2) == ["columns missing from the replay: ['train/loss']"]


def test_m5_keeps_the_sign_of_the_study_model_or_refutes_it():
    """The larger model's GMC - TOPR (paired by seed) against the study model's sign (-0.456)."""
    worse = _runs({("", "gmc"): (BAD, _pc(0.2)), ("", "topr"): (GOOD, _pc(0.6))})
    assert m5_verdict(-0.456, paired_difference(worse, "", "gmc", "", "topr")) == "CONFIRMED"
    better = _runs({("", "gmc"): (GOOD, _pc(0.7)), ("", "topr"): (GOOD, _pc(0.6))})
    assert m5_verdict(-0.456, paired_difference(better, "", "gmc", "", "topr")) == "REFUTED"
    level = 0.6 + RNG.normal(0, 0.05, 10)
    same = _runs({("", "gmc"): (GOOD, level + RNG.normal(0, 0.05, 10)), ("", "topr"): (GOOD, level)})
    assert m5_verdict(-0.456, paired_difference(same, "", "gmc", "", "topr")) == "INCONCLUSIVE"
    assert m5_verdict(-0.456, {"n": 0, "mean": float("nan"), "low": float("nan"), "high": float("nan")}) == \
        "INCONCLUSIVE"


def test_the_scale_probe_is_absent_until_it_has_run(tmp_path):
    from studies.mechanism.analysis import scale_drift

    assert scale_drift(tmp_path / "scale", tmp_path / "scale_mech") == {}
    (tmp_path / "scale_mech").mkdir()
    assert scale_drift(tmp_path / "scale", tmp_path / "scale_mech") == {}


def test_the_scale_variants_are_absent_until_they_have_run(tmp_path):
    from studies.mechanism.analysis import scale_variants

    assert scale_variants(tmp_path / "scale", tmp_path / "scale_variants") == {}


def test_the_report_quotes_each_verdicts_numbers_and_picks_the_best_variant_once_decided():
    from studies.report.sections.mechanism import variant_pick, verdict_numbers

    runs = _runs({("sgd", "gmc"): (GOOD, _pc(0.65)), ("sgd", "tic_mask"): (GOOD, _pc(0.6)),
                  ("sgd", "is"): (BAD, _pc(0.2)), ("adam", "topr"): (GOOD, _pc(0.62)),
                  ("adam", "gmc_topr"): (BAD, _pc(0.2)), ("adam", "topr_gmc"): (GOOD, _pc(0.61)),
                  ("adam", "gmc_cap"): (BAD, _pc(0.3))})
    r1, m4 = m1(runs), _m4(runs)
    text = verdict_numbers("M1", r1)
    d = r1["gmc_minus_tic_mask"]
    assert text.startswith(f"SGD: GMC stable 10/10; GMC - TIC-mask {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
                           " (n = 10)")
    text = verdict_numbers("M4", m4)
    d = m4["topr_gmc"]
    assert "GMC(+) / TOPR(-) stable 3/10" in text
    assert f"TOPR(+) / GMC(-) stable 10/10, minus TOPR {d['mean']:+.3f} [" in text and abs(d["mean"] + 0.01) < 0.02
    res = {"hypotheses": {"M3": {"verdict": "REFUTED"}, "M4": m4}}
    assert variant_pick(runs, res) == "topr_gmc"
    res["hypotheses"]["M3"]["verdict"] = "NOT DECIDED"
    assert variant_pick(runs, res) is None
