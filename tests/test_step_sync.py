"""One step rate across data-parallel ranks: the step-size controls' statistics summed over two
CPU processes (torch.distributed, gloo) give both ranks the factor of one process on the union batch."""
from __future__ import annotations

import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from llm_runs.integrations.step_sync import local_statistics, scale_from_statistics, synced_step_scale
from llm_runs.stepsize import StepControl, step_scale

CONTROLS = {
    "ess_sqrt": dict(ess_scaling="sqrt"),
    "ess_linear_clipped": dict(ess_scaling="linear", ess_use_clipped=True, estimator="gmc"),
    "gmc_step": dict(gmc_step=True),
    "both": dict(ess_scaling="sqrt", ess_base_ratio=0.5, gmc_step=True),
}


def shards(seed: int = 0):
    """Two ranks' ratios (prompts_per_step, G) of different sizes and spreads, and their weights."""
    import estimators

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 4, generator=g, dtype=torch.float64) * 0.8
    b = torch.randn(5, 4, generator=g, dtype=torch.float64) * 0.2 + 0.3
    return [(x, estimators.weights("gmc", x, 0.2)) for x in (a, b)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        lr, w = shards()[rank]
        out[rank] = {name: synced_step_scale(StepControl(eps=0.2, **kw), lr, w) for name, kw in CONTROLS.items()}
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_step_at_the_single_process_rate_on_the_union_batch():
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank_main, args=(2, _free_port(), out), nprocs=2, join=True)
        got = dict(out)
    union_lr = torch.cat([lr for lr, _ in shards()])
    union_w = torch.cat([w for _, w in shards()])
    for name, kw in CONTROLS.items():
        want = step_scale(StepControl(eps=0.2, **kw), union_lr, union_w)
        assert got[0][name] == got[1][name], name  # one rate on both ranks, bit for bit
        assert set(got[0][name]) == set(want)
        for key, value in want.items():
            assert got[0][name][key] == pytest.approx(value, rel=1e-12, abs=0), (name, key)
        # and not each rank's own rate: the sync changes the factor on this data
        alone = step_scale(StepControl(eps=0.2, **kw), *shards()[0])
        assert abs(alone["step/lr_scale"] - got[0][name]["step/lr_scale"]) > 1e-3, name


def test_statistics_of_one_rank_reproduce_step_scale():
    lr, w = shards()[0]
    for kw in CONTROLS.values():
        cfg = StepControl(eps=0.2, **kw)
        got = scale_from_statistics(cfg, local_statistics(cfg, lr, w)[None])
        want = step_scale(cfg, lr, w)
        assert got == pytest.approx(want, rel=1e-13)


def test_overflowing_sums_fall_back_to_log_space():
    cfg = StepControl(ess_scaling="sqrt")
    a, b = torch.tensor([[400.0, 0.0]], dtype=torch.float64), torch.tensor([[399.0, 1.0]], dtype=torch.float64)
    stats = torch.stack([local_statistics(cfg, a, None), local_statistics(cfg, b, None)])
    got = scale_from_statistics(cfg, stats)["step/ess_ratio"]
    want = step_scale(cfg, torch.cat([a, b]), None)["step/ess_ratio"]
    assert math.isfinite(got) and got == pytest.approx(want, rel=1e-12)
