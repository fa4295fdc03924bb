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
from .train import Trainer
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
    model, tokenizer = load_pretrained(get_warm_start(config, task, log=lambda m: None).path, config.dtype, config.device)
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
            Trainer(dataclasses.replace(base, **kw).validate(), Path(tmp) / name, progress=False, log=lambda m: None).run()
            df = read_metrics(Path(tmp) / name).dropna(subset=["perf/step_s"]).iloc[2:]
            rate[name] = base.prompts_per_step * base.group_size * len(df) / df["perf/step_s"].sum()
    return {"controlled_samples_per_s": rate["controlled"], "async_samples_per_s": rate["async"],
            "async_vs_controlled_throughput": rate["async"] / rate["controlled"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="updates per timed run (the first is discarded)")
    p.add_argument("--cache-dir", default="results/cache", help="warm-start cache")
    opts = p.parse_args(argv)
    torch.set_num_threads(1)
    for bench in BENCHES:
        for name, value in bench(opts).items():
            print(f"{name}: {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
