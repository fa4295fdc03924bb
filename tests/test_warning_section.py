"""The early warning on the frozen pairs' pools (studies.warning.pairs), its verdicts file (studies.warning.verdict)
and its report section (studies.report.sections.warning), on small synthetic pools and synthetic grids."""
from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest
import torch

from studies.warning import pairs as wp

GS, NS, NB = (4, 8, 16, 32), (32, 64), 300


def _pool(seed, P=4, M=64, T=5, sd=0.35, masked=True):
    """A pool of P prompts x M completions of T tokens: per-token log-ratios normal, a prompt-level shift (so the
    prompts differ), some trailing tokens masked; logw the sum over the completion (as the pair code forms it)."""
    g = torch.Generator().manual_seed(seed)
    tok = torch.randn(P, M, T, generator=g, dtype=torch.float64) * sd + torch.linspace(-0.3, 0.2, P)[:, None, None]
    mask = torch.ones(P, M, T)
    if masked:
        lengths = torch.randint(2, T + 1, (P, M), generator=g)
        mask = (torch.arange(T)[None, None] < lengths[..., None]).float()
    tok = (tok.float() * mask)
    return {"tok_lr": tok, "mask": mask, "logw": tok.sum(-1)}


# --------------------------------------------------------------------------- the pools


def test_the_batches_are_those_of_pair_warning_stats():
    from studies.budget.pairs_checks import warning_stats

    pool, seed = _pool(1), [7, 3]
    rows = wp.pool_statistics("p1", pool["logw"], pool["tok_lr"], pool["mask"], seed, GS, NS, 60)
    theirs = warning_stats(pool["logw"], 0.2, seed, GS, NS, 60)
    ok = wp.agreement(rows, theirs)
    assert ok["passed"] and ok["cells"] == 3 * len([1 for N in NS for G in GS if N // G >= 1])
    assert set(ok["max_rel_diff"]) == set(wp.COMMITTED)
    moved = [dict(r) for r in theirs]
    moved[0]["mean"] += 1e-6  # another batch's value: detected
    assert not wp.agreement(rows, moved)["passed"]
    assert not wp.agreement(rows, [])["passed"]  # nothing to compare with is not an agreement


def test_the_per_token_kl_is_kl_per_token_of_the_assembled_batch():
    """Each batch rebuilt row by row from the draws (prompt p, member m: the pool's completion (p, m)) and read by
    llm_runs.theory.kl_per_token, the one definition; the mean over the batches is the row's."""
    from llm_runs.theory import kl_per_token

    pool, seed, nb = _pool(2), [5, 1], 25
    rows = wp.pool_statistics("p", pool["logw"], pool["tok_lr"], pool["mask"], seed, (8,), (32,), nb)
    kl = next(r for r in rows if r["statistic"] == "kl")
    (_, G, B, p, members), = list(wp.batches(4, 64, seed, (8,), (32,), nb))
    vals, logw = [], []
    for i in range(nb):
        idx = [(int(p[i, b]), int(members[i, b, g])) for b in range(B) for g in range(G)]
        tok = torch.stack([pool["tok_lr"][a, m] for a, m in idx])
        msk = torch.stack([pool["mask"][a, m] for a, m in idx])
        vals.append(kl_per_token(tok, msk))
        logw.append(float(torch.stack([pool["logw"][a, m] for a, m in idx]).double().mean()))
    assert kl["mean"] == pytest.approx(float(np.mean(vals)), rel=1e-12)  # float64 sums in another order
    chi2_log = next(r for r in rows if r["statistic"] == "chi2_log")
    assert chi2_log["mean"] == pytest.approx(-2 * float(np.mean(logw)), rel=1e-12)


def test_batch_means_have_the_pools_expectation_at_every_G_and_ess_does_not():
    """Every completion T tokens long: kl, chi2_log, chi2, abs_log_w and chi2_token are means over the batch of one
    function of each completion, whose expectation is the pool's mean over prompts of the mean over its completions
    at every (B, G); within 4 s.e. at every cell. The ESS fraction falls from G = 4 to G = 32."""
    pool = _pool(3, M=64, T=4, sd=0.5, masked=False)
    rows = wp.pool_statistics("p", pool["logw"], pool["tok_lr"], pool["mask"], [11, 0], GS, NS, NB)
    tok, lw = pool["tok_lr"].double(), pool["logw"].double()
    exact = {"kl": float((torch.expm1(tok) - tok).mean()), "chi2_log": float(-2 * lw.mean()),
             "chi2": float(torch.exp(2 * lw).mean() - 1), "abs_log_w": float(lw.abs().mean()),
             "chi2_token": float(torch.exp(2 * tok).mean() - 1)}
    for r in rows:
        if r["statistic"] in exact:
            assert abs(r["mean"] - exact[r["statistic"]]) <= 4 * r["se"], r
    pooled = wp.pool_expectations(pool["logw"])  # what the command checks its Monte Carlo against
    assert pooled == pytest.approx({k: exact[k] for k in pooled}, rel=1e-12)
    check = wp.exact_check(rows, pooled)
    assert all(c["cells"] == 8 and c["max_abs_z"] <= 4 for c in check.values())
    ess = {(r["G"], r["N"]): r for r in rows if r["statistic"] == "ess"}
    for N in NS:
        a, b = ess[(4, N)], ess[(32, N)]
        assert a["mean"] - b["mean"] > 4 * math.hypot(a["se"], b["se"])
    inv = wp.invariance(rows, N=64)
    assert inv["ess"]["rejected"] == ["p"] and not inv["ess"]["invariant"]
    for name in exact:
        assert abs(inv[name]["pairs"]["p"]["z"]) <= 4, (name, inv[name]["pairs"]["p"])
    kl = inv["kl"]["pairs"]["p"]  # B = 2 at G = 32 against 16 at G = 4: the prompts' spread adds at large G
    assert kl["spread_ratio"] > 1


def test_the_slope_test_and_holm_over_pairs():
    from scipy.stats import norm

    Gs = [4, 8, 16, 32, 64, 128]
    x = np.log2(Gs)
    t = wp.slope_test(Gs, 0.3 + 0.01 * x, [0.002] * 6)
    se = 0.002 / math.sqrt(((x - x.mean()) ** 2).sum())  # 17.5: the spread of 2 .. 7
    assert t["slope"] == pytest.approx(0.01, rel=1e-12) and t["se"] == pytest.approx(se, rel=1e-12)
    assert t["p"] == pytest.approx(2 * norm.sf(0.01 / se), rel=1e-9)
    assert t["ci"][0] < 0.01 < t["ci"][1] and t["rel_slope"] == pytest.approx(0.01 / (0.3 + 0.01 * x.mean()))
    assert math.isnan(wp.slope_test(Gs, 0.3 + 0 * x, [0.002] * 5 + [math.nan])["p"])
    assert math.isnan(wp.slope_test(Gs[:2], [1, 2], [0.1, 0.1])["p"])  # two points: no test

    def rows(pair, z):  # means on a line whose slope is z of its s.e.
        return [{"pair": pair, "statistic": "kl", "G": G, "B": 128 // G, "N": 128, "mean": 1 + z * se * (xi - 4.5),
                 "se": 0.002, "n": 2000} for G, xi in zip(Gs, x)]

    inv = wp.invariance(rows("a", 10) + rows("b", 2.2) + rows("c", 0.5))["kl"]  # p: ~0, 0.028, 0.62
    assert inv["rejected"] == ["a"] and not inv["invariant"]  # b: 0.028 > 0.05 / 2, Holm stops there
    assert [inv["pairs"][k]["holm_rejected"] for k in "abc"] == [True, False, False]
    assert wp.invariance(rows("b", 2.2) + rows("c", 0.5))["kl"]["invariant"]  # 0.028 > 0.05 / 2
    assert wp.invariance(rows("b", 2.5) + rows("c", 0.5))["kl"]["rejected"] == ["b"]  # 0.012 <= 0.05 / 2


def test_the_rule_at_a_fixed_drift_and_its_test():
    from scipy.stats import chi2

    from llm_runs.warning import FROZEN

    tau = FROZEN["threshold"]
    kl = [tau + 0.01] * 7 + [0.0] * 7 + [tau] * 6 + [tau - 7 * 1e-3] + [1.0, 1.0]  # the last two: no whole window
    assert wp.rule_windows(np.array(kl)).tolist() == [1.0, 0.0, 0.0]  # (6 tau + tau - 0.007) / 7 < tau
    assert wp.rule_windows(np.array([tau] * 7)).tolist() == [1.0]  # reaching it fires
    assert wp.homogeneity_test([0.0, 0.0, 0.0], [50, 50, 50])["p"] == 1.0
    assert wp.homogeneity_test([1.0, 1.0], [50, 60])["p"] == 1.0
    t = wp.homogeneity_test([0.1, 0.3], [100, 100])  # expected 20 / 80 in each column: chi^2 = 5 + 5 + 1.25 + 1.25
    assert t["chi2"] == pytest.approx(12.5, rel=1e-12) and t["p"] == pytest.approx(chi2.sf(12.5, 1), rel=1e-9)
    pool = _pool(6, sd=0.6)
    rows = wp.pool_statistics("p", pool["logw"], pool["tok_lr"], pool["mask"], [2, 2], (4, 16), (64,), 70)
    rule = [r for r in rows if r["statistic"] == wp.RULE]
    assert [r["n"] for r in rule] == [10, 10] and all(r["mean"] in {k / 10 for k in range(11)} for r in rule)
    inv = wp.invariance(rows, N=64)[wp.RULE]["pairs"]["p"]
    assert inv["p"] == wp.homogeneity_test([r["mean"] for r in rule], [10, 10])["p"]


def test_pool_shapes_are_checked():
    pool = _pool(4)
    with pytest.raises(ValueError, match="pool shapes disagree"):
        wp.pool_statistics("p", pool["logw"][:, :10], pool["tok_lr"], pool["mask"], [0], (4,), (16,), 5)


# --------------------------------------------------------------------------- the verdicts file


def _rec(G, collapsed, kl, run):
    kl = np.asarray(kl, float)
    return {"run": run, "G": G, "B": 4, "delay": 64, "estimator": "gmc", "collapsed": collapsed,
            "t_collapse": 60 if collapsed else None, "steps": np.arange(len(kl)), "traces": {"kl": kl}}


def _recs(hits=(9, 9), alarms=(1, 3), n=10):
    quiet, loud = np.full(100, 0.01), np.full(100, 0.01)
    loud[40:] = 1.0  # the mean over 7 reaches the frozen threshold at update 40: a lead of 20 before 60
    out = []
    for G, h, f in zip((4, 8), hits, alarms):
        out += [_rec(G, True, loud if i < h else quiet, f"c{G}-{i}") for i in range(n)]
        out += [_rec(G, False, loud if i < f else quiet, f"h{G}-{i}") for i in range(n)]
    return out


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """An empty budget grid folder under a results root of its own; the runs and the plan set by each test."""
    from studies.warning import verdict as v

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    folder = tmp_path / "llm" / "budget"
    folder.mkdir(parents=True)
    state = {"recs": [], "planned": {r["run"] for r in _recs()}}
    monkeypatch.setattr(v, "read_records_in", lambda root: state["recs"])
    monkeypatch.setattr(v, "planned_runs", lambda root: state["planned"])
    return folder, state


def test_the_verdicts_file_is_interim_until_every_planned_run_is_complete(grid, capsys):
    from studies.warning.verdict import VERDICTS_FILE, _main_verdict, verdict

    folder, state = grid
    state["recs"] = _recs()[:30]
    rec = verdict("budget")
    assert rec["verdict"] == "not yet run" and rec["interim"] and (rec["complete"], rec["planned"]) == (30, 40)
    assert rec["interim_verdict"] == "INCONCLUSIVE" and "30 of 40 planned runs" in rec["why"]  # G = 8: none held
    assert rec["pair_invariance"] is None  # no pair_warning_candidates.csv in the folder
    assert _main_verdict("budget") == 0
    assert "[INTERIM: 30 of 40 planned runs]" in capsys.readouterr().out
    written = json.loads((folder / VERDICTS_FILE).read_text())
    assert written["interim"] and written["format"].startswith("gmc-grpo-")
    state["recs"] = _recs()  # all 40: the decision rule reads them
    assert _main_verdict("budget") == 0  # its own file is replaced
    final = json.loads((folder / VERDICTS_FILE).read_text())
    assert not final["interim"] and final["verdict"] == "NOT CONFIRMED" and "interim_verdict" not in final
    assert final["misses"] == {"8": ["false-alarm rate 0.300 > 0.2"]}
    # a run folder the grid does not plan neither completes the set nor enters it: named, left out
    stray = _recs(n=1)[0] | {"run": "not-a-planned-run"}
    state["recs"] = _recs()[:39] + [stray]
    rec = verdict("budget")
    assert rec["verdict"] == "not yet run" and rec["complete"] == 39 and rec["not_planned"] == ["not-a-planned-run"]
    assert "INTERIM" not in capsys.readouterr().out


def test_the_verdicts_file_refuses_a_file_it_did_not_write(grid, capsys):
    from studies.warning.verdict import VERDICTS_FILE, _main_verdict

    folder, state = grid
    state["recs"] = _recs()
    (folder / VERDICTS_FILE).write_text('{"mine": 1}\n')
    assert _main_verdict("budget") == 2
    assert "not written by the toolkit" in capsys.readouterr().err
    assert (folder / VERDICTS_FILE).read_text() == '{"mine": 1}\n'


def test_the_verdicts_file_carries_the_pair_invariance(grid):
    import pandas as pd

    from studies.warning.verdict import verdict

    folder, state = grid
    state["recs"] = _recs()
    pool = _pool(5)
    rows = wp.pool_statistics("p1", pool["logw"], pool["tok_lr"], pool["mask"], [1, 1], GS, (32,), 40)
    pd.DataFrame(rows, columns=list(wp.COLUMNS)).to_csv(folder / wp.CSV_NAME, index=False)
    inv = verdict("budget")["pair_invariance"]
    assert set(inv) == {*wp.STATS, wp.RULE} and inv["kl"]["N"] == wp.N_TEST
    assert all(v["pairs"] == {} and not v["invariant"] for v in inv.values())  # N = 32 only: nothing tested
    rows128 = wp.pool_statistics("p1", pool["logw"], pool["tok_lr"], pool["mask"], [1, 1], (4, 8, 16), (128,), 40)
    pd.DataFrame(rows128, columns=list(wp.COLUMNS)).to_csv(folder / wp.CSV_NAME, index=False)
    kl = verdict("budget")["pair_invariance"]["kl"]["pairs"]["p1"]
    assert kl["G"] == [4, 8, 16] and kl["means"] == [r["mean"] for r in rows128 if r["statistic"] == "kl"]


# --------------------------------------------------------------------------- the report section


def _section():
    from studies.report.sections.warning import warning_section

    md, missing = warning_section()
    assert missing == []
    return "\n".join(md)


def test_the_section_states_the_frozen_rule_and_its_training_table(grid):
    from llm_runs.warning import FROZEN

    text = _section()
    assert text.startswith("## The early warning of collapse (not yet run)")
    assert f"{FROZEN['threshold']:.6g}" in text and "over the last 7 updates" in text
    assert "| 4 | 11 / 14 | 0.79 [0.49, 0.95] | 11 / 81 | 0.14 [0.07, 0.23] | 11 |" in text  # frozen.json's row
    assert "**E3, iso-samples N = 128**" in text and "**E5, iso-samples N = 128**" in text
    assert "not yet measured (`python -m studies.warning --pairs`)" in text
    assert "not yet read; `python -m studies.warning --verdict budget`" in text


def test_the_section_marks_interim_numbers(grid):
    from studies.warning.verdict import _main_verdict

    _, state = grid
    state["recs"] = _recs()[:30]
    assert _main_verdict("budget") == 0
    text = _section()
    assert "**Confirmation: not yet run.** INTERIM: 30 of 40 planned runs" in text
    assert "On them the rule would read INCONCLUSIVE (fewer than 5 collapsed or held runs at G = 8)" in text
    assert "| G (interim) |" in text and "ROC" not in text


def test_the_section_gives_the_verdict_and_the_roc_when_not_confirmed(grid):
    from studies.warning.verdict import _main_verdict

    _, state = grid
    state["recs"] = _recs()
    assert _main_verdict("budget") == 0
    text = _section()
    assert text.startswith("## The early warning of collapse (NOT CONFIRMED)")
    assert "**Confirmation: NOT CONFIRMED**" in text and "G = 8: false-alarm rate 0.300 > 0.2" in text
    assert "**ROC per G**" in text and "| threshold | G = 4 | G = 8 | G = all |" in text
    assert "INTERIM" not in text
    state["recs"] = _recs(alarms=(1, 1))
    assert _main_verdict("budget") == 0
    text = _section()
    assert "**Confirmation: CONFIRMED**" in text and "ROC" not in text


def test_the_section_shows_the_pair_invariance(grid):
    import pandas as pd

    from schema.io import write_json

    folder, _ = grid
    doc = {"format": wp.FORMAT, "pairs": {}}
    every = []
    for i, name in enumerate(("p1", "p2")):
        pool = _pool(10 + i)
        rows = wp.pool_statistics(name, pool["logw"], pool["tok_lr"], pool["mask"], [3, i], (4, 8, 16), (128,), 40)
        every += rows
        doc["pairs"][name] = {"rows": rows, "batches": 40, "agreement_with_pair_warning_stats":
                              {"cells": 9, "max_rel_diff": {"chi2": 1e-16, "ess": 0.0, "max_share": 2e-16},
                               "passed": True}, "exact_check": wp.exact_check(rows, wp.pool_expectations(pool["logw"]))}
    write_json(folder / wp.JSON_NAME, doc)
    pd.DataFrame(every, columns=list(wp.COLUMNS)).to_csv(folder / wp.CSV_NAME, index=False)
    text = _section()
    assert "agree at 2 of 2 pairs" in text and "40 batches per cell" in text
    z = max(p["exact_check"]["chi2_log"]["max_abs_z"] for p in doc["pairs"].values())
    assert z <= 4 and "over 18 cells (2 pairs, every N) the Monte Carlo means lie within" in text
    assert f"`chi2_log` {z:.2f}" in text and "beyond" not in text
    doc["pairs"]["p2"]["exact_check"]["chi2"]["max_abs_z"] = 40.0  # a pool whose tail the batches miss: named
    write_json(folder / wp.JSON_NAME, doc)
    text = _section()
    assert "`chi2` " in text and " at 1 of 2 pairs" in text and "`chi2` at p2 (40.0 s.e.)" in text
    inv = wp.invariance(every)
    for name in wp.STATS:
        assert f"| `{name}` | 2 | {', '.join(inv[name]['rejected']) or 'none'} |" in text
    assert "| pair | G = 4 | G = 8 | G = 16 | slope per doubling [95% CI] | Holm |" in text
    assert "**The frozen rule at a fixed drift** (each pool's: the share of 5 disjoint windows of 7" in text
    rule = inv[wp.RULE]["pairs"]["p1"]
    assert "| p1 | " + " | ".join(f"{m:.2f}" for m in rule["means"]) in text
    kl = next(r for r in every if r["pair"] == "p2" and r["statistic"] == "kl" and r["G"] == 16)
    assert f"{kl['mean']:.4g} +- {kl['se']:.1g}" in text


def test_the_report_places_the_section():
    from studies.report import build as report

    assert "warning_section(report_dir, figures_out, draw_missing, figure_sections)" in inspect.getsource(report.build)
