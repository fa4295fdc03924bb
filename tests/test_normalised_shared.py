"""THEORY §8 (normalising optimisers), the shared-parameter model: simulators.shared_softmax's exact sums and
unbiased group estimate, the shared_collapse sweep, claims.shared_model's pattern table and chi^2 levels, and
the theory frame's disagreements between the models."""
from __future__ import annotations

import math

import numpy as np
import pytest

# ------------------------------------------------------------------------ the shared-parameter model


@pytest.mark.parametrize("rank", [1, 2, "H"])
def test_shared_model_exact_sums(rank):
    """J against the V^H enumeration, grad J against finite differences, chi^2 against enumeration."""
    from simulators.shared_softmax import SharedSoftmaxMDP
    from simulators.token_mdp.env import outcomes

    env = SharedSoftmaxMDP(3, 5, rank)
    rng = np.random.default_rng(5)
    th = rng.normal(0, 0.7, (3, env.r))
    tb = th + rng.normal(0, 0.3, th.shape)
    assert env.J_batch(th[None])[0] == pytest.approx(env.enumerate_J(th), rel=1e-12)
    g = env.grad_J_batch(th[None])[0]
    h = 1e-6
    for idx in np.ndindex(th.shape):
        e = np.zeros_like(th)
        e[idx] = h
        fd = (env.J_batch((th + e)[None])[0] - env.J_batch((th - e)[None])[0]) / (2 * h)
        assert g[idx] == pytest.approx(fd, rel=1e-6, abs=1e-10)
    o = outcomes(3, 5)
    lp = log_softmax_rows(env.logits(th[None])[0])
    lpb = log_softmax_rows(env.logits(tb[None])[0])
    lw = (lp - lpb)[np.arange(5), o].sum(-1)
    pb = np.exp(lpb[np.arange(5), o].sum(-1))
    assert env.chi2_batch(th[None], tb[None])[0] == pytest.approx(float((pb * np.expm1(lw) ** 2).sum()), rel=1e-10)


def log_softmax_rows(x):
    from scipy.special import log_softmax

    return log_softmax(x, -1)


def test_shared_model_group_estimate_is_unbiased_for_is():
    """On-policy-lagged IS with leave-one-out advantages is unbiased (Lemma 1): the Monte Carlo mean of
    g_hat over groups matches grad J within 4 standard errors."""
    from simulators.shared_softmax import SharedSoftmaxMDP

    env = SharedSoftmaxMDP(2, 6, 2)
    th = env.start(0.3)
    tb = th + 0.1
    rng = np.random.default_rng(6)
    n, G = 20_000, 4
    tokens = np.stack([env.sample(rng, tb, G) for _ in range(n)])
    g, _ = env.group_estimate(tokens, np.broadcast_to(th, (n,) + th.shape), np.broadcast_to(tb, (n,) + tb.shape),
                              "is", 0.2)
    mean, se = g.mean(0), g.std(0) / math.sqrt(n)
    assert np.all(np.abs(mean - env.grad_J_batch(th[None])[0]) <= 4 * se + 1e-12)


def test_shared_collapse_quick_sweep(tmp_path, monkeypatch):
    """``python -m simulators.sweep shared_collapse --quick`` runs, and its table has one row per run."""
    from claims.shared_model import pattern_table
    from simulators import sweep

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert sweep.main(["shared_collapse", "--quick"]) == 0
    import pandas as pd

    df = pd.read_parquet(tmp_path / "sim" / "shared_collapse-quick" / "results.parquet")
    spec = sweep.registry()["shared_collapse"]
    n_runs = sum(len(s["schemes"]) * sum(len(v) for v in s["optimizers"].values()) for s in spec.table(True))
    assert len(df) == n_runs * len(spec.seeds(True))
    assert set(df["scheme"]) == {"is", "gmc", "topr", "tic_trunc"}
    assert (df["J0"] >= 0.25).all()
    tab = pattern_table(df)
    assert len(tab) == len(spec.table(True)) and tab["pattern"].dtype == bool
    # resumable: a second run skips every finished setting and leaves the results as they were
    before = df.copy()
    assert sweep.main(["shared_collapse", "--quick"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "sim" / "shared_collapse-quick" / "results.parquet"),
                                  before)


def _runs(cell, opt, lr, scheme, collapsed, drift, n=10):
    return [{**cell, "optimizer": opt, "lr": lr, "scheme": scheme, "seed": s, "collapsed": s < collapsed,
             "avg_drift": drift} for s in range(n)]


def test_pattern_table_finds_a_planted_pattern_and_only_it():
    import pandas as pd

    from claims.shared_model import pattern_table

    cell = {"H": 8, "V": 4, "rank": "4", "d": 4}
    rows = (_runs(cell, "adam", 1.0, "is", 10, 0.7) + _runs(cell, "adam", 1.0, "gmc", 6, 0.7)
            + _runs(cell, "adam", 1.0, "topr", 1, 0.7) + _runs(cell, "adam", 1.0, "tic_trunc", 0, 0.7)
            + _runs(cell, "sgd", 2.0, "gmc", 0, 0.9) + _runs(cell, "sgd", 8.0, "gmc", 9, 2.0))
    tab = pattern_table(pd.DataFrame(rows))
    r = tab.iloc[0]
    assert bool(r["pattern"]) and r["sgd_gmc_hold_lrs"] == "2" and r["collapse_gmc"] == pytest.approx(0.6)
    rows_low = [x if not (x["optimizer"] == "sgd" and x["lr"] == 2.0) else {**x, "avg_drift": 0.5} for x in rows]
    assert not bool(pattern_table(pd.DataFrame(rows_low)).iloc[0]["pattern"])  # SGD held only at a smaller drift
    rows_topr = [x if x["scheme"] != "topr" else {**x, "collapsed": x["seed"] < 2} for x in rows]
    assert not bool(pattern_table(pd.DataFrame(rows_topr)).iloc[0]["adam_part"])  # TOPR collapsed in 20%


def test_frame_disagreements():
    import pandas as pd

    from claims.theory_frame import disagreeing_cells
    from figures import f23_theory_frame as f
    from studies.report.build import frame_disagreements

    base = {"c_max": 1.0, "e2_n": 20, "e2_final_J": 0.9, "e2_chi2": 1.0, "e2_bias_sq": 0.0, "e2_ghat_sq": 0.0,
            "shared_n": 10, "shared_lr": 1.0, "llm_n": 10, "llm_pc": 0.5, "llm_chi2": 1.0, "llm_drift": 1.0}
    tab = pd.DataFrame([
        {**base, "scheme": "gmc", "optimizer": "adam", "e2_collapse": 0.0, "shared_collapse": 0.6, "llm_stable": 3},
        {**base, "scheme": "topr", "optimizer": "adam", "e2_collapse": 0.0, "shared_collapse": 0.0, "llm_stable": 10},
        {**base, "scheme": "is", "optimizer": "adam_clip", "e2_collapse": 0.0, "shared_collapse": np.nan,
         "llm_stable": 5},
    ])
    dis = frame_disagreements(tab)
    assert [(c["scheme"], c["model"]) for c in disagreeing_cells(tab)] == [("gmc", "exact E2"), ("is", "exact E2")]
    assert len(dis) == 2  # GMC: E2 holds but LLM unstable; IS + clip: E2 holds but LLM unstable (shared not run)
    assert any("GMC under Adam: the exact E2 predicts it holds" in d for d in dis)
    assert not any("GMC" in d and "shared-parameter" in d for d in dis)  # collapses there and in the LLM: agree
    md = f.markdown(tab)
    assert len(md) == 2 + len(tab) and "| GMC | Adam |" in md[2]


def test_chi2_levels_pools_settings_per_step_size():
    import pandas as pd

    from claims.shared_model import chi2_levels

    def runs(sc, lr):  # three settings per step size; GMC collapses in one of them at the large step
        return ((8, False, 0.1 * lr), (16, sc == "gmc" and lr == 1.0, 0.3 * lr), (8, False, 0.2 * lr))

    rows = [{"optimizer": "adam", "scheme": sc, "lr": lr, "H": h, "collapsed": c, "avg_chi2": x}
            for sc in ("gmc", "topr") for lr in (0.1, 1.0) for h, c, x in runs(sc, lr)]
    tab = chi2_levels(pd.DataFrame(rows))
    assert len(tab) == 4 and set(tab["n"]) == {3}
    top = tab[(tab["scheme"] == "gmc") & (tab["lr"] == 1.0)].iloc[0]
    assert top["stable_share"] == pytest.approx(2 / 3) and top["chi2"] == pytest.approx(0.2)
    assert (tab[tab["scheme"] == "topr"]["stable_share"] == 1.0).all()
