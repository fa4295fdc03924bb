"""What the figure test modules share (tests/test_figures*.py): the checkout's root, the figure modules
(:data:`MODULES`, :func:`mod`), synthetic result tables and run folders, the ``results`` fixture (a results
folder with a synthetic claims.json; import ``results_fixture`` to use it), the ``llm_df`` fixture (a synthetic
LLM sweep read back; import ``llm_df_fixture``) and :func:`line` (one drawn series)."""
from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

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


@pytest.fixture(name="results")
def results_fixture(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    write_claims(tmp_path)
    return tmp_path


def line(fig, *parts):
    """The one series tagged ``series:<parts>``, as (x, y) arrays."""
    gid = ":".join(("series",) + parts)
    found = [ln for ln in style.series_lines(fig) if ln.get_gid() == gid]
    assert len(found) == 1, (gid, [ln.get_gid() for ln in style.series_lines(fig)])
    return np.asarray(found[0].get_xdata(), float), np.asarray(found[0].get_ydata(), float)


@pytest.fixture(name="llm_df")
def llm_df_fixture(results):
    write_llm_runs(results / "llm" / "sweep_quick")
    return data.read_llm_runs()
