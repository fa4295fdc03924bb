"""figures/: each figure's plot on a small synthetic table draws the expected series with the values
of the table (F1-F9)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from _figures_data import (  # noqa: F401 (fixtures)
    async_table,
    line,
    llm_df_fixture,
    mod,
    moment_table,
    results_fixture,
    sqbias_table,
    tuned_table,
    write_llm_runs,
)

from figures import style
from schema import results as data

# ----------------------------------------------------------------------------------- plots


def n_series(fig) -> int:
    return len(style.series_lines(fig))


def test_f1_lines(results):
    df = pd.concat([moment_table("G", [2, 4, 8], ["gmc", "tic_mask", "tic_trunc", "is", "snis"], instance=i)
                    for i in ("mild", "rare_arm")])
    fig = mod("f1_bias_vs_G").plot(df)
    # per instance panel: 4 drawn schemes (exact line + MC points, IS has no MC points) + the GMC bound
    assert len(fig.axes) == 2
    assert n_series(fig) == 2 * (4 + 3 + 1)
    x, y = line(fig, "rare_arm", "gmc", "exact")
    exact = df[(df.instance == "rare_arm") & (df.scheme == "gmc")].groupby("G")["bias_norm_exact"].first()
    np.testing.assert_allclose(x, exact.index)
    np.testing.assert_allclose(y, exact.values)
    x, y = line(fig, "mild", "tic_mask", "mc")  # seed mean of the MC points
    mc = df[(df.instance == "mild") & (df.scheme == "tic_mask")].groupby("G")["bias_proj_mc"].mean()
    np.testing.assert_allclose(x, mc.index)
    np.testing.assert_allclose(y, mc.values)


def test_f2_lines(results):
    fig = mod("f2_sqbias_vs_eps").plot(sqbias_table())
    assert n_series(fig) == 3 * 2  # exact + theory slope per scheme
    t = sqbias_table()
    t = t[t.worst_case_law & (t.scheme == "tic_mask")].sort_values("eps")
    x, y = line(fig, "tic_mask", "exact")
    np.testing.assert_allclose(x, t["eps"])
    np.testing.assert_allclose(y, t["sq_bias_exact"])
    x, y = line(fig, "tic_mask", "theory")  # slope read from claim 10's row: -4
    assert np.polyfit(np.log(x), np.log(y), 1)[0] == pytest.approx(-4)
    f2 = mod("f2_sqbias_vs_eps")
    sl = f2.slopes(sqbias_table())
    assert abs(sl["tic_mask"]["slope"] + 4) < 1e-9 and abs(sl["gmc"]["slope"] + 2) < 1e-9


def test_f3_lines(results):
    f3 = mod("f3_tuned_delay_vs_G")
    fig = f3.plot(tuned_table())
    assert n_series(fig) == 2 * 3 * 2  # 2 panels x 3 schemes x (theory, tuned)
    t = tuned_table()
    t = t[(t.scheme == "gmc") & (t.eps == 0.2)].sort_values("G")
    x, y = line(fig, "gmc", "G", "tuned")
    np.testing.assert_allclose(x, t["G"])
    np.testing.assert_allclose(y, t["tuned_delay_term"])
    assert sl_theory(f3) == {"gmc": -0.4, "tic_mask": 0.0, "tic_trunc": 0.0}
    sl = f3.slopes(tuned_table())
    assert abs(sl["G"]["gmc"]["tuned"] + 0.4) < 1e-9 and abs(sl["G"]["tic_mask"]["tuned"]) < 1e-9
    assert abs(sl["eps"]["tic_mask"]["tuned"] + 0.8) < 1e-9


def sl_theory(f3):
    return {s: v["theory"] for s, v in f3.slopes(tuned_table())["G"].items()}


def test_f4_lines():
    schemes = ["gmc", "tic_mask", "is"]
    df = pd.concat([moment_table("Delta", [0.0, 1.0, 2.0], schemes, env=e) for e in ("bandit", "token_mdp")])
    f4 = mod("f4_second_moment_vs_delay")
    fig = f4.plot(df)
    assert n_series(fig) == 2 * (3 + 3 + 1)  # per env: 3 exact lines, 3 Monte Carlo point sets, class bound
    x, y = line(fig, "token_mdp", "is", "exact")
    e = df[(df.env == "token_mdp") & (df.scheme == "is")].groupby("Delta")["second_moment_exact"].first()
    np.testing.assert_allclose(x, e.index)
    np.testing.assert_allclose(y, e.values)
    s = f4.summary(df)["bandit"]
    assert s["is_last"] == pytest.approx(0.1 * 9) and s["class_max_ratio"] == pytest.approx(0.1 / 1.44)


def test_f5_lines():
    f5 = mod("f5_async_sgd")
    df = async_table()
    fig = f5.plot(df)
    # 3 delay panels x 3 schemes; bias panel: realised (gmc, tic_mask; IS bias is 0) + D (gmc, tic_mask)
    assert len(fig.axes) == 4
    assert n_series(fig) == 3 * 3 + 2 + 2
    x, y = line(fig, "d4", "tic_mask")
    st = df[(df.kind == "step") & (df.scheme == "tic_mask") & (df.d == 4)].sort_values("step")
    np.testing.assert_allclose(x, st["step"])
    np.testing.assert_allclose(y, st["grad_sq"])
    bt = f5.bias_table(df)
    assert bt.loc[(bt.scheme == "gmc") & (bt.d == 16), "bias_sq"].item() == pytest.approx(0.017)


def test_f6_lines(llm_df):
    fig = mod("f6_llm_accuracy").plot(llm_df)
    assert len(fig.axes) == 2
    assert n_series(fig) == 3 + 4  # d=0: 3 controlled; d=8: 3 controlled + async GMC
    x, y = line(fig, "d8", "gmc", "controlled")  # seed mean of the held-out accuracy at each evaluation
    ev = llm_df[(llm_df.estimator == "gmc") & (llm_df["mode"] == "controlled") & (llm_df.delay == 8)]
    want = ev.dropna(subset=["eval/heldout_acc"]).groupby("step")["eval/heldout_acc"].mean()
    np.testing.assert_allclose(x, want.index)
    np.testing.assert_allclose(y, want.values)


def test_f7_lines_and_stability(llm_df):
    f7 = mod("f7_llm_final_vs_delay")
    fig = f7.plot(llm_df)
    assert n_series(fig) == 4  # gmc, tic_mask, token_clip controlled + gmc async
    _, y = line(fig, "gmc", "controlled")  # mean final accuracy per delay, complete runs
    sm0 = data.run_summary(llm_df)
    want = (sm0[sm0.complete & (sm0.estimator == "gmc") & (sm0["mode"] == "controlled")]
            .groupby("delay")["acc_final"].mean())
    np.testing.assert_allclose(y, want.values)
    sm = data.run_summary(llm_df)
    bad = sm[~sm["stable"]]
    assert list(zip(bad["estimator"], bad["delay"], bad["seed"])) == [("tic_mask", 8, 1)]
    v = f7.verdict_at(f7.table(llm_df), 8)
    assert ("tic_mask", "controlled", 1, 2) in v["unstable"]
    assert "tic_mask" not in [e for e, *_ in v["ranking"]]


def test_f8_lines(llm_df):
    fig = mod("f8_llm_diagnostics").plot(llm_df)
    assert len(fig.axes) == 4
    assert n_series(fig) == 4 * 4  # 4 diagnostics x (3 controlled + async GMC)
    _, y = line(fig, "stale/mass_cap_frac", "gmc", "controlled")  # the synthetic runs log 0.01 d at every step
    np.testing.assert_allclose(y, [0.0, 0.08])
    _, y = line(fig, "stale/ess", "tic_mask", "controlled")
    np.testing.assert_allclose(y, [1.0, 0.92])


def test_unstable_by_accuracy_drop(results):
    root = results / "llm" / "sweep"
    write_llm_runs(root, estimators=("gmc",), delays=(0,), seeds=(0,), async_run=False, unstable=("none", 0, 0))
    run = next(root.iterdir())
    path = next(p for p in run.iterdir() if p.name.startswith("metrics"))
    m = data.read_metrics_csv(path)
    acc0 = m.loc[0, "eval/heldout_acc"]
    drop = data.drop_threshold(acc0, 200)
    assert drop == max(data.UNSTABLE_DROP, 3 * math.sqrt(acc0 * (1 - acc0) / 200))
    for delta, stable in ((drop + 0.01, False), (drop - 0.01, True)):
        m.loc[m["step"] == 20, "eval/heldout_acc"] = acc0 - delta
        m.to_csv(path, index=False)
        sm = data.run_summary(data.read_llm_runs())
        assert sm["stable"].item() is stable and sm["acc_drop"].item() is not stable and not sm["nonfinite"].item()
    # a small held-out split widens the threshold: 3 binomial standard errors
    assert data.drop_threshold(0.3, 20) == pytest.approx(3 * math.sqrt(0.21 / 20))


def peers_table() -> pd.DataFrame:
    rows = []
    # (scheme, level, B, in_class, bias, second moment) at each Delta: gmc dominated by "topr" at Delta = 4
    spec = [("gmc", "trajectory", 1, True, 0.05, 0.20), ("tic_mask", "trajectory", 1, True, 0.20, 0.02),
            ("is", "trajectory", 1, False, 0.0, 1.0), ("topr", "trajectory", 1, True, 0.04, 0.10),
            ("seq_tis_bn", "trajectory", 8, False, 0.06, 0.25), ("cispo", "token", 1, None, 0.10, 0.05)]
    for env in ("bandit", "token_mdp"):
        for D in (0.0, 1.0, 4.0):
            for s, level, B, member, bias, sm in spec:
                rows.append({"env": env, "Delta": D, "G": 8, "eps": 0.2, "scheme": s, "level": level,
                             "batch_groups": B, "in_class": member, "bias_norm": bias * D, "second_moment": sm,
                             "bias_norm_se": 1e-3 if B > 1 else 0.0, "second_moment_se": 0.0, "seed": 0})
    return pd.DataFrame(rows)


def test_f9_points_frontier_and_summary():
    m = mod("f9_peers_frontier")
    df = peers_table()
    df["key"] = np.where(df["batch_groups"] > 1, df["scheme"] + " (B=" + df["batch_groups"].astype(str) + ")",
                         df["scheme"])
    fig = m.plot(df)
    lines = style.series_lines(fig)
    assert len(lines) == 2 * 2 * (6 + 1)  # 2 envs x 2 delays (1, 4) x (6 points + frontier)
    gmc = next(ln for ln in lines if ln.get_gid() == "series:bandit:4.0:gmc")
    np.testing.assert_allclose([gmc.get_xdata()[0], gmc.get_ydata()[0]], [0.20, 0.20])  # plotted = the table
    s = m.summary(df)["bandit"]
    assert s["Delta"] == 4.0 and not s["gmc_on_frontier"] and s["gmc_dominated_by"] == ["topr"]
    assert set(s["frontier"]) == {"tic_mask", "is", "topr", "cispo"}
    assert "dominated by topr" in m.caption(df)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_f9_caption_names_the_other_delays_where_gmc_is_dominated():
    m = mod("f9_peers_frontier")
    df = peers_table()
    df["key"] = df["scheme"].where(df["batch_groups"] == 1, df["scheme"] + " (B=8)")
    s = m.summary(df)["token_mdp"]
    assert s["gmc_dominated_at"] == {1.0: ["topr"]}  # the largest delay (4) is reported separately
    assert "dominated only at Delta = 1 (by topr)" in m.caption(df)
