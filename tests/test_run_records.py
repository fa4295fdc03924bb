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
from llm_runs.train import main
from llm_runs.trainer import Trainer

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


# --------------------------------------------------------------------------- results root and warm-start cache


def test_empty_gmc_results_means_unset(monkeypatch, tmp_path):
    from schema.results import ROOT, results_root

    monkeypatch.setenv("GMC_RESULTS", "")
    assert results_root() == ROOT / "results"
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert results_root() == tmp_path


def test_default_cache_dir_follows_the_results_root(monkeypatch, tmp_path):
    from llm_runs.config import TrainConfig
    from llm_runs.warmstart_cache import cache_root

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "res"))
    assert TrainConfig().cache_dir == "results/cache"  # the value recorded in run configs is unchanged
    assert cache_root(TrainConfig().cache_dir) == tmp_path / "res" / "cache"
    assert cache_root(str(tmp_path / "mine")) == tmp_path / "mine"


def _warm(cache, **kw):
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import get_warm_start

    cfg = resolve_config({**SMALL, "cache_dir": str(cache), **kw})
    said = []
    ws = get_warm_start(cfg, build_task(cfg), said.append)
    return ws, "\n".join(said)


def test_truncated_cached_warm_start_is_moved_aside_and_recomputed(tmp_path):
    ws, _ = _warm(tmp_path)
    weights = ws.path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    again, said = _warm(tmp_path)
    assert again.path == ws.path and "model.safetensors is unreadable" in said and str(ws.path) in said
    assert [p for p in ws.path.parent.iterdir() if p.name.startswith(ws.path.name + ".corrupt-")]  # kept, aside
    assert weights.read_bytes() != data[: len(data) // 2]
    _, said = _warm(tmp_path)
    assert "reusing" in said


def test_non_finite_warm_start_is_never_cached(tmp_path, monkeypatch):
    from llm_runs import warmstart

    real = warmstart.supervised_loss
    monkeypatch.setattr(warmstart, "supervised_loss", lambda *a, **k: real(*a, **k) * float("nan"))
    with pytest.raises(ValueError, match=r"non-finite weights .* not cached"):
        _warm(tmp_path)
    assert not any((tmp_path / "warmstart").iterdir()) if (tmp_path / "warmstart").exists() else True


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_earlier_checkpoint(cache, tmp_path, monkeypatch,
                                                                                        capsys):
    import errno

    import llm_runs.checkpoints as ckpt_mod
    import llm_runs.trainer as train_mod

    real, calls = train_mod.save_pretrained, []

    def full_disk_at_second(model, tok, folder):
        calls.append(folder)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.safetensors"))
        return real(model, tok, folder)

    monkeypatch.setattr(train_mod, "save_pretrained", full_disk_at_second)
    out = tmp_path / "run"
    args = ["--out", str(out), "--no-progress", "--cache-dir", str(cache), "--steps", "6", "--checkpoint-every", "2",
            "--model-kwargs", json.dumps(MODEL), "--warm-start-steps", "5", "--heldout-size", "8",
            "--eval-train-size", "8", "--prompts-per-step", "2", "--group-size", "2", "--eval-every", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not write the checkpoint of update 4" in err[0] and "MiB free" in err[0]
    assert "No space left on device" in err[0]
    assert [p.name for p in ckpt_mod.checkpoint_dirs(out)] == ["step-000002"]  # the earlier one is intact
    assert not list((out / "checkpoints").glob("*.tmp"))  # the unfinished write was removed


def test_a_second_signal_during_a_checkpoint_write_waits_for_it(cache, tmp_path):
    import signal

    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 4, "checkpoint_every": 0})
    trainer = Trainer(cfg, tmp_path / "run", progress=False, log=lambda m: None)
    trainer.folder.open()
    trainer._setup()
    handlers = trainer._install_signal_handlers()
    try:
        handler = signal.getsignal(signal.SIGTERM)
        handler(signal.SIGTERM, None)  # the first: stop after the update
        trainer._in_checkpoint = True
        handler(signal.SIGTERM, None)  # the second, inside a write: deferred, not raised here
        trainer._in_checkpoint = False
        assert trainer._hard_stop
        with pytest.raises(KeyboardInterrupt):  # raised once the checkpoint is complete on disk
            trainer.save_checkpoint(1)
        assert (tmp_path / "run" / "checkpoints" / "step-000001" / "trainer_state.pt").is_file()
    finally:
        trainer._restore_signal_handlers(handlers)
        trainer.writer.close()
        trainer.folder.close(False)
