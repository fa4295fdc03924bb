"""figures/pc_vs_delay.py, the drawing F11 and F14 share, on a runs table whose every value is known; F10, F11
and F14 compute their intervals in load() (plot() and caption() draw and read with the bootstrap disabled);
F14 imports nothing from the staleness study."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from test_study_figures import FINAL, boot, final_pc, gid_line, write_study

import stats
from figures import pc_vs_delay, style

ROOT = Path(__file__).resolve().parents[1]

# (horizon, estimator, delay) -> final pc of seeds 0, 1, 2; every run of a horizon starts at PC0[horizon]
PCS = {("short", "gmc", 0): (0.50, 0.60, 0.70), ("short", "gmc", 16): (0.40, 0.45, 0.65),
       ("short", "tic_mask", 16): (0.30, 0.35, 0.20), ("short", "icepop", 16): (0.10, 0.50, 0.30),
       ("long", "gmc", 0): (0.20, 0.30, 0.40), ("long", "gmc", 16): (0.25, 0.15, 0.20),
       ("long", "gmc", 64): (0.05, 0.10, 0.30), ("long", "tic_mask", 64): (0.35, 0.30, 0.40)}
PC0 = {"short": 0.25, "long": 0.125}


def runs_frame() -> pd.DataFrame:
    """One row per run of :data:`PCS`, and one incomplete run (``long``, TIC-mask, d = 16) that every table
    leaves out."""
    rows = [{"horizon": h, "estimator": e, "delay": d, "seed": s, "complete": True, "pc_final": v, "pc0": PC0[h]}
            for (h, e, d), vals in PCS.items() for s, v in enumerate(vals)]
    rows.append({"horizon": "long", "estimator": "tic_mask", "delay": 16, "seed": 0, "complete": False,
                 "pc_final": 0.9, "pc0": 0.9})
    runs = pd.DataFrame(rows)
    runs.attrs["seeds"] = [0, 1, 2]
    return runs


def span(x) -> dict:
    """An interval function of one sample: its mean and its range."""
    x = np.asarray(x, float)
    return {"n": len(x), "mean": float(x.mean()), "low": float(x.min()), "high": float(x.max())}


def test_table_lists_delay_zero_under_every_estimator_and_the_exploratory_last():
    tab = pc_vs_delay.table(runs_frame(), span, extra=["icepop"])
    assert list(tab.columns) == pc_vs_delay.COLUMNS
    for (h, e, d), vals in ((k, v) for k, v in PCS.items() if k[2] > 0):
        row = tab[(tab["horizon"] == h) & (tab["estimator"] == e) & (tab["delay"] == d)]
        assert len(row) == 1 and row["n"].iloc[0] == 3
        assert row["mean"].iloc[0] == pytest.approx(np.mean(vals), abs=1e-15)
    short = tab[tab["horizon"] == "short"]
    assert list(dict.fromkeys(short["estimator"])) == ["gmc", "tic_mask", "icepop"]  # the exploratory last
    assert short.loc[short["estimator"] == "icepop", "exploratory"].all()
    assert not short.loc[short["estimator"] != "icepop", "exploratory"].any()
    for h in ("short", "long"):
        zero = tab[(tab["horizon"] == h) & (tab["delay"] == 0)]  # the delay-0 runs under every estimator
        assert set(zero["estimator"]) == set(tab.loc[tab["horizon"] == h, "estimator"])
        assert list(zero["mean"]) == pytest.approx([np.mean(PCS[(h, "gmc", 0)])] * len(zero), abs=1e-15)
    r = tab[(tab["horizon"] == "long") & (tab["estimator"] == "tic_mask")]
    assert list(r["delay"]) == [0, 64] and list(r["n"]) == [3, 3]  # the incomplete d = 16 run is left out
    assert list(r["low"]) == [0.20, 0.30] and list(r["high"]) == [0.40, 0.40]
    assert list(pc_vs_delay.horizons(runs_frame())) == ["short", "long"]


def test_summary_plot_and_caption_read_the_table():
    runs = runs_frame()
    d = pc_vs_delay.summary(runs, pc_vs_delay.table(runs, span, extra=["icepop"]))
    assert d["horizons"] == ["short", "long"] and d["seeds"] == [0, 1, 2]
    assert d["warm"] == {"short": 0.25, "long": 0.125}  # the incomplete run's pc0 (0.9) left out
    fig = pc_vs_delay.plot(d, "a title")
    assert fig._suptitle.get_text() == "a title"
    tab = d["table"]
    for h in d["horizons"]:
        t = tab[tab["horizon"] == h]
        ests = list(dict.fromkeys(t["estimator"]))
        pos = {dl: i for i, dl in enumerate(sorted(t["delay"].unique()))}
        for k, e in enumerate(ests):
            s = t[t["estimator"] == e].sort_values("delay")
            x, y, ln = gid_line(fig, f"series:{h}:{e}")
            off = (k - (len(ests) - 1) / 2) * pc_vs_delay.DODGE  # the dodge: estimators side by side
            assert list(x) == pytest.approx([pos[dl] + off for dl in s["delay"]], abs=1e-15)
            assert list(y) == list(s["mean"])
            assert ln.get_linestyle() == ("--" if e == "icepop" else style.line_kw(e)["linestyle"])
            assert ln.get_label() == style.label(e) + (" (expl.)" if e == "icepop" else "")
            _, iy, _ = gid_line(fig, f"interval:{h}:{e}")
            assert list(iy[0::3]) == list(s["low"]) and list(iy[1::3]) == list(s["high"])
    warm = [ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == ":"]
    assert len(warm) == 1 and warm[0].get_ydata()[0] == 0.125
    plt.close(fig)
    cap = pc_vs_delay.caption(d, min_seeds=6)
    assert cap.startswith("Mean final held-out pc over 3 whole seed(s) (0, 1, 2) with 95% percentile-bootstrap")
    assert "short horizon: warm start 0.250, delay 0 0.600, highest at d = 16: GMC 0.500; IcePop (expl.) 0.300;" in cap
    assert "long horizon: warm start 0.125, delay 0 0.300, highest at d = 64: TIC-mask 0.350; GMC 0.150." in cap
    assert "Interim: fewer than the pre-registered 6 whole seeds." in cap
    assert "Interim" not in pc_vs_delay.caption(d, min_seeds=3)


@pytest.fixture
def gpu_and_cpu_study(tmp_path, monkeypatch):
    """The staleness figures' synthetic study, written as the CPU study and as the GPU study."""
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    write_study(tmp_path / "llm" / "study")
    gpu = write_study(tmp_path / "llm" / "gpu_study")
    (gpu / "gpu_study.json").write_text(json.dumps({"parameters": 596_049_920}))
    return tmp_path


def no_bootstrap(monkeypatch):
    """Every bootstrap interval of the toolkit goes through stats.bootstrap_mean: make it fail."""
    def refuse(*a, **k):
        raise AssertionError("an interval computed outside load()")

    monkeypatch.setattr(stats, "bootstrap_mean", refuse)


def test_f10_f11_and_f14_compute_their_intervals_in_load(gpu_and_cpu_study, monkeypatch):
    from grids.run_table import differences
    from studies.gpu.figures import f14_gpu_pc_vs_delay as f14
    from studies.staleness.figures import f10_study_differences as f10
    from studies.staleness.figures import f11_study_pc_vs_delay as f11

    loaded = {m: m.load() for m in (f10, f11, f14)}
    fresh = f10.load_runs()
    pd.testing.assert_frame_equal(loaded[f10]["table"], differences(fresh))
    pd.testing.assert_frame_equal(loaded[f11]["table"], f11.table(fresh))
    pd.testing.assert_frame_equal(loaded[f14]["table"], f11.table(f14.load_runs()))  # the same runs, one table
    no_bootstrap(monkeypatch)
    figs = {m: m.plot(d) for m, d in loaded.items()}
    caps = {m: m.caption(d) for m, d in loaded.items()}
    for h, e in (("long", "gmc"), ("long", "tic_mask"), ("short", "is")):
        delays = [0] + sorted({k[2] for k in FINAL if k[0] == h and k[1] == e and k[2] > 0})
        vals = [[final_pc((h, "gmc", 0, s)) if d == 0 else final_pc((h, e, d, s)) for s in range(3)] for d in delays]
        ends = np.array([boot(v) for v in vals])
        for m in (f11, f14):
            _, y, _ = gid_line(figs[m], f"series:{h}:{e}")
            assert y == pytest.approx([np.mean(v) for v in vals], abs=1e-12)
            _, iy, _ = gid_line(figs[m], f"interval:{h}:{e}")
            assert iy[0::3] == pytest.approx(ends[:, 0], abs=1e-12) and iy[1::3] == pytest.approx(ends[:, 1], abs=1e-12)
    assert figs[f14]._suptitle.get_text() == ("Qwen3, 596.0M parameters, one GPU: final held-out pc, mean and 95% "
                                              "bootstrap interval over 3 whole seeds")
    assert figs[f11]._suptitle.get_text() == "Final held-out pc, mean and 95% bootstrap interval over 3 whole seeds"
    assert caps[f14].startswith("Qwen3, 596.0M parameters (`python -m studies.gpu.run`). Mean final held-out pc over 3")
    assert caps[f14].split("pc over 3")[1].split("Source")[0] == caps[f11].split("pc over 3")[1].split("Source")[0]
    assert "fewer than the pre-registered 6" in caps[f10]
    for fig in figs.values():
        plt.close(fig)


def test_f14_imports_nothing_from_the_staleness_study_and_the_shared_drawing_no_study():
    def imported(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return ({a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
                | {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                   for a in n.names})

    f14 = imported(ROOT / "studies" / "gpu" / "figures" / "f14_gpu_pc_vs_delay.py")
    assert "figures.pc_vs_delay" in f14
    assert not [m for m in f14 if m.startswith("studies.staleness")], f14
    assert not [m for m in imported(ROOT / "figures" / "pc_vs_delay.py") if m.startswith(("studies", "grids"))]
