"""``make bench`` (LLM part): wall-clock comparisons, one ``name: value`` line each.

* ``step_vs_trl_ratio``: median seconds per update of this trainer (GMC at delay 8, the
  full snapshot machinery) divided by TRL's ``GRPOTrainer`` (trl 1.16) on identical work: the
  same warm-started ``tiny-cpu`` model and tokenizer, the same prompt pool (all prompts have the
  same token length), B prompts x G completions, the same completion budget, temperature 1, no
  top-k/top-p, one optimiser step per batch, no KL term, one torch thread each. TRL's gradient
  checkpointing (its default) is turned off, since it is extra work. Values <= 1 mean we are no
  slower. Most of our margin comes from running each group's shared prompt once in the
  training pass (``llm_runs.rollout.completion_logprobs(..., group_size=G)``); sampling costs
  about the same in both.

* ``async_vs_controlled_throughput``: samples per second used by updates (B*G per update over
  the summed ``perf/step_s``: rollout or wait + update) of the asynchronous mode (GMC,
  ``max_staleness`` 2, queue 1, weights synced every update) divided by the controlled mode
  (GMC at delay 2) on the same work: same model, prompts, B x G and number of updates, one
  torch thread for the learner and one for the rollout worker. Above 1 means generation
  overlaps learning; the ideal is (rollout + update) / max(rollout, update) time. The first
  two updates (worker start-up) are discarded.

* ``long_vs_trl_ratio``: the same comparison on the staleness study's long horizon
  (:mod:`llm_runs.reference`: the 247k-parameter model, the scratchpad task with completions of
  H = 18 tokens, B = 16 x G = 8, GMC at delay 4), with completion tokens per second of each
  (TRL's: our completion tokens per update over its step time, the work being the same B x G x H)
  and our step split: ``long_rollout_s``, ``long_update_s`` per update and ``long_eval_s`` per
  held-out evaluation (200 problems: greedy decoding and the teacher-forced ``pc``). The
  warm start is cut to 50 steps (speed does not depend on it; every completion has H tokens
  either way). The target is a ratio of at most 0.5; without changing a bit of the training
  numbers it is out of reach: per update (CPU time, one thread) about 40% is sampling (19
  forward passes over 128 rows, mostly the SDPA flash kernel and the matmuls) and 60% the
  update (its forward ~35%, backward ~60%), and the Python around the kernels, which
  :mod:`llm_runs.qwen3_forward` removes, is under a tenth of it.

Each benchmark is a function returning ``{name: value}`` appended to :data:`BENCHES`.

    python -m llm_runs.bench [--steps 6] [--cache-dir results/cache]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .config import resolve_config
from .presets import load_pretrained
from .tasks import build_task
from .trainer import Trainer
from .warmstart import default_max_new_tokens, get_warm_start

BENCHES: list[Callable[[argparse.Namespace], dict[str, float]]] = []


def benchmark(fn):
    BENCHES.append(fn)
    return fn


def ours_step_seconds(config, steps: int, workdir: Path) -> list[float]:
    """perf/step_s (rollout + update) of each update of a short run."""
    from .metrics import read_metrics

    out = workdir / f"ours-{config.estimator}-d{config.delay}"
    Trainer(config.__class__(**{**config.to_dict(), "steps": steps, "eval_every": 0, "checkpoint_every": 0}), out,
            progress=False, log=lambda m: None).run()
    return read_metrics(out)["perf/step_s"].dropna().tolist()


def trl_step_seconds(config, steps: int, workdir: Path) -> list[float]:
    """Seconds per ``GRPOTrainer`` step, measured by a callback around each optimiser step."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task = build_task(config)
    model, tokenizer = load_pretrained(get_warm_start(config, task, log=lambda m: None).path, config.dtype,
                                       config.device)
    problems = {p.prompt: p for p in task.train}

    def reward(prompts, completions, **kw):  # TRL strips EOS when decoding: count a completion as finished
        return [task.reward(problems[p], c, finished=True) for p, c in zip(prompts, completions)]

    class Timer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    timer = Timer()
    B, G = config.prompts_per_step, config.group_size
    args = GRPOConfig(
        output_dir=str(workdir / "trl"), per_device_train_batch_size=B * G, num_generations=G,
        max_completion_length=default_max_new_tokens(config, task), learning_rate=config.lr, max_steps=steps,
        temperature=config.temperature, top_p=1.0, top_k=0, beta=0.0, num_iterations=1, epsilon=config.eps,
        loss_type="grpo", scale_rewards="group", gradient_checkpointing=False, report_to="none", use_cpu=True,
        save_strategy="no", logging_steps=10**9, disable_tqdm=True, seed=config.seed, bf16=False, fp16=False,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": [p.prompt for p in task.train]}),
                          callbacks=[timer])
    trainer.train()
    return timer.times


@benchmark
def step_vs_trl(opts) -> dict[str, float]:
    config = resolve_config(preset="tiny-cpu", estimator="gmc", delay=8, seed=0, cache_dir=opts.cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        get_warm_start(config, build_task(config))  # cached before anything is timed
        ours = ours_step_seconds(config, opts.steps, tmp)[1:]  # the first update warms up
        trl = trl_step_seconds(config, opts.steps, tmp)[1:]
    o, t = statistics.median(ours), statistics.median(trl)
    return {"ours_step_s": o, "trl_step_s": t, "step_vs_trl_ratio": o / t}


@benchmark
def long_vs_trl(opts) -> dict[str, float]:
    from .metrics import read_metrics
    from .reference import HORIZONS, STUDY_BASE

    config = resolve_config({**STUDY_BASE, **HORIZONS["long"], "warm_start_steps": 50, "estimator": "gmc", "delay": 4,
                             "seed": 0, "cache_dir": opts.cache_dir})
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        get_warm_start(config, build_task(config))
        out = tmp / "ours-long"
        Trainer(dataclasses.replace(config, steps=opts.steps, eval_every=max(1, opts.steps // 2), checkpoint_every=0),
                out, progress=False, log=lambda m: None).run()
        m = read_metrics(out).dropna(subset=["perf/step_s"]).iloc[1:]  # the first update warms up
        evals = read_metrics(out)["perf/eval_s"].dropna()
        trl = trl_step_seconds(config, opts.steps, tmp)[1:]
    o, t = float(m["perf/step_s"].median()), statistics.median(trl)
    tokens = float((m["perf/tokens_per_s"] * m["perf/step_s"]).median())  # completion tokens per update
    return {"long_ours_step_s": o, "long_trl_step_s": t, "long_vs_trl_ratio": o / t,
            "long_ours_tokens_per_s": tokens / o, "long_trl_tokens_per_s": tokens / t,
            "long_rollout_s": float(m["perf/rollout_s"].median()), "long_update_s": float(m["perf/update_s"].median()),
            "long_eval_s": float(evals.median())}


@benchmark
def async_vs_controlled(opts) -> dict[str, float]:
    from .metrics import read_metrics

    base = resolve_config(preset="tiny-cpu", estimator="gmc", seed=0, cache_dir=opts.cache_dir, threads=1,
                          steps=opts.steps + 2, eval_every=0, checkpoint_every=0)
    runs = {"controlled": {"mode": "controlled", "delay": 2},
            "async": {"mode": "async", "max_staleness": 2, "queue_size": 1, "sync_every": 1}}
    rate = {}
    with tempfile.TemporaryDirectory() as tmp:
        get_warm_start(base, build_task(base))  # cached before anything is timed
        for name, kw in runs.items():
            Trainer(dataclasses.replace(base, **kw).validate(), Path(tmp) / name, progress=False,
                    log=lambda m: None).run()
            df = read_metrics(Path(tmp) / name).dropna(subset=["perf/step_s"]).iloc[2:]
            rate[name] = base.prompts_per_step * base.group_size * len(df) / df["perf/step_s"].sum()
    return {"controlled_samples_per_s": rate["controlled"], "async_samples_per_s": rate["async"],
            "async_vs_controlled_throughput": rate["async"] / rate["controlled"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="updates per timed run (the first is discarded)")
    p.add_argument("--cache-dir", default="results/cache", help="warm-start cache")
    p.add_argument("--only", default=None, help="comma-separated benchmark function names (default: all)")
    opts = p.parse_args(argv)
    torch.set_num_threads(1)
    only = set(opts.only.split(",")) if opts.only else None
    for bench in BENCHES:
        if only is not None and bench.__name__ not in only:
            continue
        for name, value in bench(opts).items():
            print(f"{name}: {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
