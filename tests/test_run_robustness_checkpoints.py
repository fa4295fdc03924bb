"""Faults around run folders: corrupt checkpoints (the newest intact one taken, none refused by name, a
checkpoint written under a temporary name), failures before step 0 that leave nothing behind, and a torn
metrics row rewritten on resume.

Every trainer here is a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from _run_folders import MODEL, SMALL, _flags, _steps_once, cache_fixture  # noqa: F401 (a fixture)

from llm_runs.config import resolve_config
from llm_runs.train import main
from llm_runs.trainer import Trainer

# --------------------------------------------------------------------------- corrupt checkpoints


def _interrupted_run(cache, out: Path, keep: int, monkeypatch) -> Trainer:
    """A run stopped (KeyboardInterrupt) during update 9, with checkpoints after updates 4 and 8 (keep=2)."""
    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                          "keep_checkpoints": keep})
    trainer = Trainer(cfg, out, progress=False, log=lambda m: None)
    real = Trainer.train_step

    def stop_at_9(self, step):
        if step == 9:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(Trainer, "train_step", stop_at_9)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    monkeypatch.setattr(Trainer, "train_step", real)
    return trainer


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("victim", ["model.safetensors", "trainer_state.pt"])
def test_corrupt_latest_checkpoint_falls_back_to_the_newest_intact_one(cache, tmp_path, monkeypatch, victim):
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-000004", "step-000008"]
    _truncate(out / "checkpoints" / "step-000008" / victim)
    said = []
    result = Trainer(resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                                     "keep_checkpoints": 2}), out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete"
    text = "\n".join(said)
    assert victim in text and "step-000004" in text and "newest intact checkpoint" in text
    assert any(p.name.startswith("step-000008.corrupt-") for p in (out / "checkpoints").iterdir())  # kept, aside
    _steps_once(out, 13)


def test_corrupt_only_checkpoint_is_refused_naming_the_file(cache, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=1, monkeypatch=monkeypatch)
    _truncate(out / "checkpoints" / "step-000008" / "model.safetensors")
    assert main(["--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no intact checkpoint" in err and "model.safetensors" in err and "step-000008" in err
    assert "Traceback" not in err


def test_checkpoint_is_written_under_a_temporary_name_then_renamed(cache, tmp_path, monkeypatch):
    """A checkpoint is written under step-N.tmp: a write that fails removes it and names the fault; one
    cut short by a crash (the process killed mid-write) leaves step-N.tmp, never a checkpoint, and resume
    removes it."""
    out = tmp_path / "run"
    import llm_runs.checkpoints as ckpt_mod
    import llm_runs.trainer as train_mod

    def crash(*a, **k):
        raise OSError("disk full")

    trainer = _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    monkeypatch.setattr(train_mod.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_checkpoint(9)
    monkeypatch.undo()
    assert not (out / "checkpoints" / "step-000009.tmp").exists()
    (out / "checkpoints" / "step-000009.tmp").mkdir()  # what a process killed mid-write leaves
    assert [p.name for p in ckpt_mod.checkpoint_dirs(out)] == ["step-000004", "step-000008"]
    # resuming removes the cut-short write (it was never a checkpoint) and continues from step 8
    (out / "checkpoints" / "step-000011.tmp").mkdir()  # a cut-short write of a step the resumed run never saves
    said = []
    result = Trainer(resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                                     "keep_checkpoints": 2}), out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete" and "resuming" in "\n".join(said) and "step-000008" in "\n".join(said)
    assert "step-000011.tmp" in "\n".join(said) and not list(out.rglob("*.tmp"))
    _steps_once(out, 13)


# --------------------------------------------------------------------------- failures before step 0


def _unwritable_outs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    outs = [a_file / "run"]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        outs.append(ro / "run")
    elif Path("/sys").is_dir():
        outs.append(Path("/sys/gmc-robustness-test/run"))  # root cannot mkdir there (EPERM)
    return outs


def test_unwritable_out_is_a_one_line_error(cache, tmp_path, capsys):
    for out in _unwritable_outs(tmp_path):
        assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2)]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(out) in err and "Traceback" not in err
        assert not out.exists()


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_missing_device_is_refused_before_the_folder_is_made(cache, tmp_path, capsys, device):
    available = torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    if available:
        pytest.skip(f"this machine has a {device} device")
    out = tmp_path / "run"
    assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2, device=device)]) == 2
    err = capsys.readouterr().err
    assert f"device {device!r}" in err and "--device cpu" in err
    assert not out.exists()


@pytest.mark.parametrize("kwargs,match", [
    ({"num_key_value_heads": 3}, "rejected by the Qwen3 model"),
    ({"head_dim": 7}, "rejected by Qwen3Config"),
    ({"hidden_size": -1}, "rejected by the Qwen3 model"),
    ({"hidden_act": "nope"}, "rejected by the Qwen3 model"),
])
def test_model_kwargs_the_model_rejects_are_refused_before_the_folder_is_made(cache, tmp_path, capsys, kwargs, match):
    out = tmp_path / "run"
    flags = _flags(cache, steps=2, model_kwargs={**MODEL, **kwargs})
    assert main(["--out", str(out), "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2)]) == 0  # a retry is not blocked


def test_failure_before_step_0_leaves_nothing_behind(cache, tmp_path, monkeypatch):
    import llm_runs.trainer as train_mod

    def boom(*a, **k):
        raise RuntimeError("warm start failed")

    monkeypatch.setattr(train_mod, "get_warm_start", boom)
    for out in (tmp_path / "new" / "deeper" / "run", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 2})
        with pytest.raises(RuntimeError, match="warm start failed"):
            Trainer(cfg, out, progress=False, log=lambda m: None).run()
        if out.name == "empty":  # a folder the user made stays, empty
            assert out.is_dir() and list(out.iterdir()) == []
        else:
            assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("torn_step, resumed_from", [(5, "step-000004"), (2, None)])
def test_a_torn_metrics_row_before_the_last_checkpoint_is_rewritten(cache, tmp_path, monkeypatch, torn_step,
                                                                    resumed_from):
    """A row cut in half (a crash mid-write, the row flushed but not on disk) that lies before the last
    checkpoint: resume takes the newest checkpoint at or before it (or the start), moves the newer ones
    aside, rewrites the rows from there, says so, and the finished run equals one never interrupted."""
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    path = out / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    whole = lines[1 + torn_step]
    lines[1 + torn_step] = whole[: len(whole) // 2] + "\n"
    path.write_text("".join(lines))
    said = []
    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4, "keep_checkpoints": 2})
    result = Trainer(cfg, out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete"
    text = "\n".join(said)
    assert f"the row of update {torn_step} is torn" in text and "rewriting the rows" in text
    assert "step-000008.superseded-" in text
    if resumed_from:
        assert f"resuming {out} from {resumed_from}" in text
    _steps_once(out, 13)
    clean = tmp_path / "clean"
    Trainer(cfg, clean, progress=False, log=lambda m: None).run()
    a, b = pd.read_csv(path), pd.read_csv(clean / "metrics.csv")
    cols = [c for c in a.columns if not c.startswith("perf/")]
    pd.testing.assert_frame_equal(a[cols], b[cols])
