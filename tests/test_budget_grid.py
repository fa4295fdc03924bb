"""The budget design (docs/PREREGISTRATION-BUDGET.md) as registered: its cells, seeds and order, and the
group-size runs it reuses, equal to the design's settings field for field."""
from __future__ import annotations

import pytest

from studies.budget import grids as bg
from studies.budget import plan


def test_the_design_is_the_preregistered_cells():
    assert bg.splits() == ((4, 4), (4, 8), (8, 4), (4, 16), (8, 8), (16, 4), (4, 32), (8, 16), (16, 8), (32, 4),
                           (8, 32), (16, 16), (32, 8), (16, 32), (32, 16))
    cells = bg.DESIGN.cells()
    main = [c for c in cells if "_cap" not in c.arm and not c.arm.startswith("sgd")]
    assert len(main) == 15 * 5 * 5  # 15 splits x (4 corrections at d = 64 + the d = 0 control) x 5 seeds
    assert {(c.estimator, c.delay) for c in main} == {(e, 64) for e in bg.BUDGET_ESTIMATORS} | {("gmc", 0)}
    mech = [c for c in cells if c not in main]
    assert len(mech) == 2 * (2 + 2) * 5  # two cells x (gmc_cap at kappa 2, 4; gmc, topr under SGD) x 5 seeds
    assert {c.overrides["gmc_cap_kappa"] for c in mech if c.estimator == "gmc_cap"} == {2.0, 4.0}
    assert {(c.overrides["prompts_per_step"], c.overrides["group_size"]) for c in mech} == {(4, 32), (4, 16)}
    sgd = [c for c in mech if c.arm.startswith("sgd")]
    assert {c.overrides["optimizer"] for c in sgd} == {"sgd"} and {c.overrides["lr"] for c in sgd} == {3e-4}
    from llm_runs.config import resolve_config

    for c in cells[:25] + mech:
        cfg = resolve_config(c.overrides)
        want = ("sgd", 3e-4, None) if c in sgd else ("adam", 1e-4, 1.0)
        assert (cfg.optimizer, cfg.lr, cfg.max_grad_norm) == want and (cfg.delay, cfg.steps) == (c.delay, 200)
    assert {c.seed for c in cells} == {0, 1, 2, 3, 4} and len(cells) == 415
    assert all(c.overrides["prompts_per_step"] * c.overrides["group_size"] <= 512 for c in cells)
    assert len({c.name for c in cells}) == len(cells)


def test_the_grid_runs_the_design_less_the_reused_runs_seed_major():
    own = bg.GRIDS["budget"].cells()
    names = {c.name for c in own}
    rows = plan.plan_rows()
    reused = [r for r in rows if r["source"] != "budget"]
    assert len(own) == 295 and len(reused) == 120 and len(rows) == 415
    assert names == {r["name"] for r in rows if r["source"] == "budget"}
    assert not names & {r["name"] for r in reused}
    seeds = [c.seed for c in own]
    assert seeds == sorted(seeds)  # seed-major: a partial grid holds whole seeds
    assert bg.GRIDS["budget"].pairs == ("group_size",)  # the runner checks the reused runs' warm start
    # the reused runs, by name: the iso-samples cells (B = 128 / G), the 16 x 32 block, the SGD 4 x 32 cell
    assert {r["run"].name for r in reused if r["cell"].seed == 0} == (
        {f"long-adamclip0.0001_G{G}-{e}-d64-s0" for G in (4, 8, 16, 32) for e in bg.BUDGET_ESTIMATORS}
        | {f"long-adamclip0.0001_G{G}-gmc-d0-s0" for G in (4, 8, 16, 32)}
        | {f"long-adamclip0.0001_G32B16-{e}-d64-s0" for e in ("gmc", "tic_trunc")}
        | {f"long-sgd0.0003_G32-{e}-d64-s0" for e in ("gmc", "topr")})


def test_every_reused_run_equals_the_design_field_for_field():
    rows = [r for r in plan.plan_rows() if r["source"] != "budget"]
    for r in rows:
        assert plan.reused_differences(r["cell"]) == {}, r["name"]
    c = rows[0]["cell"]
    other = type(c)(c.estimator, c.mode, c.delay, c.seed, {**c.overrides, "lr": 3e-5}, horizon=c.horizon, arm=c.arm)
    assert plan.reused_differences(other) == {"lr": (1e-4, 3e-5)}  # the comparison sees a changed field


def test_a_split_outside_the_design_is_refused():
    with pytest.raises(ValueError, match=r"\(B, G\) = \(32, 32\) is not a cell"):
        bg.split(32, 32)
    with pytest.raises(ValueError, match="not a cell"):
        bg.split(4, 2)


def test_the_cost_line_passes_through_the_measured_budgets():
    assert plan.run_seconds(128) == pytest.approx(66.0) and plan.run_seconds(512) == pytest.approx(180.0)
    assert plan.run_seconds(16) < plan.run_seconds(64) < plan.run_seconds(256)
