"""Every producer writes under the results root the readers read: ``GMC_RESULTS`` when set."""
from pathlib import Path

from claims import __main__ as claims_cli
from claims.abstract import ABSTRACT_SOURCE_PATH
from grids import sweep as llm_sweep
from llm_runs import smoke
from llm_runs.config import TrainConfig
from llm_runs.warmstart_cache import cache_root
from schema.results import results_root
from simulators import sweep as sim_sweep
from simulators import tuned_sweep


def test_producers_honour_the_results_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert results_root() == tmp_path
    assert sim_sweep.results_dir("bias_vs_G") == tmp_path / "sim" / "bias_vs_G"
    assert sim_sweep.results_dir("bias_vs_G", quick=True) == tmp_path / "sim" / "bias_vs_G-quick"
    assert tuned_sweep.default_out() == tmp_path / "sim" / "tuned_delay"
    assert llm_sweep.SWEEPS["full"].default_out() == tmp_path / "llm" / "sweep"
    assert llm_sweep.SWEEPS["quick"].default_out() == tmp_path / "llm" / "sweep_quick"
    assert claims_cli.default_paths() == tuple(tmp_path / "verify" / n for n in
                                               ("claims.json", "claims.md", "abstract.json"))
    assert ABSTRACT_SOURCE_PATH() == tmp_path / "verify" / "abstract.json"
    assert smoke.default_out().parent == tmp_path / "llm"
    assert cache_root(TrainConfig().cache_dir) == tmp_path / "cache"  # the trainer's warm-start cache


def test_default_results_root_is_the_repository_folder(monkeypatch):
    monkeypatch.delenv("GMC_RESULTS", raising=False)
    assert results_root() == Path(__file__).resolve().parents[1] / "results"


def test_tuned_sweep_writes_under_the_results_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    monkeypatch.setattr(tuned_sweep, "SETTINGS", {**tuned_sweep.SETTINGS, "G": [2, 4], "eps": [0.2]})
    assert tuned_sweep.main(["--no-progress"]) == 0
    import pandas as pd

    df = pd.read_parquet(tmp_path / "sim" / "tuned_delay" / "results.parquet")
    assert len(df) == 3 * 2  # schemes x G: the settings that were asked for
    assert tuned_sweep.main(["--no-progress"]) == 0  # same settings: nothing to do
