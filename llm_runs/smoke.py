"""``make llm-smoke``: warm start, then GMC at delay 4 for 50 updates on ``tiny-cpu``, printing
held-out greedy accuracy (and pc) before and after. A few minutes at most on 2 CPU cores.

    python -m llm_runs.smoke [--out results/llm/smoke-<time>] [--steps 50]

Exit status 0 when held-out accuracy rose, 1 when it did not (reported, never hidden).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import resolve_config
from .trainer import Trainer

SMOKE = {"preset": "tiny-cpu", "estimator": "gmc", "delay": 4, "steps": 50, "eval_every": 10, "seed": 0}


def default_out() -> Path:
    """``llm/smoke-<UTC time>`` under the results root (``GMC_RESULTS`` or ``results/``)."""
    from schema.results import results_root

    return results_root() / "llm" / f"smoke-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llm_runs.smoke", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="run folder (default: llm/smoke-<UTC time> under the results root)")
    p.add_argument("--steps", type=int, default=SMOKE["steps"], help="updates T")
    p.add_argument("--cache-dir", default=None, help="warm-start cache (default: the config default)")
    args = p.parse_args(argv)
    out = args.out or default_out()
    overrides = {**SMOKE, "steps": args.steps}
    if args.cache_dir:
        overrides["cache_dir"] = args.cache_dir
    t0 = time.perf_counter()
    config = resolve_config(overrides)
    result = Trainer(config, out).run()
    wall = time.perf_counter() - t0
    if result.status != "complete":
        print(f"llm-smoke: interrupted after {result.step} updates ({result.summary['signal']}); "
              f"continue with python -m llm_runs.train --out {result.out} --resume")
        return 130
    s = result.summary
    rose = s["heldout_acc_end"] > s["heldout_acc_start"]
    print(f"llm-smoke: {config.estimator} at delay {config.delay}, {config.steps} updates of "
          f"{config.prompts_per_step}x{config.group_size} completions, out {result.out}")
    print(f"held-out greedy accuracy before: {s['heldout_acc_start']:.3f}  after: {s['heldout_acc_end']:.3f}")
    print(f"held-out pc (exact P(correct))  before: {s['heldout_pc_start']:.3f}  after: {s['heldout_pc_end']:.3f}")
    print(f"training-pool accuracy          before: {s['train_acc_start']:.3f}  after: {s['train_acc_end']:.3f}")
    print(f"seconds per update (median): {s['step_s_median']:.3f}   wall time: {wall:.1f} s")
    print(f"held-out accuracy rose: {'yes' if rose else 'NO'}")
    return 0 if rose else 1


if __name__ == "__main__":
    sys.exit(main())
