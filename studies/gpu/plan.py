"""The Qwen3-0.6B study's plan: its shapes and budgets (:data:`PLANS`), what a run costs on the GPU
(memory, time; :func:`cost_model`) and how the plan is described before anything runs.
:mod:`studies.gpu.run` runs it."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from llm_runs.reference import HORIZONS, STUDY_BASE

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
"""``gpu``: the device run (shape :data:`~studies.gpu.check.QWEN3_0_6B_SHAPE`); ``tiny``: its CPU rehearsal
(shape :data:`~studies.gpu.check.TINY_SHAPE`, vocabulary the tokenizer's). The tiny plan's deadline is a
guard on a busy machine, not its length: it takes about a minute of CPU time (two cores, 6 trainer processes),
and the cost model prices the H200, not a CPU."""


def plan_shape(plan: GpuPlan) -> dict:
    from .check import QWEN3_0_6B_SHAPE, TINY_SHAPE

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
    from llm_runs.tasks import ScratchpadTask
    from schema.results import scratchpad_horizon

    if tokenizer is None:
        return 2 * TASK["terms"], scratchpad_horizon(STUDY_BASE["digits"], TASK["terms"])
    task = ScratchpadTask(STUDY_BASE["digits"], TASK["terms"], 200, None, 0)
    prompts = {len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) for p in task.heldout}
    answers = {len(tokenizer(p.answer, add_special_tokens=False)["input_ids"]) + 1 for p in task.heldout}
    if len(prompts) != 1 or len(answers) != 1:
        raise ValueError(f"the tokenizer gives prompts of {sorted(prompts)} and completions of {sorted(answers)} "
                         f"tokens: the task needs one length each (one token per character)")
    return prompts.pop(), answers.pop()


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
