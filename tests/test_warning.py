"""The early warning (llm_runs.warning, studies.warning): the rolling rule, the frozen numbers, the monitor, the
candidates' law against G on the exact models and the verdict reader."""
from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from llm_runs import warning


def test_rolling_summary_by_hand():
    x = [1.0, 3.0, 2.0, math.nan, 5.0, 7.0, 9.0]
    m = warning.rolling_summary(x, 3, "mean")
    assert np.isnan(m[:2]).all() and m[2] == 2.0
    assert np.isnan(m[3:6]).all()  # a window holding the NaN has no value
    assert m[6] == 7.0
    assert warning.rolling_summary(x, 3, "median")[2] == 2.0
    assert warning.rolling_summary([1.0, math.inf], 2)[1] == math.inf
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="window"):
            warning.rolling_summary(x, bad)
    with pytest.raises(ValueError, match="summary"):
        warning.rolling_summary(x, 2, "max")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("summary", ["mean", "median"])
def test_first_firing_all_equals_a_loop(seed, summary):
    rng = np.random.default_rng(seed)
    x = rng.gamma(1.0, 0.1, 60)
    x[rng.integers(60, size=3)] = math.nan
    steps = np.arange(60) + 5
    taus = np.quantile(x[np.isfinite(x)], [0.1, 0.5, 0.9, 0.99]).tolist() + [10.0]
    got = warning.first_firing_all(x, steps, 4, taus, summary)
    s = warning.rolling_summary(x, 4, summary)
    for tau, g in zip(taus, got):
        want = next((int(steps[i]) for i in range(60) if np.isfinite(s[i]) and s[i] >= tau), math.inf)
        assert g == want
        assert warning.first_firing(x, steps, 4, tau, summary) == (None if math.isinf(want) else want)


def test_the_library_holds_the_frozen_rule():
    from studies.warning.verdict import FROZEN_FILE, frozen_rule

    doc = json.loads(FROZEN_FILE.read_text())
    assert {k: doc[k] for k in warning.FROZEN} == warning.FROZEN
    assert frozen_rule()["statistic"] == "kl"
    bad = FROZEN_FILE.parent / "x"
    assert not bad.exists()


def test_frozen_rule_refuses_a_mismatch(tmp_path):
    from studies.warning.verdict import FROZEN_FILE, frozen_rule

    doc = json.loads(FROZEN_FILE.read_text())
    p = tmp_path / "frozen.json"
    p.write_text(json.dumps({**doc, "threshold": doc["threshold"] * 2}))
    with pytest.raises(ValueError, match="not the frozen one"):
        frozen_rule(p)


def test_monitor_fires_once_and_acts(caplog):
    w = warning.EarlyWarning("stop", window=3, threshold=1.0, where="t")
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        rows = [w.observe(x, t) for t, x in enumerate([0.1, 2.0, 2.0, 0.1, 5.0, 5.0])]
    assert [r["warn/fired"] for r in rows] == [0, 0, 1, 1, 1, 1]
    assert math.isnan(rows[1]["warn/kl_rolling"]) and rows[2]["warn/kl_rolling"] == pytest.approx(4.1 / 3, rel=1e-15)
    assert w.fired_at == 2 and not w.should_stop() and w.step_scale() == 1.0  # stop acts once, at the firing
    assert len([r for r in caplog.records if "early warning" in r.getMessage()]) == 1
    once = warning.EarlyWarning("stop", window=1, threshold=1.0)
    assert [(once.observe(x, t), once.should_stop())[1] for t, x in enumerate([0.5, 3.0, 3.0])] == [False, True, False]
    low = warning.EarlyWarning("lower_step", window=1, threshold=1.0)
    assert low.step_scale() == 1.0 and not low.should_stop()
    low.observe(3.0, 0)
    assert low.step_scale() == warning.STEP_FACTOR
    quiet = warning.EarlyWarning("log", window=1, threshold=1.0)
    quiet.observe(3.0, 0)
    assert not quiet.should_stop() and quiet.step_scale() == 1.0


def test_monitor_state_replays_from_the_log():
    xs, steps = [0.1, 0.3, 0.2, 0.9, 0.8, 0.05], list(range(6))
    a = warning.EarlyWarning("log", window=2, threshold=0.8)
    for t, x in zip(steps, xs):
        a.observe(x, t)
    b = warning.EarlyWarning("log", window=2, threshold=0.8)
    b.replay(xs, steps)
    assert b.state_dict() == a.state_dict() == {"values": [0.8, 0.05], "fired_at": 4, "last_step": 5}
    c = warning.EarlyWarning("log", window=2, threshold=0.8)
    c.load_state_dict(a.state_dict())
    assert c.observe(0.9, 6) == a.observe(0.9, 6)


def test_monitor_refuses_bad_settings():
    with pytest.raises(ValueError, match="early_warning must be one of"):
        warning.EarlyWarning("loud")
    with pytest.raises(ValueError, match="threshold"):
        warning.EarlyWarning("log", threshold=math.nan)
    with pytest.raises(ValueError, match="step_factor"):
        warning.EarlyWarning("log", step_factor=1.5)

    class Off:
        early_warning = "off"

    assert warning.monitor_for(Off()) is None
    Off.early_warning = "sometimes"
    with pytest.raises(ValueError, match="'sometimes'"):
        warning.monitor_for(Off())


def test_monitor_batch_statistic_is_the_k3_kl():
    import torch

    from llm_runs.theory import kl_per_token

    g = torch.Generator().manual_seed(0)
    lr = torch.randn(6, 5, generator=g, dtype=torch.float64) * 0.3
    mask = (torch.rand(6, 5, generator=g) > 0.3).double()
    w = warning.EarlyWarning("log", window=1, threshold=100.0)
    row = w.observe_batch(lr, mask, 0)
    sel = mask.bool()
    want = float((torch.expm1(lr[sel]) - lr[sel]).mean())
    assert row["warn/kl"] == kl_per_token(lr, mask)
    assert abs(row["warn/kl"] - want) <= 64 * np.finfo(np.float64).eps * want


# --------------------------------------------------------------------------- the law against G (exact models)

POOLED = ("kl", "chi2_log", "chi2", "abs_log_w")


@pytest.mark.parametrize("model", ["e3", "e5"])
def test_pooled_statistics_have_one_mean_at_every_G(model):
    from studies.warning import invariance as inv

    Gs = (4, 16, 128)
    res = (inv.e3_law if model == "e3" else inv.e5_law)(Gs=Gs, reps=300, seed=3)
    for G in Gs:
        for k, exact in res["exact"].items():
            s = res["per_G"][G][k]
            assert abs(s["mean"] - exact) <= 4 * s["se"], (model, G, k, s, exact)
    ess = [res["per_G"][G]["ess"] for G in Gs]  # the current rule's statistic moves with G
    assert ess[0]["mean"] - ess[-1]["mean"] > 4 * math.hypot(ess[0]["se"], ess[-1]["se"])


def test_pooled_spread_depends_on_N_not_G():
    from studies.warning import invariance as inv

    fixed_b = inv.e3_law(Gs=(4, 64), reps=300, seed=4, B=4)  # N = 16 and 256
    sd = [fixed_b["per_G"][G]["kl"]["sd"] for G in (4, 64)]
    assert 2.5 < sd[0] / sd[1] < 6.5  # sqrt(256 / 16) = 4, with 300 batches' sampling error on each sd
    share = [fixed_b["per_G"][G]["max_share"] for G in (4, 64)]
    assert share[0]["mean"] - share[1]["mean"] > 4 * math.hypot(share[0]["se"], share[1]["se"])
    for k in POOLED:
        a, b = (fixed_b["per_G"][G][k] for G in (4, 64))
        assert abs(a["mean"] - b["mean"]) <= 4 * math.hypot(a["se"], b["se"]), k


# --------------------------------------------------------------------------- the verdict reader


def _rec(G, collapsed, t_collapse, kl, run):
    kl = np.asarray(kl, float)
    return {"run": run, "G": G, "B": 4, "delay": 64, "estimator": "gmc", "collapsed": collapsed,
            "t_collapse": t_collapse, "steps": np.arange(len(kl)), "traces": {"kl": kl}}


def _grid(hit_per_G, fa_per_G, n=10, lead=20):
    """Per G, n collapsed runs of which ``hit`` are warned ``lead`` updates before their collapse at update 60,
    and n held runs of which ``fa`` are warned."""
    recs = []
    quiet, loud = np.full(100, 0.01), np.full(100, 0.01)
    loud[60 - lead:] = 1.0  # (1 + 6 x 0.01) / 7 = 0.151: the mean over 7 reaches the threshold at update 60 - lead
    for G in (4, 8):
        for i in range(n):
            recs.append(_rec(G, True, 60, loud if i < hit_per_G[G] else quiet, f"c{G}-{i}"))
            recs.append(_rec(G, False, None, loud if i < fa_per_G[G] else quiet, f"h{G}-{i}"))
    return recs


def test_decide_confirms_misses_and_refuses_thin_strata():
    from studies.warning.verdict import decide, frozen_rule

    rule = frozen_rule()
    ok = decide(_grid({4: 9, 8: 8}, {4: 2, 8: 1}), rule)
    assert ok["verdict"] == "CONFIRMED", ok["why"]
    rows = {r["G"]: r for r in ok["table"]}
    assert (rows[4]["hits"], rows[4]["false_alarms"], rows[4]["lead_median"]) == (9, 2, 20.0)
    assert rows[4]["hit_ci"][0] < 0.9 < rows[4]["hit_ci"][1]
    miss = decide(_grid({4: 7, 8: 8}, {4: 2, 8: 3}), rule)
    assert miss["verdict"] == "NOT CONFIRMED"
    assert miss["misses"] == {"4": ["hit rate 0.700 < 0.8"], "8": ["false-alarm rate 0.300 > 0.2"]}
    assert set(miss["roc"]) == {"4", "8", "all"}
    short = decide(_grid({4: 9, 8: 9}, {4: 0, 8: 0}, lead=5), rule)
    assert short["verdict"] == "NOT CONFIRMED" and "median lead 5.0 < 10 updates" in short["misses"]["4"]
    thin = decide(_grid({4: 4, 8: 4}, {4: 0, 8: 0}, n=4), rule)
    assert thin["verdict"] == "INCONCLUSIVE"


def test_verdict_says_not_yet_run(tmp_path, monkeypatch):
    from studies.warning.verdict import _main_verdict, verdict

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    rec = verdict("budget")
    assert rec["verdict"] == "not yet run" and rec["runs"] == 0
    assert _main_verdict("budget") == 0
    assert not (tmp_path / "llm" / "budget").exists()  # nothing written into a grid that has not started


# --------------------------------------------------------------------------- the drift reader reads it in every stack


@pytest.mark.parametrize("stack,column,first", [("toolkit", "warn/kl", 0), ("verl", "actor/warn/kl", 1),
                                                ("trl", "mech/kl", 1)])
def test_the_drift_reader_applies_the_rule_under_each_stacks_names(tmp_path, capsys, stack, column, first):
    from grids import drift_place

    kl = [0.01] * 10 + [1.0] * 10  # (1 + 6 x 0.01) / 7 >= the threshold: fires at the first large update
    rows = [{"step": t + first, column: v} for t, v in enumerate(kl)]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert drift_place.main([str(path), "--stack", stack, "--delay", "2", "--group-size", "8"]) == 0
    out = capsys.readouterr().out
    assert f"fires at update 10 [{column}]" in out
    quiet = [{"step": t + first, column: 0.01} for t in range(20)]
    path.write_text("\n".join(json.dumps(r) for r in quiet) + "\n")
    assert drift_place.main([str(path), "--stack", stack, "--delay", "2", "--group-size", "8"]) == 0
    assert "does not fire in 20 updates (largest mean 0.01)" in capsys.readouterr().out


def test_the_warning_line_names_what_is_missing():
    import pandas as pd

    m = pd.DataFrame({"step": [0, 1], "stale/ess": [1.0, 0.9]})
    assert "not readable, this run logs none of warn/kl, drift/kl, mech/kl" in warning.warning_line(m, "toolkit",
                                                                                                  m["step"])
    with pytest.raises(ValueError, match="unknown stack"):
        warning.warning_line(m, "jax", m["step"])
