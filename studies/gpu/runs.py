"""The Qwen3-0.6B study's steps on the device: its own warm start (:func:`warm_start`, trained to a
target pc under the deadline), its runs held to the deadline (:class:`DeadlineExecutor`), its memory
watched (:class:`MemoryMonitor`), its summary table, and its results packed into one small file that
comes back from the device (:func:`export`)."""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import statistics
import threading
import time
from pathlib import Path

import torch

from execution import LocalExecutor
from grids import Grid
from schema.io import write_json
from schema.results import read_json

from .plan import CHI2_RANGE, TASK, GpuPlan, plan_shape, task_token_counts


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


LIGHT_FILES = ("config.json", "metrics.csv", "metrics.csv.gz", "summary.json")
EXPORT_NAME = "gpu_study.tar.gz"


def export(out: Path, dest: Path) -> Path:
    """``dest/gpu_study.tar.gz``: ``out``'s record (the warm start's included), sweep files, logs and each run
    folder's light files (:data:`LIGHT_FILES`), under ``<out's name>/``; the warm start's folder (weights),
    checkpoints and weights stay behind.
    One small file, so that it comes back from a device whose output is a few files
    (``tar xzf gpu_study.tar.gz -C results/llm`` puts it in place)."""
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / EXPORT_NAME
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in out.rglob("*") if p.is_file() and _light(p.relative_to(out).parts)):
            tar.add(path, arcname=str(Path(out.name) / path.relative_to(out)))
    return archive


def _light(rel: tuple[str, ...]) -> bool:
    """Whether the file at ``rel`` (its parts, under the study's folder) is one :func:`export` packs."""
    if len(rel) == 1:
        return rel[0] in ("gpu_study.json", "sweep.json", "summary.csv")
    if rel[0] in ("logs", "warmstart"):
        return rel[0] == "logs"
    return len(rel) == 2 and rel[1] in LIGHT_FILES


def is_export_archive(data: str | bytes) -> bool:
    """True for the bytes of an archive :func:`export` wrote: a gzipped tar whose every file is one of
    a study folder's light files, under one top folder (what ``--export`` may replace)."""
    import io
    import tarfile

    if isinstance(data, str):
        return False
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            parts = [Path(m.name).parts for m in tar.getmembers()]
    except (tarfile.TarError, OSError, EOFError):
        return False
    return len({p[0] for p in parts}) <= 1 and all(len(p) > 1 and _light(p[1:]) for p in parts)


def warm_start(plan: GpuPlan, tokenizer, folder: Path, log, deadline: float | None = None) -> dict:
    """Build the model, train it supervised until its held-out pc reaches ``plan.warm.target_pc``, or
    ``max_steps``, or (checked at each evaluation) ``deadline`` (``time.monotonic``) has passed; save it to
    ``folder`` (``from_pretrained`` layout, float32) and return its record (``stopped``: which of the three).
    A folder that already holds a finished warm start (``warmstart.json``) is reused as it is."""
    import numpy as np

    from llm_runs.config import TrainConfig
    from llm_runs.presets import save_pretrained
    from llm_runs.rollout import evaluate
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import supervised_loss

    from .check import build_model

    done = folder / "warmstart.json"
    if done.is_file():
        info = read_json(done)
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
    write_json(tmp / "warmstart.json", info)
    os.replace(tmp, folder)
    log(f"warm start: {step} supervised steps in {info['wall_s']:.0f} s, held-out pc {info['heldout_pc']:.3f} "
        f"({'reached' if reached else 'did not reach'} {w.target_pc}; stopped at the {stopped.replace('_', ' ')}); "
        f"completions are {completion_tokens} tokens")
    return info


SUMMARY_HEADER = ("estimator", "d", "runs", "final held-out pc", "stable", "chi^2 (median, t >= d)", "tokens/s")


def run_rows(out: Path, study: Grid) -> list[dict]:
    """One row per run folder of ``study`` under ``out`` that has metrics: final pc, stability
    (:func:`grids.run_table.run_row`, the study's rule), median ``stale/chi2`` over the updates
    t >= d, median completion tokens per second."""
    from grids.run_table import run_row
    from schema.results import metrics_path, read_run

    rows = []
    for cell in study.cells():
        run = out / cell.name
        if not run.is_dir() or metrics_path(run) is None:
            continue
        r = run_row(run, cell.name)
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
        pcs = [r["pc_final"] for r in done]
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
