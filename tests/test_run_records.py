"""What a run folder and its caches claim is checked before it is trusted: a resumed run's
settings against its checkpoint, a cached warm start before use, a fresh warm start before it is
cached.

Every trainer here is a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_runs.config import resolve_config
from llm_runs.train import Trainer, main

MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1}
SMALL = {"model_kwargs": MODEL, "warm_start_steps": 5, "heldout_size": 8, "eval_train_size": 8, "prompts_per_step": 2,
         "group_size": 2, "eval_every": 0, "threads": 1}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("records-cache")


def _interrupted_run(cache, out: Path, monkeypatch) -> None:
    """A run stopped (KeyboardInterrupt) during update 5, checkpointed after update 4."""
    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 8, "checkpoint_every": 4, "eps": 0.2})
    real = Trainer.train_step

    def stop_at_5(self, step):
        if step == 5:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(Trainer, "train_step", stop_at_5)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, out, progress=False, log=lambda m: None).run()
    monkeypatch.setattr(Trainer, "train_step", real)


def test_resume_refuses_a_config_json_edited_after_the_checkpoint(cache, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _interrupted_run(cache, out, monkeypatch)
    path = out / "config.json"
    info = json.loads(path.read_text())
    original = dict(info["config"])
    info["config"]["eps"] = 0.9
    info["config"]["lr"] = 0.5
    path.write_text(json.dumps(info))
    before = (out / "metrics.csv").read_bytes()
    assert main(["--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "step-000004" in err and "eps: checkpoint 0.2 vs now 0.9" in err and "lr: checkpoint" in err
    assert "Traceback" not in err
    assert (out / "metrics.csv").read_bytes() == before  # nothing written
    # restored: the run continues
    info["config"] = original
    path.write_text(json.dumps(info))
    assert main(["--out", str(out), "--resume", "--no-progress"]) == 0
