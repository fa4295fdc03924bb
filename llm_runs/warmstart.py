"""Warm start: a short supervised phase so RL starts from a policy that sometimes succeeds.

The result is saved with ``save_pretrained`` under ``<cache_dir>/warmstart/<preset>-<hash>/``
(the default ``cache_dir`` is ``cache/`` under the results root, :func:`llm_runs.warmstart_cache.cache_root`),
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

The warm starts the committed grids started from are committed themselves (:mod:`llm_runs.committed_warmstarts`);
:func:`get_warm_start` takes one before any cache or recomputation, and ``python -m llm_runs.warmstart
--check`` recomputes each committed recipe here and says whether this machine reproduces the committed bits.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from schema.io import dumps_json, loads_json

from .committed_warmstarts import (
    PART_BYTES,
    WARM_START_KEYS,
    check_committed_files,
    committed_configs,
    committed_path,
    committed_record,
    materialise,
    recorded_starts,
    warm_start_key,
    weights_digest,
)
from .presets import initial_policy, save_pretrained
from .rollout import completion_logprobs, encode_answers, encode_prompts, evaluate
from .warmstart_cache import cache_mismatch, cache_root, cached_problem, nonfinite_parameter

TARGET_ACC = (0.05, 0.60)
FINGERPRINT_STEPS = 2
"""Supervised steps of :func:`rounding_fingerprint`: enough for a CPU that rounds differently to
change the weights' bits, few enough to cost about a second."""


@dataclass
class WarmStart:
    path: Path  # a from_pretrained folder
    info: dict  # settings, accuracies, wall time


def default_max_new_tokens(config, task) -> int:
    return config.max_new_tokens if config.max_new_tokens is not None else task.max_answer_tokens + 1


KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA",
              "MKL_CBWR")
"""Environment variables that force a CPU kernel path (torch's dispatch, MKL's and oneDNN's ISA)."""


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
    out = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu_flags": digest,
           "platform": platform.platform(), "processor": platform.processor() or platform.machine()}
    forced = {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)}
    if forced:  # a kernel path forced by the environment (recorded only when set, so records stay comparable)
        out["kernel_env"] = forced
    return out


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


def get_warm_start(config, task, log=print) -> WarmStart:
    """The warm start for ``config``: the committed one (:func:`llm_runs.committed_warmstarts.committed_record`)
    where its settings have one, else the cached one, else computed once and cached. A cached one is checked
    before use (:func:`llm_runs.warmstart_cache.cached_problem`, and its weights against the sha256 its record and
    the committed record give): a bad one is moved aside (``<name>.corrupt-<time>``, never deleted), saying why.
    A warm start whose weights are not finite is never cached."""
    if config.warm_start_steps == 0 and config.model_path:
        return WarmStart(Path(config.model_path), {"steps": 0, "source": config.model_path})
    key = warm_start_key(config)
    path = cache_root(config.cache_dir) / "warmstart" / f"{config.preset}-{key}"
    done = path / "warmstart.json"
    committed = committed_record(config)
    if path.is_dir() and (done.is_file() or any(path.glob("*.safetensors"))):
        problem = cached_problem(path)
        info = loads_json(done.read_text()) if problem is None else {}
        problem = problem or cache_mismatch(path, info, committed)
        if problem is None:
            info.setdefault("weights_sha256", weights_digest(path))  # a record made before weights were hashed
            if committed is not None:
                info = {**committed, "source": "committed", "committed": committed_path(config).name}
            log(f"warm start: reusing {path} (held-out greedy accuracy {info['heldout_acc']:.3f})")
            return WarmStart(path, info)
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        log(f"warning: the cached warm start {path} is unusable ({problem}); moved it to {aside.name}")
    if committed is not None:
        return WarmStart(path, materialise(config, path, committed, log))
    info = _train(config, task, path, log)
    return WarmStart(path, {**info, "source": "computed"})


def rounding_fingerprint(config, task) -> str:
    """sha256 of the weights after the warm-start recipe's first :data:`FINGERPRINT_STEPS` steps on
    this machine: two machines that give the same fingerprint round the recipe the same way. The
    global random states are left as they were."""
    import random

    state = (np.random.get_state(), random.getstate())
    with torch.random.fork_rng(devices=[]):
        model, tokenizer = initial_policy(config, task)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=config.warm_start_lr)
        rng = np.random.default_rng([config.warm_start_seed, 0x5F7])
        for _ in range(FINGERPRINT_STEPS):
            idx = rng.integers(0, len(task.train), size=config.warm_start_batch)
            loss = supervised_loss(model, tokenizer, [task.train[i] for i in idx], config.device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        h = hashlib.sha256()
        for name, p in model.named_parameters():
            h.update(name.encode())
            h.update(p.detach().cpu().contiguous().numpy().tobytes())
    np.random.set_state(state[0])
    random.setstate(state[1])
    return h.hexdigest()


def rounds_as_committed(config, task, info: dict) -> bool | None:
    """Whether this machine rounds the warm-start recipe as the machine that made the committed warm
    start ``info`` did (None: the record has no fingerprint)."""
    recorded = info.get("rounding_fingerprint")
    return None if not recorded else rounds_fingerprint_here(config, task) == recorded


def _train(config, task, path: Path, log) -> dict:
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
    (tmp / "warmstart.json").write_text(dumps_json(info))
    try:
        os.rename(tmp, path)
    except OSError:  # another run finished the same warm start first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (path / "warmstart.json").is_file():
            raise
        info = loads_json((path / "warmstart.json").read_text())
    return info


def rounding_note(config, task, info: dict, log=print) -> str:
    """``"same"`` when this machine rounds the warm-start recipe as the machine that made the committed
    warm start ``info`` (its runs can match the committed runs bit for bit), ``"differs"`` when it
    does not (they match statistically only; said in the log), ``"unknown"`` without a fingerprint."""
    same = rounds_as_committed(config, task, info)
    if same is False:
        log("note: this machine rounds the warm-start recipe differently from the machine that made the committed "
            "warm start; the run starts from the committed weights, and its updates will match runs made there "
            "statistically, not bit for bit")
    return {True: "same", False: "differs", None: "unknown"}[same]


def commit(config, task, log=print, expect_sha256: str | None = None) -> Path:
    """Save this machine's warm start for ``config`` (the cached one, computed if need be) as a committed
    one: weights split into :data:`PART_BYTES` parts, the tokenizer, the record with the weights'
    sha256 and this machine's :func:`rounding_fingerprint`. An existing committed folder is never
    replaced. ``expect_sha256``: the weights the committed runs started from (:func:`recorded_starts`);
    a warm start that hashes otherwise here is refused (``ValueError``) and nothing is committed."""
    dest = committed_path(config)
    if dest.exists():
        raise ValueError(f"{dest} exists: a committed warm start is never replaced")
    ws = get_warm_start(config, task, log)
    if expect_sha256 is not None and ws.info["weights_sha256"] != expect_sha256:
        raise ValueError(f"this machine computes the warm start {warm_start_key(config)} as weights "
                         f"{ws.info['weights_sha256'][:16]} (held-out pc {ws.info['heldout_pc']:.3f}), but the "
                         f"committed runs started from {expect_sha256[:16]}: committing it would give their grids "
                         f"another start; nothing was committed (make it on a machine that rounds as theirs did)")
    info = {k: v for k, v in ws.info.items() if k not in ("source", "committed", "path")}
    info["rounding_fingerprint"] = rounds_fingerprint_here(config, task)
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True)
    for f in sorted(ws.path.iterdir()):
        if f.name == "warmstart.json" or not f.is_file():
            continue
        if f.name.endswith(".safetensors"):
            data = f.read_bytes()
            for i in range(0, max(len(data), 1), PART_BYTES):
                (tmp / f"{f.name}.part-{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
        else:
            shutil.copyfile(f, tmp / f.name)
    (tmp / "warmstart.json").write_text(dumps_json(info) + "\n")
    os.rename(tmp, dest)
    log(f"committed warm start {dest} (weights sha256 {info['weights_sha256'][:16]}, "
        f"held-out pc {info['heldout_pc']:.3f})")
    return dest


@contextmanager
def torch_threads(n: int):
    """``n`` torch CPU threads inside the block (the numerics depend on it), the previous count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def rounds_fingerprint_here(config, task) -> str:
    """:func:`rounding_fingerprint` with ``config.threads`` torch threads, as the trainer computes."""
    with torch_threads(config.threads):
        return rounding_fingerprint(config, task)


def check(config, task, log=print) -> dict:
    """Recompute the committed warm start of ``config`` here (the recipe, into a temporary cache) and
    compare: ``{"committed": sha, "here": sha, "reproduces": bool, "heldout_pc": (committed, here)}``.
    ``committed`` is the hash of the committed weight files as read, checked against their record first
    (:func:`check_committed_files`: a mismatch is a corrupt warm start, a ValueError, never a verdict)."""
    import dataclasses
    import tempfile

    rec = check_committed_files(config)  # the files as read, before any recomputation
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "warmstart" / committed_path(config).name
        path.parent.mkdir(parents=True)
        with torch_threads(config.threads):
            here = _train(dataclasses.replace(config, cache_dir=tmp), task, path, lambda m: None)
    return {"committed": rec["weights_sha256"], "here": here["weights_sha256"],
            "reproduces": here["weights_sha256"] == rec["weights_sha256"],
            "heldout_pc": (rec["heldout_pc"], here["heldout_pc"]), "wall_s": here["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from .tasks import build_task

    p = argparse.ArgumentParser(prog="python -m llm_runs.warmstart", description=(
        "The committed warm starts (llm_runs/warmstarts): --check recomputes each recipe here and says whether "
        "this machine reproduces the committed bits (exit 1 if one does not)."))
    from .reference import COMMITTED_WARM_STARTS

    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true",
                      help="recompute the recipe(s) here and compare with the committed bits")
    what.add_argument("--commit", choices=sorted(COMMITTED_WARM_STARTS), default=None,
                      help="compute this warm start here and commit it, only if its weights are the ones the "
                           "committed runs started from (their run records' sha256)")
    p.add_argument("--only", nargs="+", default=None, metavar="FOLDER", help="check only these committed folders")
    args = p.parse_args(argv)
    bad = 0
    try:
        if args.commit:
            return _commit_recorded(args.commit, build_task)
        configs = committed_configs()
        for name in args.only or []:
            if name not in configs:
                raise ValueError(f"no committed warm start {name!r}; committed: {', '.join(configs)}")
        for name, cfg in configs.items():
            if not args.only or name in args.only:
                check_committed_files(cfg)  # every file checked before any recipe is recomputed
        for name, cfg in configs.items():
            if args.only and name not in args.only:
                continue
            found = check(cfg, build_task(cfg))
            say = ("reproduces the committed bits" if found["reproduces"] else
                   "does NOT reproduce the committed bits: runs here start from the committed weights and match the "
                   "committed runs statistically, not bit for bit")
            print(f"{name}: this machine ({machine()['cpu_capability']}) {say} (sha256 {found['here'][:16]} vs "
                  f"{found['committed'][:16]}; held-out pc {found['heldout_pc'][1]:.3f} vs "
                  f"{found['heldout_pc'][0]:.3f}; {found['wall_s']:.0f} s)")
            bad += not found["reproduces"]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if bad else 0


def _commit_recorded(which: str, build_task) -> int:
    """``--commit WHICH``: the committed-runs' warm start of :data:`llm_runs.reference.COMMITTED_WARM_STARTS`
    ``which``, computed here and committed only if it hashes as they record."""
    from .reference import committed_config

    cfg = committed_config(which)
    if committed_record(cfg) is not None:
        print(f"{which}: already committed ({committed_path(cfg)}); nothing to do")
        return 0
    starts = recorded_starts(warm_start_key(cfg))
    if len(starts) > 1:
        raise ValueError(f"the committed runs record {len(starts)} different warm starts with key "
                         f"{warm_start_key(cfg)} ({', '.join(s[:16] for s in starts)}): which to commit is not "
                         f"determined")
    expect = next(iter(starts), None)
    if expect is None:
        print(f"{which}: no committed run records this warm start; committing what this machine computes")
    else:
        made_on, here = ", ".join(starts[expect]["cpu_flags"]) or "unrecorded", machine()
        print(f"{which}: the committed runs ({starts[expect]['runs']} under {starts[expect]['folder']}, ...) started "
              f"from weights {expect[:16]}, made on CPU flags {made_on}; this machine is "
              f"{here['cpu_flags']} ({here['cpu_capability']}). Computing the recipe here ...")
    commit(cfg, build_task(cfg), expect_sha256=expect)
    return 0


if __name__ == "__main__":
    sys.exit(main())
