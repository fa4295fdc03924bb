"""``make bench`` (the frozen-pair table's part): comparisons in one process, one ``name: value`` line each, on the
committed long-horizon warm start (the pairs' model) with a perturbed copy as pi and the pairs' replicate size
(R = 8 replicates of 128 completions per prompt). Times are the process's CPU seconds (one torch thread), which a
shared machine's load inflates far less than wall-clock seconds.

* ``pair_grads_vs_torch_func_ratio``: seconds of :func:`studies.budget.pairs_grads.per_completion_gradients` (one
  batched forward and backward, per-sample outer products from hooks) over
  :func:`studies.common.pool.per_sample_vectors` (``torch.func``, the group-size study's per-completion
  gradients) on the same 128 completions of one prompt. Below 1: ours is faster.
* ``pair_table_vs_bias_ratio``: seconds of one pair's whole (B, G) table (:func:`studies.budget.pairs.compute`: the
  coefficients, the target, the gradient pass, every cell and the batch simulation, without the validity checks)
  over the group-size study's bias measurement on the same pool (its coefficients and its per-completion vectors
  for the behaviour pool and the target, replicate by replicate, as :func:`studies.group_size.pairs.measure` runs
  them). Below 1: the whole table costs less than the bias alone did.
* ``pair_table_s_per_1k_completions``: the table's seconds per 1000 behaviour-pool completions (the full pools hold
  32 768 per pair, 131 072 for a pair of low ESS).

    python -m studies.budget.pairs_bench [--prompts 2] [--per-prompt 1024]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch


def _setup(prompts: int, per_prompt: int) -> dict:
    from llm_runs.presets import load_pretrained
    from llm_runs.reference import committed_config
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import default_max_new_tokens, get_warm_start
    from studies.common.pool import pool_prompts, sample_pool, token_logp

    cfg = committed_config("long")
    task = build_task(cfg)
    path = get_warm_start(cfg, task, lambda m: None).path
    pib, tok = load_pretrained(path, cfg.dtype, cfg.device)
    pi, _ = load_pretrained(path, cfg.dtype, cfg.device)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in pi.parameters():
            p.add_(0.004 * torch.randn(p.shape, generator=g))
    for m in (pi, pib):
        m.eval()
    for p in pib.parameters():
        p.requires_grad_(False)
    idx = pool_prompts(task)[:prompts]
    mx = default_max_new_tokens(cfg, task)
    chunk = min(128, per_prompt)
    with torch.no_grad():
        b = sample_pool(pib, tok, task, idx, per_prompt, 0, mx, chunk=chunk)
        on = sample_pool(pi, tok, task, idx, per_prompt, 1, mx, chunk=chunk)
        lp_b = token_logp(pi, b)
    return {"models": [pi, pib], "tokenizer": tok, "task": task, "idx": idx, "max_new": mx, "config": cfg, "b": b,
            "on": on, "lp_b": lp_b, "first": None, "quick": True}


def _bias_stage(ctx: dict, R: int) -> None:
    """The group-size study's gradient stage of its bias measurement on ``ctx``'s pools (its coefficients, then its
    per-completion vectors for the behaviour pool's unique coefficient matrices and for the target)."""
    from studies.budget.pairs_pass import dedup, replicate_coefficients
    from studies.common.pairs import PAIR_G
    from studies.common.pool import POOL_SEED, loo_target, per_sample_vectors

    pi, b, on, lp_b = ctx["models"][0], ctx["b"], ctx["on"], ctx["lp_b"]
    n = b["ids"].shape[1] // R
    rng = np.random.default_rng([POOL_SEED, 1])
    for r in range(R):
        rows = slice(r * n, (r + 1) * n)
        rep = replicate_coefficients(lp_b[:, rows], b["blogp"][:, rows], b["mask"][:, rows], b["rewards"][:, rows],
                                     float(ctx["config"].eps), rng, [G for G in PAIR_G if G <= n])
        uniq, _ = dedup(rep["mats"])
        per_sample_vectors(pi, b, rows, torch.stack(uniq))
        per_sample_vectors(pi, on, rows, loo_target(on["rewards"][:, rows])[None])


def main(argv=None) -> int:
    from studies.budget.pairs import compute
    from studies.budget.pairs_grads import per_completion_gradients
    from studies.common.pairs import PAIRS, REPLICATES
    from studies.common.pool import per_sample_vectors

    p = argparse.ArgumentParser(prog="python -m studies.budget.pairs_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--per-prompt", type=int, default=1024, help="behaviour completions per prompt (R = 8 replicates)")
    opts = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="There is a performance drop")
    ctx = _setup(opts.prompts, opts.per_prompt)
    b, pi = ctx["b"], ctx["models"][0]
    prompt = b["prompt_ids"][0][b["prompt_mask"][0].bool()]
    rows, mask = b["ids"][0, :128], b["mask"][0, :128].float()
    t0 = time.process_time()
    per_completion_gradients(pi, prompt, rows, mask)
    t_ours = time.process_time() - t0
    t0 = time.process_time()
    per_sample_vectors(pi, {k: v[:1] for k, v in b.items()}, slice(0, rows.shape[0]), torch.ones(1, 1, rows.shape[0]))
    t_base = time.process_time() - t0
    t0 = time.process_time()
    compute({**ctx, "pair": PAIRS[0]}, R=REPLICATES, mc_cells=(), log=lambda m: None)
    t_table = time.process_time() - t0
    t0 = time.process_time()
    _bias_stage(ctx, REPLICATES)
    t_bias = time.process_time() - t0
    n_b = b["ids"].shape[0] * b["ids"].shape[1]
    print(f"pairs bench: {opts.prompts} prompts x {opts.per_prompt} completions, R = {REPLICATES}, torch threads "
          f"{torch.get_num_threads()}, CPU seconds: per-completion gradients of {rows.shape[0]} rows {t_ours:.2f} "
          f"(torch.func {t_base:.2f}); the table {t_table:.1f}, the bias stage {t_bias:.1f}")
    for name, value in {"pair_grads_vs_torch_func_ratio": t_ours / t_base,
                        "pair_table_vs_bias_ratio": t_table / t_bias,
                        "pair_table_s_per_1k_completions": 1000 * t_table / n_b}.items():
        print(f"{name}: {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
