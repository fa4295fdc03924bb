"""figures/: each figure's plot on a small synthetic table draws the expected series with the values
of the table; load() names the missing results and the command that makes them; the run-folder
reader refuses corrupted runs; the report renders from synthetic inputs; no figure module
imports torch or a simulator."""
from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from figures import style
from schema import results as data

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["f1_bias_vs_G", "f2_sqbias_vs_eps", "f3_tuned_delay_vs_G", "f4_second_moment_vs_delay", "f5_async_sgd",
           "f6_llm_accuracy", "f7_llm_final_vs_delay", "f8_llm_diagnostics", "f9_peers_frontier",
           "studies.staleness.figures.f10_study_differences", "studies.staleness.figures.f11_study_pc_vs_delay",
           "studies.staleness.figures.f12_chi2_vs_horizon", "studies.staleness.figures.f13_theory_in_the_loop",
           "f15_second_moment_vs_chi2", "f16_async_optimizers", "studies.drift.figures.f24_drift_map"]
"""Toolkit figures by name, the studies' by module path (as :func:`figures.registry.fig_module` takes them)."""


def mod(name):
    return importlib.import_module(name if "." in name else f"figures.{name}")


# ----------------------------------------------------------------------------------- synthetic results


def moment_table(key: str, values, schemes, env="bandit", instance="mild", seeds=(0, 1)) -> pd.DataFrame:
    """A bias_vs_G / second_moment_vs_delay-like table: key in ("G", "Delta")."""
    rows = []
    for v in values:
        for s in schemes:
            bias = {"is": 0.0, "tic_mask": 0.15, "tic_trunc": 0.03}.get(s, 0.01 / v if key == "G" else 0.01 * v)
            for seed in seeds:
                rows.append({"env": env, "instance": instance, key: v, "G": v if key == "G" else 8, "eps": 0.2,
                             "Delta": v if key == "Delta" else 0.5, "seed": seed, "scheme": s,
                             "bias_norm_exact": bias, "bias_proj_mc": np.nan if bias == 0 else bias + 1e-4 * seed,
                             "bias_proj_mc_se": np.nan if bias == 0 else 1e-3, "bias_norm_mc": 1e-3,
                             "bias_norm_mc_se": 1e-3, "gmc_rate_bound": 0.05 / (v if key == "G" else 8),
                             "second_moment_exact": 0.1 * (1 + v) ** (2 if s == "is" else 0),
                             "second_moment_mc": 0.1, "second_moment_mc_se": 0.01, "class_second_moment_bound": 1.44})
    return pd.DataFrame(rows)


def sqbias_table() -> pd.DataFrame:
    rows = []
    law_of = {"tic_mask": "two_point_mask", "tic_trunc": "scarf", "gmc": "rare_jump"}
    for eps in np.geomspace(0.02, 1.0, 8):
        for law in law_of.values():
            for s, slope in (("tic_mask", -4), ("tic_trunc", -2), ("gmc", -2)):
                rows.append({"law": law, "sigma2": 1e-3, "G": 8, "eps": eps, "seed": 0, "scheme": s,
                             "worst_case_law": law_of[s] == law, "sq_bias_exact": 1e-6 * eps ** slope,
                             "bound_sq": 2e-6 * eps ** slope, "law_sigma2": 1e-3})
    return pd.DataFrame(rows)


def tuned_table() -> pd.DataFrame:
    rows = []
    for s, kG, ke in (("gmc", -0.4, -0.4), ("tic_mask", 0.0, -0.8), ("tic_trunc", 0.0, -0.4)):
        for G in (2, 4, 8, 16, 64):
            for eps in (0.001, 0.01, 0.2):
                v = G ** kG * eps ** ke
                rows.append({"scheme": s, "G": G, "eps": eps, "a": 2.0, "T": 1000.0, "d": 4.0,
                             "tuned_delay_term": v, "closed_form": v})
    return pd.DataFrame(rows)


def async_table(schemes=("gmc", "tic_mask", "is"), delays=(0, 4, 16), T=5, seeds=(0, 1)) -> pd.DataFrame:
    runs, steps = [], []
    for s in schemes:
        for d in delays:
            for seed in seeds:
                runs.append({"kind": "run", "env": "bandit", "eps": 0.2, "scheme": s, "d": d, "seed": seed, "G": 8,
                             "avg_grad_sq": 0.02, "final_J": 0.9, "avg_bias_sq": 0.0 if s == "is" else 1e-3 * (d + 1),
                             "D_bound": 0.0 if s == "is" else 1.0 * (d + 1), "bias_le_D": True,
                             "step_bound_violations": 0, "max_ghat_norm": 0.5, "mean_ghat_norm": 0.1})
            for t in range(T):
                steps.append({"kind": "step", "env": "bandit", "eps": 0.2, "scheme": s, "d": d, "step": t,
                              "grad_sq": 0.01 + 0.001 * t, "grad_sq_se": 0.001})
    return pd.DataFrame(runs + steps)


from llm_runs.metrics import COLUMNS as LLM_COLUMNS


def write_llm_runs(root: Path, estimators=("gmc", "tic_mask", "token_clip"), delays=(0, 8), seeds=(0, 1), steps=20,
                   async_run=True, unstable=("tic_mask", 8, 1)):
    """Synthetic run folders ``root/<run>/{config.json, metrics.csv}`` shaped like llm_runs.train's."""
    specs = [(e, d, s, "controlled") for e in estimators for d in delays for s in seeds]
    if async_run:
        specs.append(("gmc", max(delays), 0, "async"))
    for k, (est, d, seed, mode) in enumerate(specs):
        run = root / f"{est}-{mode}-d{d}-s{seed}"
        run.mkdir(parents=True)
        cfg = {"estimator": est, "delay": d, "seed": seed, "mode": mode, "eps": 0.2, "steps": steps, "group_size": 8,
               "heldout_size": 200}
        (run / "config.json").write_text(json.dumps({"config": cfg, "created": "synthetic"}))
        rng = np.random.default_rng(k)
        rows = []
        for t in range(steps + 1):
            bad = (est, d, seed) == tuple(unstable) and t >= steps // 2
            acc = 0.3 + 0.02 * t / (1 + d / 8) + 0.01 * rng.standard_normal()
            rows.append({"step": t, "train/reward_mean": acc, "train/loss": math.nan if bad else -0.1,
                         "train/grad_norm": math.nan if bad else 1.0, "train/update_skipped": 0,
                         "stale/ess": 1 - 0.01 * d, "stale/mass_cap_frac": 0.01 * d, "stale/clip_frac": 0.02 * d,
                         "stale/log_ratio_abs_mean": 0.05 * d, "eval/heldout_acc": acc if t % 5 == 0 else math.nan})
        pd.DataFrame(rows, columns=LLM_COLUMNS).to_csv(run / "metrics.csv", index=False)
        if k % 3 == 0:
            (run / "summary.json").write_text("{}")
    return specs


def write_claims(root: Path, failing=()):
    """A synthetic claims.json; claims 10 and 12 carry the exponents the figures read."""
    rows = [{"id": i, "title": f"claim {i}", "theory_ref": "§5", "kind": "numeric", "expected": 1.0,
             "measured": 1.0, "tolerance": 0.1, "status": "FAIL" if i in failing else "PASS", "seconds": 0.1,
             "evidence": "synthetic"} for i in range(1, 19)]
    rows[9]["measured"] = {"slope": {"mask": "-2", "trunc": "-1", "gmc": "-1"},
                           "squared": {"mask": "-4", "trunc": "-2"}}
    rows[11]["measured"] = {"G": {"gmc": "-2/5", "tic_mask": "0"}, "epsilon": {"gmc": "-2/5", "tic_mask": "-4/5"}}
    rows[11]["tolerance"] = {"symbolic": 0, "numeric slope": 1e-3, "min value rel": 1e-6}
    (root / "verify").mkdir(parents=True, exist_ok=True)
    (root / "verify" / "claims.json").write_text(json.dumps({"format": "gmc-grpo-claims/1", "complete": True,
                                                             "quick": False, "claims": rows}))


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    write_claims(tmp_path)
    return tmp_path


def line(fig, *parts):
    """The one series tagged ``series:<parts>``, as (x, y) arrays."""
    gid = ":".join(("series",) + parts)
    found = [ln for ln in style.series_lines(fig) if ln.get_gid() == gid]
    assert len(found) == 1, (gid, [ln.get_gid() for ln in style.series_lines(fig)])
    return np.asarray(found[0].get_xdata(), float), np.asarray(found[0].get_ydata(), float)


@pytest.fixture
def llm_df(results):
    write_llm_runs(results / "llm" / "sweep_quick")
    return data.read_llm_runs()


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


# ----------------------------------------------------------------------------------- load() errors


@pytest.mark.parametrize("name", MODULES)
def test_load_names_missing_results_and_command(name, results):
    m = mod(name)
    with pytest.raises(data.MissingResults) as e:
        m.load()
    msg = str(e.value)
    assert str(results) in msg
    assert any(s.command in msg for s in m.SOURCES)
    assert "python -m" in msg


def test_full_results_preferred_over_quick(results):
    for sub, v in (("bias_vs_G-quick", 1.0), ("bias_vs_G", 2.0)):
        (results / "sim" / sub).mkdir(parents=True)
        pd.DataFrame({"x": [v]}).to_parquet(results / "sim" / sub / "results.parquet")
    df = data.read_sim(data.Sim("bias_vs_G"))
    assert df["x"].item() == 2.0 and not df.attrs["quick"]


def test_llm_full_sweep_needs_a_finished_run(results):
    write_llm_runs(results / "llm" / "sweep_quick", estimators=("gmc",), delays=(0,), seeds=(0,), async_run=False)
    (results / "llm" / "sweep" / "partial").mkdir(parents=True)  # no metrics: not a run
    assert data.LLM.find() == results / "llm" / "sweep_quick"


# ----------------------------------------------------------------------------------- report


def test_report_renders_from_synthetic_inputs(results, tmp_path):
    from claims.abstract import write_abstract
    from studies import report

    write_claims(results, failing=(8,))
    write_llm_runs(results / "llm" / "sweep_quick")
    for sub, df in (("bias_vs_G-quick", moment_table("G", [2, 4, 8], ["gmc", "tic_mask", "tic_trunc", "is"])),
                    ("sqbias_vs_eps-quick", sqbias_table()), ("tuned_delay", tuned_table())):
        (results / "sim" / sub).mkdir(parents=True)
        df.to_parquet(results / "sim" / sub / "results.parquet")
    write_abstract()  # the verdicts are computed by claims; the report only renders them
    out = tmp_path / "figs"
    md_path, html_path = report.write_report(figures_out=out, draw_missing=True)
    md, html = md_path.read_text(), html_path.read_text()
    assert md_path == results / "REPORT.md" and html_path == results / "REPORT.html"
    for i in (1, 8, 18):
        assert f"| {i} | claim {i} |" in md
    assert "FAIL" in md and "<table>" in html and "<img" in html
    # figures with results are drawn and shown; those without are named with their command
    assert (out / "f1_bias_vs_G.png").exists() and "f1_bias_vs_G.png" in md
    assert "python -m simulators.sweep async_sgd" in md
    # a verdict per abstract claim; claim 8 failed, so the G-claim is not confirmed
    assert md.count("**Verdict") == 7
    g_claim = md.split("bias introduced by group rescaling")[1].split("**Verdict")[1].split("\n")[0]
    assert "not confirmed" in g_claim.lower() and "claim 8" in g_claim.lower()
    assert "GMC" in md and "unstable" in md


def test_markdown_converter():
    from figures.mdhtml import to_html

    html = to_html("# T\n\nsome *x* and **y** `z` [a](b.md)\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n- one\n- two\n\n"
                   "![alt](p.png)\n")
    assert "<h1" in html and "<em>x</em>" in html and "<strong>y</strong>" in html and "<code>z</code>" in html
    assert "<td>1</td>" in html and "<li>one</li>" in html and '<img src="p.png" alt="alt"' in html
    assert '<a href="b.md">a</a>' in html
    assert "<strong>" not in to_html(r"sigma2\*\*2\*(3\*G - 3))/G\*\*3") and "&#42;" in to_html(r"a\*b")


def test_no_torch_and_no_simulator_imported():
    """The figures import no producer: of the LLM track only its lazy package and the run tables."""
    code = ("import sys; import figures.__main__, figures.registry\n"
            + "".join(f"import {m if '.' in m else 'figures.' + m}\n" for m in MODULES)
            + "tables = ('llm_runs', 'grids.run_table', 'grids.mechanism_table')\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'simulators', 'llm_runs', 'transformers')\n"
            "       and m not in tables]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


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


# ----------------------------------------------------------------------------------- the run-folder reader


def _one_run(results):
    write_llm_runs(results / "llm" / "sweep", estimators=("gmc",), delays=(0,), seeds=(0,), async_run=False,
                   unstable=("none", 0, 0))
    return next((results / "llm" / "sweep").iterdir())


def test_reader_refuses_duplicated_steps(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + lines[3:6]))  # steps 2..4 twice, as two trainers on one folder write
    with pytest.raises(ValueError, match=r"metrics.csv: step\(s\) \[2, 3, 4\] appear more than once"):
        data.read_llm_runs()


def test_reader_refuses_missing_steps(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[5:]))
    with pytest.raises(ValueError, match="missing \\[3\\]"):
        data.read_run(run)


def test_reader_names_file_and_line_of_a_garbage_line(results):
    run = _one_run(results)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = "3,abc" + lines[4][lines[4].index(",", 2):]
    path.write_text("".join(lines))
    with pytest.raises(ValueError, match=f"{path}, line 5: not a number"):
        data.read_run(run)
    path.write_text("".join(lines[:4]) + "garbage\n")
    with pytest.raises(ValueError, match=f"{path}, line 5: 1 fields"):
        data.read_run(run)


def test_reader_names_a_truncated_config(results):
    run = _one_run(results)
    cfg = run / "config.json"
    cfg.write_text(cfg.read_text()[:25])
    with pytest.raises(ValueError, match=f"{cfg}: not valid JSON \\(line 1"):
        data.read_llm_runs()


def test_async_run_placed_at_its_staleness_bound():
    s = data.run_settings({"estimator": "gmc", "mode": "async", "delay": 0, "max_staleness": 8})
    assert s["delay"] == 8 and s["mode"] == "async"
    assert data.run_settings({"estimator": "gmc", "delay": 4, "max_staleness": 8})["delay"] == 4


def test_every_figure_module_is_drawn_by_the_command_that_draws_them_all():
    """Each ``fN_*.py`` of the toolkit's figures and of a study's ``figures/`` is in ``python -m studies.figures``'s
    list (the GPU study's, drawn by the report, aside), and the toolkit's command lists none of a study's."""
    from figures.registry import FIGURES as TOOLKIT
    from studies.figures import FIGURES
    from studies.gpu.figures import GPU_FIGURE

    found = {f"figures.{p.stem}" for p in (ROOT / "figures").glob("f[0-9]*_*.py")}
    found |= {".".join(p.relative_to(ROOT).with_suffix("").parts)
              for p in (ROOT / "studies").glob("*/figures/f[0-9]*_*.py")}
    listed = {n if "." in n else f"figures.{n}" for n in FIGURES} | {GPU_FIGURE}
    assert found == listed and len(FIGURES) == len(set(FIGURES))
    assert all("." not in n for n in TOOLKIT)
    from figures.registry import fig_module, fig_name

    names = [fig_name(r) for r in [*FIGURES, GPU_FIGURE]]
    assert len(names) == len(set(names)), "two figures would write the same PNG"
    assert all(fig_module(r).NAME == fig_name(r) for r in [*FIGURES, GPU_FIGURE])


@pytest.mark.parametrize("only, drawn", [("f1", ["f1_bias_vs_G"]), ("f10", ["f10_study_differences"]),
                                         ("f24,f3", ["f3_tuned_delay_vs_G", "f24_drift_map"]),
                                         ("f1_bias", ["f1_bias_vs_G"]), (None, None)])
def test_the_drawing_command_picks_figures_by_number_or_name(only, drawn, monkeypatch, tmp_path):
    import figures.__main__ as cli
    from studies import figures as every

    saved = []
    monkeypatch.setattr(cli, "fig_module", lambda ref: type("M", (), {"load": staticmethod(lambda: None),
                                                                     "plot": staticmethod(lambda df: ref)}))
    monkeypatch.setattr(cli.style, "save", lambda fig, name, out: saved.append((fig, name)) or [tmp_path / name])
    assert every.main(["--out", str(tmp_path)] + (["--only", only] if only else [])) == 0
    assert [n for _, n in saved] == (drawn or [cli.fig_name(r) for r in every.FIGURES])
    assert all(fig == ref for (fig, _), ref in zip(saved, [r for r in every.FIGURES
                                                            if cli.fig_name(r) in [n for _, n in saved]]))


def test_the_drawing_command_names_an_unknown_figure_and_where_study_figures_are(capsys):
    import figures.__main__ as cli

    with pytest.raises(SystemExit) as e:
        cli.main(["--only", "f10"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown figure(s) ['f10']" in err and "python -m studies.figures" in err
