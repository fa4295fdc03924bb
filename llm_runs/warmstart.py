"""Warm start: a short supervised phase so RL starts from a policy that sometimes succeeds.

The result is saved with ``save_pretrained`` under ``<cache_dir>/warmstart/<preset>-<hash>/``
(the default ``cache_dir`` is ``cache/`` under the results root, :func:`cache_root`),
the hash covering every setting that changes it (model, task split, SFT settings, threads,
library versions), and every run with the same settings loads it back with
:func:`llm_runs.presets.load_pretrained`. It is written to a temporary folder and renamed,
so two runs starting together never see half a checkpoint.

The key does not name the machine, but the result depends on it: the supervised phase is
chaotic enough that float rounding (which kernels the CPU's instruction set selects: AVX2 or
AVX-512, MKL's code path, thread count) changes its outcome, not only its last bits (the long
horizon's warm start reaches held-out pc 0.514 on the machines that made the committed runs and
0.010 on an AVX-512/AMX machine). Each warm start therefore records its own identity
(:func:`identity`: held-out pc, weights hash, the machine) and :func:`differs` tells two apart;
the study refuses to mix runs that started from different ones.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
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


def machine() -> dict:
    """What decides this machine's float rounding: the instruction set torch dispatches to, a digest
    of the CPU's feature flags, and the platform."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1] for line in fh if line.startswith("flags")), "")
    except OSError:
        pass
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16] if flags else None
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu_flags": digest,
            "platform": platform.platform(), "processor": platform.processor() or platform.machine()}


def weights_digest(path: Path) -> str:
    """sha256 of a warm start's ``*.safetensors`` files, in name order."""
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def identity(info: dict) -> dict:
    """The fields of a warm-start record (``warmstart.json``, or the ``warm_start`` block of a run's
    ``config.json``) that tell two warm starts with the same key apart."""
    return {k: info.get(k) for k in ("key", "heldout_pc", "weights_sha256")}


def differs(a: dict, b: dict) -> str | None:
    """Why warm-start records ``a`` and ``b`` are not the same warm start (None: they are). Records
    made before weights were hashed compare by key and held-out pc (a float kept to every bit)."""
    a, b = identity(a), identity(b)
    if a["key"] != b["key"]:
        return f"key {a['key']} vs {b['key']}"
    if a["weights_sha256"] and b["weights_sha256"] and a["weights_sha256"] != b["weights_sha256"]:
        return f"weights sha256 {a['weights_sha256'][:12]} vs {b['weights_sha256'][:12]}"
    if repr(a["heldout_pc"]) != repr(b["heldout_pc"]):
        return f"held-out pc {a['heldout_pc']!r} vs {b['heldout_pc']!r}"
    return None


def supervised_loss(model, tokenizer, problems, device) -> torch.Tensor:
    """Mean cross-entropy of answer tokens + EOS given the prompt."""
    ids, attn = encode_prompts(tokenizer, [p.prompt for p in problems], device)
    ans, mask = encode_answers(tokenizer, [p.answer for p in problems], device)
    logp = completion_logprobs(model, ids, attn, ans)
    return -(logp * mask).sum() / mask.sum()


def cache_root(cache_dir: str | os.PathLike) -> Path:
    """The warm-start cache folder a config's ``cache_dir`` names. The default (``results/cache``,
    the value recorded in run configs) is resolved now, under the results root
    (:func:`schema.results.results_root`, ``GMC_RESULTS``); any other value is taken as given."""
    from schema.results import results_root

    from .config import TrainConfig

    if str(cache_dir) == TrainConfig.__dataclass_fields__["cache_dir"].default:
        return results_root() / "cache"
    return Path(cache_dir)


def nonfinite_parameter(model) -> str | None:
    """The name of the first parameter holding a NaN or inf, or None."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


def cached_problem(path: Path) -> str | None:
    """Why the cached warm start in ``path`` cannot be used (None: it can): ``warmstart.json`` and
    every ``*.safetensors`` file must read whole, and every weight must be finite."""
    try:
        info = json.loads((path / "warmstart.json").read_text())
        if not isinstance(info, dict) or "heldout_acc" not in info:
            return "warmstart.json lacks its record"
    except (OSError, ValueError) as exc:
        return f"warmstart.json is unreadable ({type(exc).__name__})"
    files = sorted(path.glob("*.safetensors"))
    if not files:
        return "it holds no *.safetensors weights"
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                for name in fh.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    if not bool(torch.isfinite(fh.get_tensor(name)).all()):
                        return f"{f.name}: weight {name} holds NaN or inf"
        except Exception as exc:  # noqa: BLE001 (SafetensorError, OSError from a truncated file)
            return f"{f.name} is unreadable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    return None


def get_warm_start(config, task, log=print) -> WarmStart:
    """The cached warm start for ``config`` (computed once). A cached one is checked before use
    (:func:`cached_problem`): a bad one is moved aside (``<name>.corrupt-<time>``, never deleted),
    saying so, and computed again. A warm start whose weights are not finite is never cached."""
    if config.warm_start_steps == 0 and config.model_path:
        return WarmStart(Path(config.model_path), {"steps": 0, "source": config.model_path})
    key = warm_start_key(config)
    path = cache_root(config.cache_dir) / "warmstart" / f"{config.preset}-{key}"
    done = path / "warmstart.json"
    if path.is_dir() and (done.is_file() or any(path.glob("*.safetensors"))):
        problem = cached_problem(path)
        if problem is None:
            info = json.loads(done.read_text())
            info.setdefault("weights_sha256", weights_digest(path))  # a record made before weights were hashed
            log(f"warm start: reusing {path} (held-out greedy accuracy {info['heldout_acc']:.3f})")
            return WarmStart(path, info)
        import time

        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        log(f"warning: the cached warm start {path} is unusable ({problem}); moved it to {aside.name} "
            "and computing it again")
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
    bad = nonfinite_parameter(model)
    if bad is not None:
        raise ValueError(f"the warm start ({config.warm_start_steps} supervised steps, dtype {config.dtype}, "
                         f"lr {config.warm_start_lr}) trained to non-finite weights ({bad}); not cached in {path}. "
                         "Use dtype float32 (or amp bfloat16) or a smaller --warm-start-lr")
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
    info.update({"weights_sha256": weights_digest(tmp), "machine": machine()})
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=2, default=str))
    try:
        os.rename(tmp, path)
    except OSError:  # another run finished the same warm start first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (path / "warmstart.json").is_file():
            raise
        info = json.loads((path / "warmstart.json").read_text())
    return info
