"""One step rate across data-parallel ranks: the step-size controls' statistics summed over two
CPU processes (torch.distributed, gloo) give both ranks the factor of one process on the union batch,
extreme and non-finite ratios included, and a rank's refused input is the same ValueError on every rank."""
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
    "ess_sqrt": {"ess_scaling": "sqrt"},
    "ess_linear_clipped": {"ess_scaling": "linear", "ess_use_clipped": True, "estimator": "gmc"},
    "gmc_step": {"gmc_step": True},
    "both": {"ess_scaling": "sqrt", "ess_base_ratio": 0.5, "gmc_step": True},
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


# --- extreme and refused inputs: the union batch's answer on every rank, or one ValueError on every rank --------

def _extreme_shards():
    """name -> (two ranks' log-ratios (prompts_per_step, G)): a log-ratio whose exp overflows float64 on one rank
    only, an infinite one, a NaN one, and ordinary values."""
    zeros = torch.zeros(1, 2, dtype=torch.float64)  # four sequences in all: one weight dominates, the ratio is 1/4

    def with_(value):
        x = zeros.clone()
        x[0, 0] = value
        return x

    g = torch.Generator().manual_seed(1)
    return {
        "finite_800": (with_(800.0), zeros.clone()),
        "finite_800_other_rank": (zeros.clone(), with_(800.0)),
        "plus_inf": (zeros.clone(), with_(math.inf)),
        "nan": (zeros.clone(), with_(math.nan)),
        "ordinary": (torch.randn(2, 4, generator=g, dtype=torch.float64),
                     torch.randn(3, 4, generator=g, dtype=torch.float64) * 0.3),
    }


EXTREME_CONTROLS = {"ess_sqrt": {"ess_scaling": "sqrt"}, "ess_linear": {"ess_scaling": "linear"},
                    "gmc_step": {"gmc_step": True}, "both": {"ess_scaling": "sqrt", "gmc_step": True}}


def _outcome(fn):
    """``("ok", columns)`` or ``("ValueError", message)``."""
    try:
        return "ok", fn()
    except ValueError as exc:
        return "ValueError", str(exc)


def _extreme_rank_main(rank: int, world: int, port: int, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        got = {}
        for case, parts in _extreme_shards().items():
            for name, kw in EXTREME_CONTROLS.items():
                got[case, name] = _outcome(
                    lambda kw=kw, parts=parts: synced_step_scale(StepControl(eps=0.2, **kw), parts[rank], None))
        out[rank] = got
    finally:
        dist.destroy_process_group()


def test_two_ranks_give_the_union_batch_s_answer_for_extreme_ratios_and_refuse_together():
    """Every (case, control) on two gloo ranks against ``step_scale`` of one process on the union batch: the
    same columns (a log-ratio of 800 on one rank: 1/4 as one process, not NaN; +inf: the limit 1/N), or, where
    one process refuses (a NaN or +inf log-ratio under GMC's step form), the same ValueError on both ranks,
    naming the rank and the value (before, the refusing rank left the collective and its peer saw a transport
    error)."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_extreme_rank_main, args=(2, _free_port(), out), nprocs=2, join=True)
        got = dict(out)
    refused = 0
    for case, parts in _extreme_shards().items():
        union = torch.cat(parts)
        for name, kw in EXTREME_CONTROLS.items():
            kind, want = _outcome(lambda kw=kw, union=union: step_scale(StepControl(eps=0.2, **kw), union, None))
            a, b = got[0][case, name], got[1][case, name]
            assert a == b, (case, name)  # one answer on both ranks, bit for bit (or one message)
            assert a[0] == kind, (case, name, a, want)
            if kind == "ValueError":
                refused += 1
                bad = next(r for r, x in enumerate(parts) if not bool(torch.isfinite(x).all()))
                value = float(parts[bad][~torch.isfinite(parts[bad])][0])
                assert f"rank {bad}'s seq_log_ratio[0, 0] = {value}" in a[1], a[1]
                continue
            assert set(a[1]) == set(want), (case, name)
            for key, value in want.items():  # summed by rank, not in one pass: float64 rounding of a few terms
                assert a[1][key] == pytest.approx(value, rel=1e-12, abs=0), (case, name, key)
    # the cases this test exists for happened: 800 gives one process's 1/4, +inf the limit 1/N = 1/4, NaN is refused
    assert got[0]["finite_800", "ess_linear"][1]["step/ess_ratio"] == pytest.approx(0.25, rel=1e-12)
    assert got[1]["plus_inf", "ess_linear"][1]["step/ess_ratio"] == 0.25
    assert got[0]["nan", "gmc_step"][0] == "ValueError" and refused == 4  # nan and +inf under gmc_step and both


def test_a_rank_s_refused_input_is_one_message_from_the_statistics():
    """Without a process group: the flag a refusing rank sends (:func:`refused_statistics`) makes
    :func:`scale_from_statistics` raise the message every rank raises, naming that rank and value."""
    from llm_runs.integrations.step_sync import refused_statistics

    cfg = StepControl(gmc_step=True)
    good = torch.zeros(2, 4, dtype=torch.float64)
    bad = good.clone()
    bad[1, 2] = math.nan
    with pytest.raises(ValueError, match="non-finite"):
        local_statistics(cfg, bad, None)
    stats = torch.stack([local_statistics(cfg, good, None), refused_statistics(cfg, bad, None)])
    with pytest.raises(ValueError, match=r"across 2 ranks: rank 1's seq_log_ratio\[1, 2\] = nan refused"):
        scale_from_statistics(cfg, stats)


def test_no_sequence_on_any_rank_and_a_negative_weight_are_refused_on_every_rank():
    """Statistics of ranks that saw no sequence give no step factor (ESS scaling gave 0, a zero step, where one
    process refuses an empty batch), and a rank's negative weight (ess_use_clipped) is named by rank and index."""
    from llm_runs.integrations.step_sync import refused_statistics

    cfg = StepControl(ess_scaling="sqrt")
    empty = torch.stack([local_statistics(cfg, None, None), local_statistics(cfg, torch.zeros(0, 4), None)])
    with pytest.raises(ValueError, match="no sequence was seen on any rank"):
        scale_from_statistics(cfg, empty)
    clipped = StepControl(ess_scaling="sqrt", ess_use_clipped=True)
    lr, w = torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)
    w[1, 0] = -0.5
    with pytest.raises(ValueError, match=r"got -0.5 at index \(1, 0\)"):
        local_statistics(clipped, lr, w)
    stats = torch.stack([local_statistics(clipped, lr, torch.ones(2, 3)), refused_statistics(clipped, lr, w)])
    with pytest.raises(ValueError, match=r"rank 1's weights\[1, 0\] = -0.5 refused"):
        scale_from_statistics(clipped, stats)
