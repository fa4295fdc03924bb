"""The budget study's report section (studies.report.sections.budget), its figure F27 and its README line, on a small
synthetic results tree: a planted frozen-pair table whose every ratio is known, and planted run outcomes for a
partial grid (seed 0 of every cell below N = 512, every seed at N = 128)."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from stats import share_ci
from studies.budget import analysis, progress
from studies.budget.figures import f27_budget_plane as f27
from studies.budget.grids import splits
from studies.report.sections.budget import budget_section, readme_line

ROOT = Path(__file__).resolve().parents[1]
K = {"gmc": 0.25, "tic_trunc": 0.125, "topr": 0.125, "is": 0.0}
"""Planted pair table: rel_mse = scale x (G / B) ** K[estimator], so MSE(4 x 32) / MSE(32 x 4) = 64 ** K exactly."""
BETWEEN = 0.2
WALL = 100.0


def pair_rows(pair: str, scale: float) -> list[dict]:
    rows = []
    for e, k in K.items():
        for N in (64, 128, 512):
            for G in (2, 4, 8, 16, 32, 64):
                B = N // G
                if 2 <= B <= 128:
                    m = scale * (G / B) ** k if scale else math.nan
                    rows.append({"pair": pair, "estimator": e, "B": B, "G": G, "N": N, "rel_mse": m,
                                 "between": BETWEEN * m, "within": (1 - BETWEEN) * m})
    return rows


def plant_pairs(folder: Path) -> None:
    """pA and pB pass every check, pC's on-policy groups all have equal rewards (no target, no checks)."""
    folder.mkdir(parents=True, exist_ok=True)
    mc = {"direct_se": 10.0, "pool": 100.0, "pool_se": 0.0, "sketch_sd": 0.0, "agrees": True}
    ok = {"is_unbiased": {"passed": True}, "committed_bias": {"available": True, "max_abs_z": 0.1, "passed": True},
          "sketch": {"passed": True},
          "direct_mc": [{"estimator": "gmc", "G": 8, "z": -1.5, "direct": 85.0, **mc},
                        {"estimator": "topr", "G": 32, "z": 0.5, "direct": 105.0, **mc}], "passed": True}
    sw = {e: {"S_w": {"4": 100.0, "32": 300.0 if e == "gmc" else 80.0}} for e in K}
    moments = {f"is/G{G}": {"bias_sq": {"value": 0.01, "se": 0.02}} for G in (2, 4, 8)}
    pairs = {n: {"run": f"run-{n}", "drift_kl": 0.1, "drift_ess": 0.5, "target_zero": n == "pC",
                 "checks": {} if n == "pC" else ok, "summary": {} if n == "pC" else sw,
                 "moments": {} if n == "pC" else moments} for n in ("pA", "pB", "pC")}
    (folder / "pairs.json").write_text(json.dumps({"pairs": pairs, "cost_s": {"wall": 7200.0, "cpu": 3600.0}}))
    rows = pair_rows("pA", 1.0) + pair_rows("pB", 3.0) + pair_rows("pC", 0.0)
    pd.DataFrame(rows).assign(checks_passed=lambda t: t["pair"] != "pC").to_csv(folder / "pairs.csv", index=False)


def finished(c, N: int) -> bool:
    return N == 128 or (c.seed == 0 and N != 512)


def reader(complete: bool = False):
    """Planted outcomes by run folder: gmc learns where B >= 16, topr and gmc_cap always, tic_trunc in seeds 0-1,
    is never; the d = 0 controls' final pc falls 0.01 per doubling of G. Partial unless ``complete``."""
    from studies.budget.plan import plan_rows

    cells = {r["run"]: (r["cell"], r["N"]) for r in plan_rows()}

    def read(run):
        c, N = cells[run]
        if not (complete or finished(c, N)):
            return None
        B, G = c.overrides["prompts_per_step"], c.overrides["group_size"]
        if c.delay == 0:
            return {"finished": True, "collapsed": False, "stable": True, "pc0": 0.5,
                    "pc_final": 0.6 - 0.01 * math.log2(G), "wall_s": WALL}
        ok = {"gmc": B >= 16, "topr": True, "gmc_cap": True, "is": False}.get(c.estimator, c.seed < 2)
        return {"finished": True, "collapsed": not ok, "stable": ok, "pc0": 0.5, "pc_final": 0.6 if ok else 0.1,
                "wall_s": WALL}
    return read


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    plant_pairs(tmp_path / "llm" / "budget")
    return tmp_path


def section_text(read, **kw) -> str:
    md, missing = budget_section(read=read, **kw)
    assert missing == []
    return "\n".join(md)


def row(text: str, h: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {h} |"))


def test_the_partial_grid_s_section_says_how_far_each_hypothesis_is_with_interim_numbers(tree):
    text = section_text(reader())
    assert text.startswith("## The sample budget under staleness: prompts or group size (in progress: B1, B2, B3, "
                           "B4, B5 not yet run)")
    doc = analysis.verdicts(analysis.design_runs(reader()), analysis.read_pairs(tree / "llm" / "budget"))
    # gmc at d = 64: every seed of the 4 cells of N = 128, seed 0 of the 9 cells of N < 512 besides
    assert "| not yet run: 29 of 75 runs of its cells finished |" in row(text, "B1")
    for h in ("B1", "B2", "B3", "B4"):
        k, n = map(int, re.search(r"not yet run: (\d+) of (\d+) runs", row(text, h)).groups())
        assert n - k == doc["missing"][h]
    # gmc's share is constant in G within each B: slope 0; on log2 B within N: N = 32 0, 64 0.5, 128 0.4, 256 0.5
    assert "*interim*: GMC's learned-share slope on log2 G within B 0.00 |" in row(text, "B1")
    assert "slopes on log2 B within N: GMC 0.35, TOPR 0.00 |" in row(text, "B2")
    assert "learned: gmc 0 of 6, gmc_cap kappa 2 6 of 6, kappa 4 6 of 6" in row(text, "B3")
    assert "slope of the d = 0 final pc on log2 G within N -0.010 |" in row(text, "B4")
    assert re.search(r"\*interim\*: rho -?[\d.]+ over \d+ strata \|", row(text, "B5"))
    assert f"Progress: {doc['runs']['finished']} of the design's 415 runs finished" in text
    assert "| 32 x 4 | 128 | 5/5 (5) | 2/5 (2) | 5/5 (5) | 0/5 (0) | 5/5 (5) | 0.580 |" in text
    assert "| 16 x 32 | 512 | - | - | - | - | - | - |" in text


def test_the_pairs_their_checks_the_pair_without_target_and_the_ratios_are_the_planted_ones(tree):
    text = section_text(reader())
    assert "Frozen pairs measured: 3; 2 passed every validity check (pA, pB; pairs passing each check: " \
           "committed_bias 2, direct_mc 2, is_unbiased 2, sketch 2)." in text
    assert "gmc at G = 8, z from -1.5 to -1.5, below the pool's value in 2 of 2 pairs" in text
    assert "Pair pC (run-pC, KL 0.1 per token, ESS fraction 0.5): every on-policy group has equal rewards" in text
    for e, k in K.items():
        r = 64 ** k
        ratio = f"{r:.3g} [{r:.3g}, {r:.3g}]"
        sw = "3" if e == "gmc" else "0.8"
        line = next(x for x in text.splitlines() if x.startswith(f"| {e} | "))
        assert line.endswith(f"| {ratio} | 0.20 / 0.20 | {sw} |"), line
    assert f"MSE(4 x 32) / MSE(32 x 4) is gmc {64 ** 0.25:.3g}, tic_trunc {64 ** 0.125:.3g}" in text
    assert "above one half in 8 of these 8" in text  # within-prompt share 0.8 everywhere
    assert "S_w(G = 32) / S_w(G = 4) is 3 (median over pairs)" in text


def test_the_cost_is_the_plan_s_estimate_beside_the_recorded_wall_time(tree):
    from studies.budget.plan import plan_rows, run_seconds

    text = section_text(reader())
    own = [r for r in plan_rows() if r["source"] == "budget"]
    done = [r for r in own if finished(r["cell"], r["N"])]
    est = sum(run_seconds(r["N"]) for r in own) / 3600
    assert (f"estimated {est:.1f} CPU-hours for the budget grid's {len(own)} runs" in text
            and f"{len(done)} have finished; the {len(done)} whose summaries record a wall time took "
                f"{len(done) * WALL / 3600:.1f} h in all against "
                f"{sum(run_seconds(r['N']) for r in done) / 3600:.1f} h estimated" in text)
    assert "The frozen-pair table took 2.0 h wall, 1.0 h CPU." in text


def test_the_placement_beside_the_papers_reads_the_data_so_far(tree):
    text = section_text(reader())
    iso = next(x for x in text.splitlines() if x.startswith("- IsoCompute (arXiv 2603.12151)"))
    assert "so far GMC's learned share rises with B at fixed N and TOPR's slope is within +-0.1" in iso
    assert "the slope's size is within the margin 0.03" in iso  # the planted d = 0 slope is -0.01
    crit = next(x for x in text.splitlines() if "off-policy reuse raises the critical batch size" in x)
    # d = 0 learns everywhere; gmc learns at B >= 16 only, so every N with a B < 16 cell fails; topr everywhere
    assert "d = 0 any: N = 16" in crit and "d = 64 gmc: no N yet" in crit and "d = 64 topr: N = 16" in crit
    mech = next(x for x in text.splitlines() if x.startswith("- Explanations are hypotheses"))
    assert "a hypothesis until B3 is decided" in mech and "gmc learned 0 of 6 under SGD against 0 of 6" in mech


def test_a_complete_grid_is_decided_and_its_records_are_worded(tree):
    shutil.rmtree(tree / "llm" / "budget")  # no pair table: B5 not yet run, the rest decided
    text = section_text(reader(complete=True))
    assert "(in progress: B5 not yet run)" in text.splitlines()[0]
    assert re.search(r"\| B1 \| .* \| REFUTED \| slope of GMC's learned share on log2 G within B 0.00 "
                     r"\[0.00, 0.00\]", text)
    assert "the pair table is missing" in row(text, "B5")
    assert re.search(r"\| B4 \| .* \| CONFIRMED \| slope of the d = 0 final pc on log2 G within N -0.010 "
                     r"\[-0.010, -0.010\]", text)
    assert "The frozen-pair table is missing (`" in text and "pairs.csv`, `" in text
    assert "does not exist): make it with `python -m studies.budget.pairs`" in text
    # held beside learned (planted: held is learned in every run), for every rule decided
    held = next(x for x in text.splitlines() if x.startswith("Held beside learned"))
    assert re.search(r"B1: slope on log2 G [+-]0.000 \[[+-]0.000, [+-]0.000\]", held)
    assert "B3: gmc_cap kappa 2.0 - gmc +1.00" in held


def test_the_section_names_the_pairs_b5_reads_and_the_departures(tree):
    text = section_text(reader())
    assert ("B5 reads the frozen pairs that pass the registered checks (a)-(c): pA, pB; left out: pC (no target: "
            "every on-policy group has equal rewards") in text
    assert "* Departure: check (c): the pair code gated at 4 combined s.e." in text
    assert "no pair's status changes (largest |z| 0.1)" in text


def test_the_figure_s_numbers_are_the_analysis_counts_and_partial_cells_are_hatched(tree):
    d = f27.load(read=reader())
    shares = {(c["estimator"], c["B"], c["G"]): c for c in analysis.cell_shares(analysis.design_runs(reader()))
              if c["delay"] == 64 and c["level"] == "adamclip0.0001" and not c["kappa"]}
    c = d["cells"]
    assert len(c) == 4 * len(splits()) and d["planned"] == 300
    for r in c.itertuples():
        s = shares.get((r.estimator, r.B, r.G))
        assert (r.learned, r.finished) == ((s["learned"], s["finished"]) if s else (0, 0))
        lo, hi = share_ci(r.learned, r.finished)
        assert (r.low, r.high) == (lo, hi) or (r.finished == 0 and math.isnan(r.low))
    fig = f27.plot(d)
    hatched = [p.get_gid() for ax in fig.axes for p in ax.patches if str(p.get_gid()).startswith("partial:")]
    assert len(hatched) == int((c["finished"] < c["planned"]).sum()) == 4 * (len(splits()) - 4)
    top = {t.get_text() for t in fig.axes[0].texts}
    gmc = c[c["estimator"] == "gmc"]
    assert {f"{r.learned}/{r.finished}" for r in gmc.itertuples() if r.finished} <= top and "not run" in top
    mse = d["mse"]
    g = mse[(mse["estimator"] == "gmc") & (mse["N"] == 128)].set_index(["B", "G"])
    assert g.loc[(4, 32), "ratio"] == pytest.approx(64 ** 0.25, rel=1e-12) and g["pairs"].eq(2).all()
    assert g.loc[(32, 4), "rel_mse"] == pytest.approx(2.0 * (4 / 32) ** 0.25, rel=1e-12)  # median of 1x and 3x
    words = f27.caption(d)
    assert f"{d['finished']} of the 300 planned" in words and "44 of the 60 cells are hatched" in words
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_missing_pair_table_is_named_with_its_command_in_the_figure(tree):
    shutil.rmtree(tree / "llm" / "budget")
    d = f27.load(read=reader())
    assert d["mse"] is None and "python -m studies.budget.pairs" in d["pairs_missing"]
    assert "Bottom: not drawn" in f27.caption(d) and "`python -m studies.budget.pairs`" in f27.caption(d)
    fig = f27.plot(d)
    assert any("studies.budget.pairs" in t.get_text() for ax in fig.axes for t in ax.texts)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_section_places_f27_through_the_report_s_registry(tree, tmp_path_factory):
    from figures.registry import figure_sections

    out = tmp_path_factory.mktemp("report")
    md, missing = budget_section(out, out / "figures", True, figure_sections, read=reader())
    text = "\n".join(md)
    assert missing == [] and "### F27. The sample budget on the (B, G) plane" in text
    assert "![f27_budget_plane](figures/f27_budget_plane.png)" in text
    assert (out / "figures" / "f27_budget_plane.png").is_file()


def test_the_wall_time_is_read_from_a_run_s_summary(tree):
    """A committed finished run, copied into the tree, read by the run table's own reader."""
    name = "long-adamclip0.0001_B4G4-gmc-d64-s0"
    src = ROOT / "results" / "llm" / "budget" / name
    dst = tree / "llm" / "budget" / name
    dst.mkdir(parents=True)
    for f in ("config.json", "metrics.csv.gz", "summary.json"):
        shutil.copy(src / f, dst / f)
    df = progress.design_table()
    r = df[df["name"] == name].iloc[0]
    assert bool(r["finished"]) and r["wall_s"] == json.loads((src / "summary.json").read_text())["wall_s"]
    assert int(df["finished"].sum()) == 1 and np.isnan(df[df["name"] != name]["wall_s"]).all()


def test_the_readme_line_reads_the_committed_files_or_says_in_progress(tree):
    line = readme_line(tree)
    assert line == ("**Budget** ([study](studies/budget/README.md), in progress: no verdict yet): at the frozen pairs, "
                    f"splitting N = 128 as 4 x 32 instead of 32 x 4 multiplies GMC's MSE by {64 ** 0.25:.2g} and "
                    f"TOPR's by {64 ** 0.125:.2g} (median over 2 pairs).")
    doc = {"verdicts": {"B1": "CONFIRMED", "B2": "not yet run", "B3": "not yet run", "B4": "REFUTED",
                        "B5": "not yet run"}, "runs": {"design": 415, "finished": 300}}
    (tree / "llm" / "budget" / "verdicts.json").write_text(json.dumps(doc))
    assert ", in progress, 300 of 415 runs: B1 CONFIRMED, B4 REFUTED; not yet run: B2, B3, B5):" in readme_line(tree)
    (tree / "llm" / "budget" / "pairs.csv").unlink()
    assert "the frozen-pair table not yet measured (`python -m studies.budget.pairs`)." in readme_line(tree)
