"""The early warning in verl (llm_runs.integrations.warning_verl), through verl's own training path on one CPU rank
(``TrainingWorker`` + FSDP2, the README snippet's config, ``+actor_rollout_ref.actor.policy_loss.early_warning``):
a run made to drift (behaviour log-probs far from the policy) fires it, an on-policy run (behaviour log-probs the
policy's own before every step) does not; stop saves the engine's checkpoint and stops; lower_step halves every
later step; off installs nothing."""
from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf
from test_integrations_verl import snippet_overrides, verl_config
from test_verl_training_path import (
    CPU_OVERRIDES,
    RESPONSE_LEN,
    B,
    balanced_rows,
    build_actor,
    engine_weights,
    response_log_probs,
    rollout_batch,
    tiny_qwen3,
    to_verl,
)
from transformers import Qwen3ForCausalLM

from llm_runs.integrations import warning_verl
from llm_runs.warning import FROZEN, STEP_FACTOR

STEPS = 8  # the mean over 7 optimiser steps exists from step 6 on


def _actor(tmp_path, *settings):
    vocab = tiny_qwen3(tmp_path)
    overrides = snippet_overrides() + [f"actor_rollout_ref.model.path={tmp_path}"] + CPU_OVERRIDES
    cfg = verl_config(overrides + [f"+actor_rollout_ref.actor.policy_loss.{s}" for s in settings])
    OmegaConf.resolve(cfg)
    worker, _ = build_actor(cfg)
    return worker, vocab


@pytest.fixture
def actors():
    made = []
    yield made
    for worker in made:  # one warned engine per process: leave none behind for the next test
        warning_verl.uninstall_warning(worker.engine)


def _train(worker, vocab, tmp_path, on_policy: bool, steps: int = STEPS):
    """``steps`` optimiser steps (one mini-batch each) on one rollout batch; the loss metrics of each."""
    from verl.utils import tensordict_utils as tu

    tensors, uids, _ = rollout_batch(vocab, seed=1)
    rows = balanced_rows(tensors["attention_mask"], uids)
    reference = Qwen3ForCausalLM.from_pretrained(tmp_path, local_files_only=True, attn_implementation="sdpa",
                                                 dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(2)
    far = torch.log_softmax(torch.randn(B, RESPONSE_LEN, vocab, generator=g), -1)[..., 0]
    out = []
    for _ in range(steps):
        if on_policy:
            reference.load_state_dict(engine_weights(worker), strict=False)
            behaviour = response_log_probs(reference, tensors["input_ids"], tensors["attention_mask"],
                                           tensors["position_ids"])
        else:
            behaviour = far
        tensors["old_log_probs"] = behaviour * tensors["response_mask"]
        tensors["rollout_log_probs"] = tensors["old_log_probs"]
        out.append(dict(tu.get(worker.train_mini_batch(to_verl(tensors, uids, rows)), "metrics")))
    return out


def _warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llm_runs.warning"]


def test_a_drifting_run_fires_and_an_on_policy_run_does_not(tmp_path, actors, caplog):
    worker, vocab = _actor(tmp_path / "drift", "early_warning=log")
    actors.append(worker)
    monitor = worker.engine.early_warning
    assert monitor is not None and monitor.action == "log"
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        metrics = _train(worker, vocab, tmp_path / "drift", on_policy=False)
    assert monitor.fired_at == 6 and len(_warned(caplog)) == 1
    assert worker.engine.early_warning_last["warn/kl_rolling"] >= FROZEN["threshold"]
    assert all("actor/warn/kl" in m for m in metrics)
    warning_verl.uninstall_warning(worker.engine)
    caplog.clear()
    worker, vocab = _actor(tmp_path / "on", "early_warning=log")
    actors.append(worker)
    with caplog.at_level(logging.WARNING, logger="llm_runs.warning"):
        _train(worker, vocab, tmp_path / "on", on_policy=True)
    monitor = worker.engine.early_warning
    assert not monitor.fired and not _warned(caplog)
    assert 0 <= worker.engine.early_warning_last["warn/kl_rolling"] < 1e-4  # FSDP's forward against HF's: rounding


def test_off_installs_nothing(tmp_path, actors):
    worker, vocab = _actor(tmp_path)
    actors.append(worker)
    assert getattr(worker.engine, "early_warning", None) is None
    metrics = _train(worker, vocab, tmp_path, on_policy=False, steps=1)
    assert not any("warn/" in k for k in metrics[0])


def test_stop_saves_the_engines_checkpoint_and_stops(tmp_path, actors):
    ckpt = tmp_path / "ckpt"
    worker, vocab = _actor(tmp_path / "m", "early_warning=stop", f"early_warning_dir={ckpt}")
    actors.append(worker)
    with pytest.raises(warning_verl.EarlyWarningStop, match="at optimiser step 6: checkpoint saved"):
        _train(worker, vocab, tmp_path / "m", on_policy=False)
    assert (ckpt / "global_step_7").is_dir() and any((ckpt / "global_step_7").iterdir())


def test_stop_without_a_folder_is_refused(tmp_path, actors):
    with pytest.raises(ValueError, match="early_warning_dir"):
        _actor(tmp_path, "early_warning=stop")


def test_lower_step_halves_every_later_step(tmp_path, actors):
    worker, vocab = _actor(tmp_path, "early_warning=lower_step")
    actors.append(worker)
    base = worker.engine.optimizer.param_groups[0]["lr"]
    seen = []
    worker.engine.optimizer.register_step_pre_hook(lambda opt, a, k: seen.append(opt.param_groups[0]["lr"] / base))
    _train(worker, vocab, tmp_path, on_policy=False)
    assert worker.engine.early_warning.fired_at == 6
    assert seen == pytest.approx([1.0] * 7 + [STEP_FACTOR] * (STEPS - 7))
    assert worker.engine.optimizer.param_groups[0]["lr"] == base
