"""The one grid schema (schema.grid): the simulators' sweeps and the LLM grids are grids of it, their plans
come from its product and its refusal of a duplicate, and their records are what the committed folders hold."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from schema.grid import as_record, check_plan, derive_seed, setting_key, settings_product

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_the_product_runs_the_first_axis_slowest_on_top_of_the_fixed_settings():
    assert settings_product({"a": [1, 2], "b": ["x", "y"]}, {"c": 0, "a": 9}) == [
        {"c": 0, "a": 1, "b": "x"}, {"c": 0, "a": 1, "b": "y"}, {"c": 0, "a": 2, "b": "x"}, {"c": 0, "a": 2, "b": "y"}]
    assert settings_product({}) == [{}]
    with pytest.raises(ValueError, match="axis 'a' must be a list"):
        settings_product({"a": "12"})


def test_a_plan_that_names_a_cell_twice_is_refused_with_the_name():
    class C:
        def __init__(self, name):
            self.name = name

    assert len(check_plan("g", [C("x"), C("y")])) == 2
    with pytest.raises(ValueError, match=r"grid 'g' plans duplicate cells: \['x'\]"):
        check_plan("g", [C("x"), C("y"), C("x")])


def test_keys_and_seeds_are_stable():
    assert setting_key({"b": 1, "a": 2}) == setting_key({"a": 2, "b": 1})
    assert derive_seed(0, {"a": 1}) == derive_seed(0, {"a": 1}) != derive_seed(1, {"a": 1})
    assert as_record({"t": (1, 2), 3: "x"}) == {"t": [1, 2], "3": "x"}


def test_every_kind_of_grid_is_a_grid_of_the_schema():
    from grids.sweep import SWEEPS
    from simulators.sweep import registry
    from studies.grids import GRIDS

    grids = [*registry().values(), *SWEEPS.values(), *GRIDS.values()]
    for g in grids:
        assert isinstance(g.name, str) and isinstance(g.doc, str), g
        cells = g.cells()
        assert cells and len({c.name for c in cells}) == len(cells), g.name
        assert isinstance(g.record(), dict), g.name


def test_a_simulator_sweep_records_what_its_committed_config_holds():
    from simulators.sweep import registry

    sweeps, seen = registry(), 0
    for path in sorted((RESULTS / "sim").glob("*/config.json")):
        stored = json.loads(path.read_text())
        if stored.get("sweep") not in sweeps:
            continue  # a folder another producer wrote (the tuned sweep)
        ours = sweeps[stored["sweep"]].stored_record(stored["quick"])
        for key in ("sweep", "quick", "settings", "seeds"):
            assert ours[key] == stored[key], (path, key)
        assert [c.name for c in sweeps[stored["sweep"]].cells(stored["quick"])] == \
            [setting_key(s) for s in stored["settings"]]
        seen += 1
    assert seen >= 9


def test_the_first_llm_sweep_plans_the_runs_its_committed_folder_holds():
    from grids.sweep import SWEEPS, plan

    stored = json.loads((RESULTS / "llm" / "sweep" / "sweep.json").read_text())
    assert stored["settings"] == as_record(SWEEPS["full"].record())
    assert [c.name for c in plan(SWEEPS["full"])] == stored["runs"]


@pytest.mark.parametrize("grid", ["drift", "mechanism", "primary"])
def test_every_committed_run_is_a_run_of_its_recorded_grid(grid):
    """A committed grid's runs match the plan its folder records, a setting added after they were made read as
    the value such runs used (schema.runs.LEGACY_FIELDS) on both sides: the drift grid's VCPO arm ran before
    opob_flat_zero existed, and its analysis must not call those runs foreign."""
    from grids import grid_folder
    from grids.check import audit

    found = audit(grid_folder(grid))
    assert found.foreign == {} and found.no_metrics == [] and len(found.runs) > 0
