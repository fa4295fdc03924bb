"""llm_runs core: training steps, behaviour log-probs, delay-0 reductions, resume determinism,
bad configurations, tokenizer/from_pretrained round trip.

Every test trains a 2-layer, 64-wide Qwen3 (about 70k parameters) on 8 prompts x G = 4 for
a few updates; the warm start is computed once per test run in a temporary cache.
"""
from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, _metrics_without_perf, pd_read, tiny

import estimators
from estimators.losses import trajectory_log_ratio
from llm_runs.config import TrainConfig, config_fields, resolve_config
from llm_runs.presets import char_tokenizer, load_pretrained, save_pretrained
from llm_runs.rollout import completion_logprobs, sample_groups, sample_keys
from llm_runs.tasks import ArithmeticTask, build_task
from llm_runs.train import build_parser, field_flag, main
from llm_runs.trainer import Trainer
from llm_runs.update import flat_params, policy_update
from llm_runs.warmstart import get_warm_start

REPO = Path(__file__).resolve().parents[1]
@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warmstart-cache")


def _run(config, out) -> Trainer:
    trainer = Trainer(config, out, progress=False, log=lambda m: None)
    trainer.run()
    return trainer


# --------------------------------------------------------------------------- training


def test_five_steps_change_every_parameter_and_record_the_delay(cache, tmp_path):
    d = 2
    config = tiny(cache, delay=d, steps=5)
    ws, _ = load_pretrained(get_warm_start(config, build_task(config), log=lambda m: None).path)
    before = {k: v.clone() for k, v in ws.named_parameters()}
    trainer = _run(config, tmp_path / "run")
    after = dict(trainer.policy.named_parameters())
    assert before.keys() == after.keys()
    for name, p0 in before.items():
        unchanged = (after[name].detach() == p0).float().mean().item()
        assert unchanged == 0.0, f"{name}: {unchanged:.1%} of its entries did not change"
    df = pd_read(tmp_path / "run")
    rows = df[df.step < config.steps]
    expected = np.minimum(rows.step.to_numpy(), d)  # the ring holds theta_0 .. theta_t before it is full
    np.testing.assert_array_equal(rows["stale/staleness_max"].to_numpy(), expected)
    np.testing.assert_array_equal(rows["stale/staleness_mean"].to_numpy(), expected)
    assert (rows.step >= d).sum() == 3 and (rows[rows.step >= d]["stale/staleness_max"] == d).all()
    assert torch.all(trainer.last_batch.versions == config.steps - 1 - d)
    assert list(df.step) == list(range(config.steps + 1))  # one row per update + the final evaluation
    assert (rows["train/adv_zero_frac"] < 1).any()


def _rescore_ratio(model, batch, grouped: bool = True) -> torch.Tensor:
    """Trajectory log-ratio of ``model`` against the recorded log mu (grouped: the trainer's
    shared-prompt pass; else one full pass per row)."""
    with torch.no_grad():
        logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                   group_size=batch.group_size if grouped else 1)
    return trajectory_log_ratio(logp, batch.behaviour_logp, batch.completion_mask)


def test_recorded_behaviour_logp_equals_rescoring_with_the_behaviour_snapshot(cache, tmp_path):
    config = tiny(cache, delay=2, steps=4)
    trainer = _run(config, tmp_path / "run")
    batch = trainer.last_batch  # update 3, sampled by theta_1
    assert torch.all(batch.versions == 1) and trainer.source.ring.versions() == [1, 2, 3]
    snapshot = copy.deepcopy(trainer.policy)
    snapshot.load_state_dict(trainer.source.ring.get(1))
    assert _rescore_ratio(snapshot, batch).abs().max().item() <= 1e-5
    assert _rescore_ratio(snapshot, batch, grouped=False).abs().max().item() <= 1e-5
    # the check can fail: the current policy theta_4 is measurably different from theta_1
    assert _rescore_ratio(trainer.policy, batch).abs().max().item() > 1e-3


def test_behaviour_logp_with_left_padded_prompts_and_truncation(cache):
    """Variable-length prompts (2-digit operands) go through generate's left padding; the
    recorded log mu of a top-k sampler is that of the truncated distribution."""
    config = tiny(cache)
    model, tok = load_pretrained(get_warm_start(config, build_task(config), log=lambda m: None).path)
    task = ArithmeticTask(digits=2, terms=2, heldout_size=1, train_size=16, seed=1)
    assert len({len(p.prompt) for p in task.train}) > 1
    G = 3
    keys = sample_keys(0, 0, len(task.train), G)
    batch = sample_groups(model, tok, task, task.train, list(range(16)), G, keys, 0, 4)
    assert batch.prompt_mask.min() == 0  # padding present
    assert _rescore_ratio(model, batch).abs().max().item() <= 1e-5
    assert _rescore_ratio(model, batch, grouped=False).abs().max().item() <= 1e-5
    again = sample_groups(model, tok, task, task.train, list(range(16)), G, keys, 0, 4)
    assert torch.equal(again.completion_ids, batch.completion_ids)  # per-sample keys: reproducible
    topk = sample_groups(model, tok, task, task.train, list(range(16)), G, keys, 0, 4, top_k=2)
    with torch.no_grad():
        logits = model(input_ids=topk.prompt_ids, attention_mask=topk.prompt_mask,
                       position_ids=(topk.prompt_mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
    top2 = torch.log_softmax(torch.topk(logits, 2).values, -1)
    first = topk.completion_ids[:, 0]
    rank = (logits > logits.gather(-1, first[:, None])).sum(-1)
    assert bool((rank < 2).all())
    np.testing.assert_allclose(topk.behaviour_logp[:, 0], top2.gather(-1, rank[:, None]).squeeze(-1), atol=1e-5)


def test_delay_zero_every_trajectory_scheme_gives_weight_one_and_the_same_update(cache):
    config = tiny(cache)
    model, tok = load_pretrained(get_warm_start(config, build_task(config), log=lambda m: None).path)
    task = build_task(config)
    idx = list(range(8))
    batch = sample_groups(model, tok, task, [task.train[i] for i in idx], idx, 4, sample_keys(3, 0, 8, 4), 0, 3)
    assert 0 < batch.rewards.mean() < 1
    start = flat_params(model)
    deltas = {}
    for scheme, micro in [(s, 0) for s in estimators.SCHEMES] + [("gmc", 2)]:
        m = copy.deepcopy(model)
        row = policy_update(m, torch.optim.SGD(m.parameters(), lr=1.0), batch, estimator=scheme, eps=0.2,
                            micro_batch_groups=micro)  # plain step: the update is minus the gradient
        assert abs(row["train/weight_min"] - 1) <= 1e-5 and abs(row["train/weight_max"] - 1) <= 1e-5, scheme
        assert row["stale/mass_cap_frac"] == 0 and row["stale/clip_frac"] == 0
        deltas[(scheme, micro)] = flat_params(m) - start
    ref = deltas[("stale", 0)]
    assert np.abs(ref).max() > 1e-3
    for key, delta in deltas.items():
        # |c - 1| <= 1e-5 (sampler vs trainer float32 rounding), so the gradients agree to ~1e-5 relative
        assert np.abs(delta - ref).max() <= 1e-5 * np.abs(ref).max(), key


# --------------------------------------------------------------------------- resume determinism


def _cli(out, cache, *extra):
    return [sys.executable, "-m", "llm_runs.train", "--out", str(out), "--cache-dir", str(cache), "--no-progress",
            "--model-kwargs", json.dumps(TINY_MODEL), "--warm-start-steps", "40", "--warm-start-lr", "0.003",
            "--warm-start-batch", "64", "--heldout-size", "20", "--eval-train-size", "20", "--prompts-per-step", "8",
            "--group-size", "4", "--steps", "40", "--eval-every", "7", "--checkpoint-every", "3", "--delay", "3",
            "--estimator", "gmc", "--seed", "5", *extra]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(REPO)}


def _start_and_signal(cmd, out, sig, after_checkpoint: int) -> int:
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = out / "checkpoints" / f"step-{after_checkpoint:06d}" / "trainer_state.pt"
    deadline = time.time() + 120
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -sig if sig == signal.SIGKILL else proc.returncode == 128 + sig, err.decode()[-2000:]
    assert not (out / "summary.json").exists(), "the run finished before it could be interrupted"
    return proc.returncode


def test_sigterm_and_sigkill_then_resume_reproduce_the_uninterrupted_run(cache, tmp_path):
    full, broken = tmp_path / "full", tmp_path / "broken"
    subprocess.run(_cli(full, cache), cwd=REPO, env=_env(), check=True, capture_output=True)
    _start_and_signal(_cli(broken, cache), broken, signal.SIGTERM, after_checkpoint=3)
    state = torch.load(max((broken / "checkpoints").iterdir()) / "trainer_state.pt", weights_only=False)
    target = (state["step"] + 5) // 3 * 3 + 3  # the second periodic checkpoint after the resume
    _start_and_signal(_cli(broken, cache, "--resume"), broken, signal.SIGKILL, after_checkpoint=target)
    assert len(pd_read(broken)) >= target  # rows after the last checkpoint are cut back on the next resume
    subprocess.run(_cli(broken, cache, "--resume"), cwd=REPO, env=_env(), check=True, capture_output=True)
    a, b = _metrics_without_perf(full), _metrics_without_perf(broken)
    assert len(a) == 42 and [r[0] for r in b[1:]] == [str(s) for s in range(41)]
    assert a == b
    fa = full / "checkpoints" / "step-000040" / "model.safetensors"
    fb = broken / "checkpoints" / "step-000040" / "model.safetensors"
    assert fa.read_bytes() == fb.read_bytes()


# --------------------------------------------------------------------------- bad configurations

BAD = [
    ({"group_size": 1}, "group_size G must be >= 2"),
    ({"eps": 0.0}, "eps must be a finite number > 0"),
    ({"eps": -0.2}, "eps must be a finite number > 0"),
    ({"delay": -1}, "delay d must be >= 0"),
    ({"estimator": "ppo"}, "unknown estimator 'ppo'"),
    ({"preset": "qwen3-7b"}, "unknown preset 'qwen3-7b'"),
    ({"model_path": "/nonexistent/qwen3"}, "does not exist"),
    ({"model_path": "Qwen/Qwen3-0.6B"}, "never downloaded"),
]


@pytest.mark.parametrize("bad, message", BAD, ids=[next(iter(b)) + "=" + str(next(iter(b.values()))) for b, _ in BAD])
def test_bad_configuration_is_refused_before_any_work(bad, message, tmp_path, monkeypatch, capsys):
    import transformers

    def no_load(*a, **k):
        raise AssertionError("a model load was attempted")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_load)
    with pytest.raises(ValueError, match=message):
        resolve_config(cache_dir=str(tmp_path / "cache"), **bad)
    with pytest.raises(ValueError, match=message):
        Trainer(TrainConfig(cache_dir=str(tmp_path / "cache"), **bad), tmp_path / "out")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in bad.items()]
    assert main(["--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), *flags]) == 2
    assert message.split("'")[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_existing_output_is_never_overwritten_and_resume_needs_a_run(cache, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="already exists"):
        Trainer(tiny(cache), out)
    with pytest.raises(ValueError, match="holds no run"):
        Trainer(tiny(cache), tmp_path / "missing", resume=True)
    assert (out / "notes.txt").read_text() == "keep me"


def test_help_documents_every_flag_with_its_symbol():
    text = build_parser().format_help()
    for f in config_fields():
        assert field_flag(f) in text
        assert f.metadata["symbol"] and f.metadata["help"]
    for symbol in ("[G]", "[epsilon]", "[d]", "[eta]", "[A_i]", "[c_i]"):
        assert symbol in text


def test_help_lists_every_registered_loss():
    """The --estimator help names every loss of the registry (a scheme added later must be listed)."""
    import re

    from estimators.losses import loss_names

    help_text = next(f.metadata["help"] for f in config_fields() if f.name == "estimator")
    listed = set(re.findall(r"[a-z][a-z0-9_]*", help_text))
    missing = [n for n in loss_names() if n not in listed]
    assert not missing, f"--estimator help does not list {missing}"


# --------------------------------------------------------------------------- tokenizer / from_pretrained


def test_char_tokenizer_and_model_round_trip_through_from_pretrained(cache, tmp_path):
    config = tiny(cache)
    task = build_task(config)
    tok = char_tokenizer(task.alphabet)
    assert len(tok) == 14 and tok.pad_token_id == 0 and tok.eos_token_id == 1
    model, _ = load_pretrained(get_warm_start(config, task, log=lambda m: None).path)
    save_pretrained(model, tok, tmp_path / "ckpt")
    model2, tok2 = load_pretrained(tmp_path / "ckpt")
    texts = [p.prompt + p.answer for p in task.train[:50]]
    ids = tok(texts)["input_ids"]
    assert ids == tok2(texts)["input_ids"]
    assert all(len(i) == len(t) for i, t in zip(ids, texts))  # one id per character
    assert tok2.batch_decode(ids) == texts
    assert (tok2.pad_token_id, tok2.eos_token_id, tok2.padding_side) == (0, 1, "left")
    x = torch.tensor(tok([p.prompt for p in task.train[:4]])["input_ids"])
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, model2(input_ids=x).logits)


def test_a_warm_start_and_a_run_record_their_identity_and_the_machine(cache, tmp_path):
    """The warm start's record names its weights (sha256 of the files) and the machine; a run's
    config.json records the machine; two records differ when pc or weights do."""
    from llm_runs.committed_warmstarts import weights_digest
    from llm_runs.warmstart import differs, machine

    config = tiny(cache, steps=1)
    ws = get_warm_start(config, build_task(config), log=lambda m: None)
    assert ws.info["weights_sha256"] == weights_digest(ws.path) and len(ws.info["weights_sha256"]) == 64
    here = machine()
    assert ws.info["machine"] == here and here["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    _run(config, tmp_path / "run")
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["machine"] == here and differs(stored["warm_start"], ws.info) is None
    assert "held-out pc" in differs({**ws.info, "heldout_pc": ws.info["heldout_pc"] + 1e-12}, ws.info)
    assert "weights sha256" in differs({**ws.info, "weights_sha256": "0" * 64}, ws.info)
    old = {k: v for k, v in ws.info.items() if k != "weights_sha256"}  # a record made before weights were hashed
    assert differs(old, ws.info) is None


@pytest.mark.parametrize("field, value", [(f, v) for f in ("lr", "warm_start_lr", "max_grad_norm", "temperature",
                                                            "top_p", "worker_timeout_s")
                                          for v in ("abc", True, [1], math.nan)])
def test_a_real_setting_of_another_type_is_a_value_error_naming_it(field, value):
    """A number setting given a string, a bool or a list (from a config file, or Python) is a ValueError naming
    the setting (a string or a list was a TypeError from a comparison, a bool passed as 1)."""
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value}).validate()
