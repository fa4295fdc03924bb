"""Warm start: a short supervised phase so RL starts from a policy that sometimes succeeds.

The result is saved with ``save_pretrained`` under ``<cache_dir>/warmstart/<preset>-<hash>/``,
the hash covering every setting that changes it (model, task split, SFT settings, threads,
library versions), and every run with the same settings loads it back with
:func:`llm_runs.presets.load_pretrained`. It is written to a temporary folder and renamed,
so two runs starting together never see half a checkpoint.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .presets import initial_policy, save_pretrained
from .rollout import completion_logprobs, encode_answers, encode_prompts, evaluate

WARM_START_KEYS = ["preset", "model_path", "model_kwargs", "dtype", "task", "digits", "terms", "heldout_size",
                   "train_size", "task_seed", "warm_start_steps", "warm_start_lr", "warm_start_batch",
                   "warm_start_seed", "threads", "max_new_tokens"]
TARGET_ACC = (0.05, 0.60)
_FORMAT = 1


@dataclass
class WarmStart:
    path: Path  # a from_pretrained folder
    info: dict  # settings, accuracies, wall time


def default_max_new_tokens(config, task) -> int:
    return config.max_new_tokens if config.max_new_tokens is not None else task.max_answer_tokens + 1


def warm_start_key(config) -> str:
    import transformers

    return config.hash_of(WARM_START_KEYS, {"torch": torch.__version__, "transformers": transformers.__version__,
                                            "format": _FORMAT})


def supervised_loss(model, tokenizer, problems, device) -> torch.Tensor:
    """Mean cross-entropy of answer tokens + EOS given the prompt."""
    ids, attn = encode_prompts(tokenizer, [p.prompt for p in problems], device)
    ans, mask = encode_answers(tokenizer, [p.answer for p in problems], device)
    logp = completion_logprobs(model, ids, attn, ans)
    return -(logp * mask).sum() / mask.sum()


def get_warm_start(config, task, log=print) -> WarmStart:
    """The cached warm start for ``config`` (computed once)."""
    if config.warm_start_steps == 0 and config.model_path:
        return WarmStart(Path(config.model_path), {"steps": 0, "source": config.model_path})
    key = warm_start_key(config)
    path = Path(config.cache_dir) / "warmstart" / f"{config.preset}-{key}"
    done = path / "warmstart.json"
    if done.is_file():
        info = json.loads(done.read_text())
        log(f"warm start: reusing {path} (held-out greedy accuracy {info['heldout_acc']:.3f})")
        return WarmStart(path, info)
    info = _train(config, task, path, log)
    return WarmStart(path, info)


def _train(config, task, path: Path, log) -> dict:
    import time

    t0 = time.perf_counter()
    model, tokenizer = initial_policy(config, task)
    device = config.device
    max_new = default_max_new_tokens(config, task)
    before = evaluate(model, tokenizer, task, task.heldout, max_new, config.eval_batch_size)
    if config.warm_start_steps:
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=config.warm_start_lr)
        rng = np.random.default_rng([config.warm_start_seed, 0x5F7])
        for _ in range(config.warm_start_steps):
            idx = rng.integers(0, len(task.train), size=config.warm_start_batch)
            loss = supervised_loss(model, tokenizer, [task.train[i] for i in idx], device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval()
    held = evaluate(model, tokenizer, task, task.heldout, max_new, config.eval_batch_size)
    train = evaluate(model, tokenizer, task, task.train[:config.eval_train_size], max_new, config.eval_batch_size)
    info = {"steps": config.warm_start_steps, "key": warm_start_key(config),
            "settings": {k: getattr(config, k) for k in WARM_START_KEYS},
            "heldout_acc_before": before["acc"], "heldout_acc": held["acc"], "heldout_pc": held["pc"],
            "train_acc": train["acc"], "train_pc": train["pc"], "wall_s": time.perf_counter() - t0}
    lo, hi = TARGET_ACC
    flag = "" if lo <= held["acc"] <= hi else f"  WARNING: outside the target range [{lo:.0%}, {hi:.0%}]"
    log(f"warm start: {config.warm_start_steps} supervised steps in {info['wall_s']:.1f}s; held-out greedy accuracy "
        f"{before['acc']:.3f} -> {held['acc']:.3f} (pc {held['pc']:.3f}), training pool {train['acc']:.3f}{flag}")
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_pretrained(model, tokenizer, tmp)
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=2, default=str))
    try:
        os.rename(tmp, path)
    except OSError:  # another run finished the same warm start first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (path / "warmstart.json").is_file():
            raise
        info = json.loads((path / "warmstart.json").read_text())
    return info
