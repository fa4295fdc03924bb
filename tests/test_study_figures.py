"""The staleness study's figures (F10-F13), its bound table, its horizon grid and the report's
headline section, on synthetic run folders whose every value is known."""
from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from figures import style
from llm_runs.metrics import COLUMNS
from schema import results as data

TASKS = {"short": ("arithmetic", 3), "long": ("scratchpad", 7)}


def write_run(root, name, cfg, pcs, per_step=None):
    """A run folder as the trainer writes it: ``config.json`` and ``metrics.csv``, held-out
    evaluations at evenly spaced steps (``pcs``), and per-update columns ``per_step`` (name ->
    array of length steps)."""
    run = root / name
    run.mkdir(parents=True)
    steps = cfg["steps"]
    (run / "config.json").write_text(json.dumps({"config": cfg}))
    eval_steps = np.linspace(0, steps, len(pcs)).astype(int)
    rows = []
    for t in range(steps + 1):
        row = {c: np.nan for c in COLUMNS}
        row["step"] = t
        if t < steps:
            row.update({"train/loss": 0.1, "train/grad_norm": 1.0, "train/update_skipped": 0})
            for c, v in (per_step or {}).items():
                row[c] = v[t]
        if t in eval_steps:
            i = int(np.nonzero(eval_steps == t)[0][0])
            row.update({"eval/heldout_pc": pcs[i], "eval/heldout_acc": pcs[i]})
        rows.append(row)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(run / "metrics.csv", index=False)


FINAL = {  # (horizon, estimator, delay, seed) -> final pc; every run starts at 0.3
    **{("long", e, 64, s): v for e, vals in {"gmc": (0.50, 0.60, 0.55), "tic_mask": (0.40, 0.45, 0.20),
                                              "is": (0.52, 0.58, 0.57)}.items() for s, v in enumerate(vals)},
    **{("long", e, 16, s): v for e, vals in {"gmc": (0.61, 0.66, 0.62), "tic_mask": (0.55, 0.52, 0.50),
                                              "is": (0.60, 0.61, 0.63)}.items() for s, v in enumerate(vals)},
    **{("short", e, 64, s): v for e, vals in {"gmc": (0.70, 0.71, 0.73), "tic_mask": (0.72, 0.69, 0.70),
                                               "is": (0.65, 0.69, 0.66)}.items() for s, v in enumerate(vals)},
    **{(h, "gmc", 0, s): 0.8 - 0.01 * s for h in TASKS for s in range(3)},
}
STEPS = 40
COLLAPSED = ("long", "tic_mask", 64, 2)  # ends far below its start: an unstable run


def final_pc(key):
    return 0.01 if key == COLLAPSED else FINAL[key]


def bias_columns(key, steps=STEPS):
    """Per-update realised mass bias and bound of a run, deterministic in its key (seed and delay)."""
    _h, e, d, s = key
    t = np.arange(steps)
    real = 0.1 + 0.05 * np.sin(t + s + d)
    bound = np.where(t % (4 + s) == 0, 0.05, 0.2) if e != "is" else np.full(steps, np.nan)
    return {"stale/mass_bias": real if e != "is" else np.zeros(steps), "stale/mass_bias_bound": bound,
            "stale/chi2": 0.5 + 0.01 * t, "stale/chi2_token": 0.05 + 0.0 * t}


def write_study(root, partial_seed=True):
    """Three whole seeds (0-2) of a small study, and (``partial_seed``) a seed 3 missing a run."""
    keys = list(FINAL)
    if partial_seed:
        keys += [k[:3] + (3,) for k in FINAL if k[3] == 0 and k != ("long", "is", 64, 0)]
    for key in keys:
        h, e, d, s = key
        task, terms = TASKS[h]
        cfg = {"task": task, "terms": terms, "digits": 1, "steps": STEPS, "eps": 0.2, "heldout_size": 200,
               "seed": s, "mode": "controlled", "estimator": e, "delay": d}
        final = final_pc(key if key in FINAL else key[:3] + (0,))
        pcs = [0.3, 0.25, final] if key == COLLAPSED else [0.3, 0.45, final]
        write_run(root, f"{h}-{e}-d{d}-s{s}", cfg, pcs, bias_columns(key))
    return root




@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    return write_study(tmp_path / "llm" / "study")


def boot(x):
    """The analysis' interval, computed here from scipy directly."""
    x = np.asarray(x, float)
    r = stats.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=10_000, method="percentile",
                        random_state=np.random.default_rng(20261201))
    return r.confidence_interval.low, r.confidence_interval.high


def gid_line(fig, gid):
    found = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, (gid, sorted(str(ln.get_gid()) for ax in fig.axes for ln in ax.get_lines()))
    return np.asarray(found[0].get_xdata(), float), np.asarray(found[0].get_ydata(), float), found[0]


# --------------------------------------------------------------------------- F10


def test_f10_points_and_intervals_are_the_paired_bootstrap_of_whole_seeds(study):
    from studies.staleness.figures import f10_study_differences as f10

    loaded = f10.load()
    runs = loaded["runs"]
    assert runs.attrs["seeds"] == [0, 1, 2] and 3 not in set(runs["seed"])  # seed 3 misses a run
    fig = f10.plot(loaded)
    for h, d, b in (("long", 64, "tic_mask"), ("long", 64, "is"), ("long", 16, "is"), ("short", 64, "tic_mask")):
        diffs = [final_pc((h, "gmc", d, s)) - final_pc((h, b, d, s)) for s in range(3)]
        x, _, pt = gid_line(fig, f"series:pc_final:{h}:{d}:{b}")
        assert x[0] == pytest.approx(np.mean(diffs), abs=1e-12)
        ix, _, _ = gid_line(fig, f"interval:pc_final:{h}:{d}:{b}")
        assert tuple(ix) == pytest.approx(boot(diffs), abs=1e-12)
        assert pt.get_marker() == ("x" if (h, d, b) == ("long", 64, "tic_mask") else style.style(b).marker)
    # the AUC row: the trapezoid area of (0, 0.3), (20, 0.45), (40, final) over 40 updates
    auc = lambda v: (0.5 * (0.3 + 0.45) * 20 + 0.5 * (0.45 + v) * 20) / 40
    diffs = [auc(final_pc(("long", "gmc", 16, s))) - auc(final_pc(("long", "is", 16, s))) for s in range(3)]
    x, _, _ = gid_line(fig, "series:auc:long:16:is")
    assert x[0] == pytest.approx(np.mean(diffs), abs=1e-12)
    assert "3 whole seeds" in fig._suptitle.get_text()
    margin = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "--"]
    assert len(margin) == 1 and margin[0].get_xdata()[0] == pytest.approx(-0.03)
    assert "fewer than the pre-registered 6" in f10.caption(loaded)


# --------------------------------------------------------------------------- F11


def test_f11_means_intervals_and_the_shared_delay_zero_point(study):
    from studies.staleness.figures import f11_study_pc_vs_delay as f11

    fig = f11.plot(f11.load())
    for h, e in (("long", "gmc"), ("long", "tic_mask"), ("short", "is")):
        delays = [0] + sorted({k[2] for k in FINAL if k[0] == h and k[1] == e and k[2] > 0})
        vals = [[final_pc((h, "gmc", 0, s)) if d == 0 else final_pc((h, e, d, s)) for s in range(3)] for d in delays]
        _, y, _ = gid_line(fig, f"series:{h}:{e}")
        assert y == pytest.approx([np.mean(v) for v in vals], abs=1e-12)
        _, iy, _ = gid_line(fig, f"interval:{h}:{e}")
        ends = np.array([boot(v) for v in vals])
        assert iy[0::3] == pytest.approx(ends[:, 0], abs=1e-12) and iy[1::3] == pytest.approx(ends[:, 1], abs=1e-12)
    warm = [ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == ":"]
    assert len(warm) == 1 and warm[0].get_ydata()[0] == pytest.approx(0.3)


# --------------------------------------------------------------------------- bound table and F13


def test_bound_table_counts_every_update_by_hand(study):
    from studies.staleness.analysis import bound_table

    tab = bound_table(study).set_index(["horizon", "delay", "scheme"])
    assert "is" not in tab.index.get_level_values("scheme")  # IS has no bound (m = 0 exactly)
    for h, d, e in (("long", 64, "gmc"), ("short", 64, "tic_mask"), ("long", 16, "tic_mask")):
        seeds = [k[3] for k in FINAL if k[:3] == (h, e, d)] + [3]  # every complete run, seed 3's too
        holds = n = 0
        ratios = []
        for s in seeds:
            c = bias_columns((h, e, d, s))
            for r, b in zip(c["stale/mass_bias"], c["stale/mass_bias_bound"]):
                n += 1
                holds += r <= b
                ratios.append(r / b)
        row = tab.loc[(h, d, e)]
        assert row["updates"] == n == 40 * len(seeds) and row["runs"] == len(seeds)
        assert row["holds_frac"] == pytest.approx(holds / n, abs=1e-12)
        assert 0 < row["holds_frac"] < 1
        assert row["ratio_median"] == pytest.approx(np.median(ratios)) \
            and row["ratio_max"] == pytest.approx(max(ratios))


def test_bound_ratio_reads_0_over_0_as_holding_and_r_over_0_as_failing():
    from studies.staleness.analysis import bound_ratio

    assert list(bound_ratio([0.0, 0.2, 0.1], [0.0, 0.0, 0.4])) == [0.0, math.inf, 0.25]


def test_f13_curves_are_the_seed_median_smoothed(study):
    from studies.staleness.figures import f13_theory_in_the_loop as f13

    tr = f13.load()
    assert set(tr["estimator"]) == {"gmc", "tic_mask"}  # IS logs no bound
    fig = f13.plot(tr)
    real = np.median([bias_columns(("long", "gmc", 64, s))["stale/mass_bias"] for s in range(4)], axis=0)  # seed 3 too
    _, y, _ = gid_line(fig, "series:long:64:gmc:realised")
    expect = pd.Series(real).rolling(f13.SMOOTH, center=True, min_periods=1).median().to_numpy()
    assert y == pytest.approx(expect, abs=1e-12)
    assert "holds at" in f13.caption(tr)


# --------------------------------------------------------------------------- F12 and the horizon grid


def write_horizon_grid(root, chi2_token=0.04, correlated=1.0, seeds=(0, 1), delay=16, steps=30):
    """GMC at ``delay`` for terms 2..7; per update chi2_token constant and the trajectory chi^2 =
    (1 + chi2_token)^(correlated H) - 1, with noise before the pipeline is full (t < delay)."""
    for terms in range(2, 8):
        H = 3 * (terms - 1)
        for s in seeds:
            t = np.arange(steps)
            traj = (1 + chi2_token) ** (correlated * H) - 1 + 0.001 * s
            chi2 = np.where(t >= delay, traj, 100.0)  # the filling pipeline must not count
            cfg = {"task": "scratchpad", "terms": terms, "digits": 1, "steps": steps, "eps": 0.2, "heldout_size": 20,
                   "seed": s, "mode": "controlled", "estimator": "gmc", "delay": delay}
            write_run(root, f"H{H}-gmc-d{delay}-s{s}", cfg, [0.3, 0.4],
                      {"stale/chi2": chi2, "stale/chi2_token": np.full(steps, chi2_token)})


def test_horizon_of_a_run_is_the_tasks_own(tmp_path):
    from llm_runs.tasks import ArithmeticTask, ScratchpadTask

    for terms in range(2, 8):
        assert data.horizon_tokens({"task": "scratchpad", "digits": 1, "terms": terms}) == \
            ScratchpadTask(terms=terms, heldout_size=5, train_size=20).horizon == 3 * (terms - 1)
    assert data.horizon_tokens({"task": "arithmetic", "digits": 1, "terms": 3}) == \
        ArithmeticTask(terms=3, heldout_size=5).max_answer_tokens + 1 == 3
    with pytest.raises(ValueError, match="no fixed horizon for task 'gsm8k'"):
        data.horizon_tokens({"task": "gsm8k"})


def test_f12_medians_after_the_pipeline_fills_and_the_independence_prediction(tmp_path, monkeypatch):
    from claims.horizon import independence_verdict
    from studies.staleness.figures import f12_chi2_vs_horizon as f12

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    write_horizon_grid(tmp_path / "llm" / "horizon")
    df = f12.load()
    assert set(df["source"]) == {"horizon"}  # no study folder: no primary points
    fig = f12.plot(df)
    Hs = np.array([3, 6, 9, 12, 15, 18])
    x, y, _ = gid_line(fig, "series:chi2:measured")
    assert list(x) == list(Hs)
    assert y == pytest.approx((1.04) ** Hs + 0.0005, rel=1e-12)  # the seeds' mean, the t < d rows left out
    _, yp, _ = gid_line(fig, "series:chi2:predicted")
    assert yp == pytest.approx((1.04) ** Hs, rel=1e-12)
    assert independence_verdict(f12.table(df))["holds"] and "holds within a factor 2" in f12.caption(df)
    assert fig.axes[0].get_yscale() == "log"


def test_f12_says_when_the_independence_prediction_fails_and_adds_the_study_points(tmp_path, monkeypatch):
    from claims.horizon import independence_verdict
    from studies.staleness.figures import f12_chi2_vs_horizon as f12

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    write_horizon_grid(tmp_path / "llm" / "horizon", chi2_token=0.1, correlated=3.0)  # positively dependent tokens
    write_study(tmp_path / "llm" / "study", partial_seed=False)
    cfg = {"task": "scratchpad", "terms": 7, "digits": 1, "steps": STEPS, "eps": 0.2, "heldout_size": 200, "seed": 0,
           "mode": "controlled", "estimator": "gmc", "delay": 16}
    df = f12.load()
    v = independence_verdict(f12.table(df))
    assert not v["holds"] and v["slope_measured"] == pytest.approx(3 * v["slope_predicted"], rel=1e-3)
    assert "does not hold" in f12.caption(df)
    study = df[df["source"] == "study"]
    assert set(study["H"]) == {18} and set(study["delay"]) == {16}  # long d=16 only (the short study has no d=16)
    fig = f12.plot(df)
    _, y, _ = gid_line(fig, "series:chi2:study:long")
    # the synthetic study's chi2 rises 0.5 + 0.01 t; median over t = 16..39
    assert y[0] == pytest.approx(1 + 0.5 + 0.01 * np.median(np.arange(16, STEPS)), rel=1e-12)
    assert cfg["terms"] == 7


def test_horizon_grid_is_gmc_at_delay_16_over_terms_2_to_7_and_leaves_the_primary_untouched():
    from grids.sweep import plan
    from llm_runs.config import resolve_config
    from studies.grids import GRIDS
    from studies.staleness.grids import HORIZON_TERMS

    grid = GRIDS["horizon"]
    cells = plan(grid)
    assert len(cells) == len(HORIZON_TERMS) * 3 and {(c.estimator, c.delay) for c in cells} == {("gmc", 16)}
    for c in cells:
        cfg = resolve_config(c.overrides).to_dict()
        assert c.horizon == f"H{data.horizon_tokens(cfg)}" and cfg["task"] == "scratchpad"
        assert cfg["steps"] == 60 and cfg["eval_every"] == 0
    long = next(c for c in cells if c.horizon == "H18").overrides
    primary = next(c for c in plan(GRIDS["primary"]) if c.horizon == "long").overrides
    warm = ("terms", "train_size", "heldout_size", "warm_start_steps", "warm_start_lr", "warm_start_batch")
    assert {k: long[k] for k in warm} == {k: primary[k] for k in warm}  # H = 18 is the long horizon's warm start
    committed = data.ROOT / "results" / "llm" / "study" / "sweep.json"
    assert json.loads(committed.read_text())["settings"] == json.loads(json.dumps(GRIDS["primary"].record()))


# --------------------------------------------------------------------------- the report's headline


VERDICTS = {
    "H1": {"verdict": "NOT DECIDED", "interim_verdict": "CONFIRMED", "delay": 64, "seeds": [0, 1, 2],
           "gmc_minus_tic_mask": {"n": 3, "mean": 0.1234, "low": 0.05, "high": 0.2},
           "reason": "3 whole seeds, fewer than the pre-registered minimum of 6"},
    "H2": {"verdict": "NOT DECIDED", "interim_verdict": "INCONCLUSIVE", "delay": 64, "margin": 0.03, "seeds": [0, 1, 2],
           "baselines": {"is": {"n": 3, "mean": -0.0067, "low": -0.02, "high": 0.01, "p_noninferior": 0.01,
                                "noninferior": True, "p_worse": 0.4, "worse": False}},
           "unstable_excluded": ["tic_mask"], "reason": "3 whole seeds, fewer than the pre-registered minimum of 6"},
    "H3": {"verdict": "NOT DECIDED", "interim_verdict": "REFUTED", "delay": 64, "pair": ["gmc", "tic_mask"],
           "seeds": [0, 1, 2], "long_gap_minus_short_gap": {"n": 3, "mean": -0.4321, "low": -0.5, "high": -0.3},
           "reason": "3 whole seeds, fewer than the pre-registered minimum of 6"},
    "H4": {"verdict": "NOT DECIDED", "interim_verdict": "INCONCLUSIVE", "diagnostic": "stale/chi2", "threshold": 1.0,
           "collapsed_runs": 1, "warned_before_collapse": 0, "ci": [math.nan, math.nan], "false_alarms": 7,
           "non_collapsed_runs": 26, "seeds": [0, 1, 2],
           "reason": "3 whole seeds, fewer than the pre-registered minimum of 6"},
}


def test_report_headline_renders_the_verdicts_and_tables(study, tmp_path):
    from studies.report import build as report

    (study / "verdicts.json").write_text(json.dumps(VERDICTS))
    md, missing = report.study_section(tmp_path, tmp_path / "figs", draw_missing=True)
    text = "\n".join(md)
    assert md[0] == "## Staleness study (headline)" and "**Whole seeds: 3** (0, 1, 2)" in text
    for k, interim, number in (("H1", "CONFIRMED", "+0.123 [+0.050, +0.200] (n = 3)"),
                               ("H3", "REFUTED", "-0.432 [-0.500, -0.300] (n = 3)")):
        row = [ln for ln in md if ln.startswith(f"| {k} |")]
        assert len(row) == 1 and "**NOT DECIDED**" in row[0] and f"| {interim} |" in row[0] and number in row[0]
    assert "7 of 26 other runs" in text and "IS -0.007 [-0.020, +0.010]" in text
    assert "out of date" not in text
    # the plain answer: long horizon, d = 64; tic_mask is unstable there (one of three seeds collapsed)
    answer = md[md.index("### Plain answer so far") + 2]
    means = {e: np.mean([final_pc(("long", e, 64, s)) for s in range(3)]) for e in ("gmc", "is")}
    assert f"IS {means['is']:.3f}; GMC {means['gmc']:.3f}" in answer and "Unstable there" in answer \
        and "TIC-mask" in answer
    assert "interim" in answer
    assert "| long | 64 | TIC-mask | 3 |" in text and "**no** |" in text
    assert "### THEORY §3's mass-bias bound at LLM scale" in text
    # F12 has no horizon grid here: named with its command; the other three are drawn
    f12 = report.fig_module("studies.staleness.figures.f12_chi2_vs_horizon")
    assert missing == [report.plain(f12.TITLE) + ": results missing"]
    assert "python -m studies.run --grid horizon" in text
    for name in ("f10_study_differences", "f11_study_pc_vs_delay", "f13_theory_in_the_loop"):
        assert (tmp_path / "figs" / f"{name}.png").exists() and f"{name}.png" in text
    (study / "verdicts.json").write_text(json.dumps({k: {**v, "seeds": [0, 1]} for k, v in VERDICTS.items()}))
    md, _ = report.study_section(tmp_path, tmp_path / "figs", draw_missing=False)
    assert "verdicts.json is out of date" in "\n".join(md)


def test_report_headline_names_the_commands_of_missing_results(tmp_path, monkeypatch):
    from studies.report import build as report

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    md, missing = report.study_section(tmp_path, tmp_path / "figs", draw_missing=True)
    text = "\n".join(md)
    assert "missing results llm study" in text and "`python -m studies.run`" in text
    assert "python -m studies.staleness --json results/llm/study/verdicts.json" in text
    assert len(missing) == 4
    with pytest.raises(data.MissingResults, match="python -m studies.run"):
        report.fig_module("studies.staleness.figures.f10_study_differences").load()


def test_a_figure_is_redrawn_when_a_file_in_its_source_folder_changes(study, tmp_path):
    import os

    from figures import registry as report

    m = report.fig_module("studies.staleness.figures.f11_study_pc_vs_delay")
    png = tmp_path / "f11.png"
    png.write_bytes(b"")
    newest = max(f.stat().st_mtime for f in study.rglob("*") if f.is_file())
    os.utime(png, (newest + 10, newest + 10))
    assert not report._png_stale(png, m)
    run = next(p for p in study.iterdir() if (p / "config.json").is_file())
    os.utime(run / "config.json", (newest + 20, newest + 20))  # the folder's own time is unchanged
    assert report._png_stale(png, m)
    png.unlink()
    assert report._png_stale(png, m)
