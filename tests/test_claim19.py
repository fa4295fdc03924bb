"""Claim 19 (claims.optimizers), the second-moment sweep, and figures F15 and F16."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from claims.optimizers import check_19, ordering_table, paired_interval


def test_paired_interval_is_scipys_paired_t_interval():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 20), rng.normal(0.5, 1.0, 20)
    m, lo, hi, n = paired_interval(a, b)
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (m, n) == (pytest.approx(np.mean(a - b)), 20)
    assert lo == pytest.approx(ci.low, rel=1e-12) and hi == pytest.approx(ci.high, rel=1e-12)


def synthetic(worse_cell=None, seeds=range(12)):
    """A tidy async_optimizers table: GMC's avg ||grad J||^2 below TIC-mask's everywhere, except in
    ``worse_cell`` = (optimizer, H) where it is clearly above."""
    rng = np.random.default_rng(1)
    rows = []
    base = {"gmc": 1.0, "tic_mask": 2.0, "tic_trunc": 1.5, "topr": 1.2}
    for opt in ("sgd", "adam", "adam_clip", "adamw_clip"):
        for H in (4, 16):
            for s in seeds:
                noise = rng.normal(0, 0.05)
                for scheme, v in base.items():
                    if (opt, H) == worse_cell and scheme == "gmc":
                        v = 3.0
                    for d in (0, 64):
                        rows.append({"optimizer": opt, "H": H, "d": d, "seed": s, "scheme": scheme,
                                     "avg_grad_sq": (v + noise) * 1e-3, "final_J": 0.9 - 0.1 * (scheme == "gmc"),
                                     "collapsed": scheme == "gmc" and s == 0, "collapse_frac": 0.5, "J0": 0.05})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("worse", [None, ("adam", 16)])
def test_claim19_fails_exactly_where_gmc_is_significantly_worse(tmp_path, monkeypatch, worse):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    (tmp_path / "sim" / "async_optimizers").mkdir(parents=True)
    synthetic(worse).to_parquet(tmp_path / "sim" / "async_optimizers" / "results.parquet")
    r = check_19()
    assert r.status == ("PASS" if worse is None else "FAIL")
    assert ("GMC worse in 1 of 8 cells (adam H=16)" in r.measured) == (worse is not None)
    assert "reproduced in: " in r.evidence and "adam H=16" in r.evidence
    tab = ordering_table(synthetic(worse))
    assert len(tab) == 8 and (tab["d"] == 64).all()
    assert (tab["topr_J_high"] < 0).all() and tab["collapse_gmc"].iloc[0] == pytest.approx(1 / 12)


def test_claim19_is_an_error_without_results(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    r = check_19()
    assert r.status == "ERROR" and "python -m simulators.sweep async_optimizers" in r.evidence


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    from simulators.sweep import run_sweep

    root = tmp_path_factory.mktemp("res")
    for name in ("second_moment_vs_chi2", "async_optimizers"):
        run_sweep(name, quick=True, out=root / "sim" / f"{name}-quick", progress=False)
    return root


def test_second_moment_sweep_exact_rows_obey_lemma2_and_claim16(quick_results):
    df = pd.read_parquet(quick_results / "sim" / "second_moment_vs_chi2-quick" / "results.parquet")
    ex = df[df["exact"]]
    member = ex[ex["scheme"].isin(["gmc", "tic_trunc"])]
    assert (member["second_moment"] <= member["class_second_moment_bound"] * (1 + 1e-12)).all()
    piv = ex.pivot_table(index=["env", "G", "Delta"], columns="scheme", values="second_moment")
    assert (piv["gmc"] <= piv["is"] * (1 + 1e-12)).all()  # claim 16: GMC's second moment <= IS's
    mc = df[~df["exact"]]
    assert (mc["second_moment_se"] > 0).all() and mc["class_second_moment_bound"].isna().all()
    zero = df[df["Delta"] == 0].pivot_table(index=["env", "G"], columns="scheme", values="second_moment")
    np.testing.assert_allclose(zero["gmc"], zero["is"], rtol=1e-12)  # no delay: every weight is 1


def test_f15_and_f16_draw_every_series_and_caption(quick_results, monkeypatch):
    from figures import f15_second_moment_vs_chi2 as f14
    from figures import f16_async_optimizers as f15
    from figures import style

    monkeypatch.setenv("GMC_RESULTS", str(quick_results))
    df = f14.load()
    fig = f14.plot(df)
    n_env, n_G = df["env"].nunique(), df["G"].nunique()
    per_panel = df["scheme"].nunique()
    assert len(style.series_lines(fig)) == n_env * n_G * per_panel + 2 * n_G  # + the bound in E1 and E2
    assert "GMC/TIC-trunc" in f14.caption(df) and "(quick sweep)" in f14.caption(df)
    loaded = f15.load()
    df = loaded["runs"]
    fig = f15.plot(loaded)
    n_s, n_o = df["scheme"].nunique(), df["optimizer"].nunique()
    paired = len(set(df["scheme"]) - set(f15.NOT_PAIRED))
    assert len(style.series_lines(fig)) == n_o * (2 * n_s + paired)
    cap = f15.caption(loaded)
    assert "GMC-TIC-mask" in cap and "collapsed" in cap
    cm = loaded["cells"]
    pd.testing.assert_frame_equal(cm, f15.cell_means(df))
    g = df[(df["d"] == df["d"].max()) & (df["optimizer"] == "adam") & (df["scheme"] == "gmc") & (df["H"] == 6)]
    row = cm[(cm["optimizer"] == "adam") & (cm["scheme"] == "gmc") & (cm["H"] == 6)].iloc[0]
    assert row["final_J"] == pytest.approx(g["final_J"].mean())
    t = df[(df["d"] == df["d"].max()) & (df["optimizer"] == "adam") & (df["scheme"] == "topr") & (df["H"] == 6)]
    diff = g.set_index("seed")["final_J"] - t.set_index("seed")["final_J"]
    assert row["final_J_vs_topr"] == pytest.approx(diff.mean())
    from studies.report.build import simulator_ordering_paragraph

    assert "reproduce" in simulator_ordering_paragraph(df)


def test_the_ordering_verdict_reads_the_intervals_at_the_longest_horizon():
    import pandas as pd

    from claims.optimizers import ordering_verdict

    def row(opt, H, topr_high, trunc_high, mask_low, coll=0.0):
        return {"optimizer": opt, "H": H, "d": 8, "topr_J_mean": -0.01, "topr_J_high": topr_high,
                "trunc_J_mean": -0.02, "trunc_J_high": trunc_high, "mask_low": mask_low, "collapse_gmc": coll,
                "collapse_topr": 0.0, "collapse_tic_trunc": 0.0, "collapse_tic_mask": 0.0}

    tab = pd.DataFrame([row("sgd", 4, -0.1, -0.1, -1.0), row("sgd", 16, 0.1, -0.1, 0.2),
                        row("adam", 16, -0.001, -0.002, -1.0, coll=0.3)])
    v = ordering_verdict(tab)
    assert v["H"] == 16 and v["d"] == 8
    assert v["reproduced"] == ["adam"]  # sgd's ordering at H = 4 is not the longest horizon's
    assert v["largest_difference"] == pytest.approx(0.02) and v["max_collapse"] == pytest.approx(0.3)
    assert v["claim17_fails"] == [("sgd", 16)]
