"""The early warning in TRL (EarlyWarningCallback on a TrajectoryGRPOTrainer of a tiny Qwen3 on CPU): a run made to
drift (8 steps per generation at a large step) fires it, an on-policy run (1 step per generation) does not; stop
saves a checkpoint and stops; lower_step halves the rate of every later optimiser step."""
from __future__ import annotations

import logging

import pytest
from datasets import Dataset
from test_integrations_trl import EPS, char_tokenizer, make_args, reward, tiny_qwen3
from transformers import TrainerCallback

from llm_runs.integrations.trl import TrajectoryGRPOTrainer
from llm_runs.integrations.warning_trl import EarlyWarningCallback
from llm_runs.warning import FROZEN, STEP_FACTOR

PROMPTS = ["ab", "cd", "ef", "gh", "ij", "ba", "dc", "fe"] * 4


def _trainer(tmp_path, steps_per_generation, action, max_steps=10):
    tok = char_tokenizer()
    args = make_args(tmp_path, max_steps=max_steps, steps_per_generation=steps_per_generation, learning_rate=0.05)
    trainer = TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, args=args,
                                    train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tok,
                                    estimator="gmc", eps=EPS)
    cb = EarlyWarningCallback(trainer, action)
    trainer.add_callback(cb)
    return trainer, cb


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llm_runs.warning"]


def test_a_drifting_run_fires_and_an_on_policy_run_does_not(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        trainer, cb = _trainer(tmp_path / "drift", 8, "log")
        trainer.train()
    logged = [h for h in trainer.state.log_history if "warn/kl" in h]
    assert len(logged) == 10
    fired = [h["warn/fired"] for h in logged]
    assert fired[:6] == [0] * 6 and fired[-1] == 1
    first = fired.index(1)
    assert logged[first]["warn/kl_rolling"] >= FROZEN["threshold"] and cb.monitor.fired_at == first
    assert len(_warned(caplog)) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        trainer, cb = _trainer(tmp_path / "on_policy", 1, "log")
        trainer.train()
    logged = [h for h in trainer.state.log_history if "warn/kl" in h]
    assert len(logged) == 10 and all(h["warn/fired"] == 0 and h["warn/kl"] == 0.0 for h in logged)
    assert not cb.monitor.fired and not _warned(caplog)


def test_stop_saves_a_checkpoint_and_stops(tmp_path):
    trainer, cb = _trainer(tmp_path, 8, "stop")
    trainer.train()
    first = cb.monitor.fired_at
    assert first is not None and trainer.state.global_step == first + 1 < 10
    assert (tmp_path / f"checkpoint-{first + 1}").is_dir()


def test_lower_step_halves_every_later_step(tmp_path):
    trainer, cb = _trainer(tmp_path, 8, "lower_step")
    seen = []

    class Spy(TrainerCallback):  # runs after cb: the rate the optimiser steps at, against the scheduler's
        def on_pre_optimizer_step(self, args, state, control, **kw):
            seen.append(trainer.optimizer.param_groups[0]["lr"] / trainer.lr_scheduler.get_last_lr()[0])

    trainer.add_callback(Spy())
    trainer.train()
    first = cb.monitor.fired_at
    assert first is not None and first < 9
    assert seen[:first + 1] == pytest.approx([1.0] * (first + 1))
    assert seen[first + 1:] == pytest.approx([STEP_FACTOR] * (len(seen) - first - 1))
    assert trainer.optimizer.param_groups[0]["lr"] == trainer.lr_scheduler.get_last_lr()[0]


def test_off_is_leaving_it_out(tmp_path):
    tok = char_tokenizer()
    trainer = TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, args=make_args(tmp_path),
                                    train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tok,
                                    estimator="gmc", eps=EPS)
    with pytest.raises(ValueError, match="leave the callback out"):
        EarlyWarningCallback(trainer, "off")
    with pytest.raises(ValueError, match="early_warning must be one of"):
        EarlyWarningCallback(trainer, "loud")
