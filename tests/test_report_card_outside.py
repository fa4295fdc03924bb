"""``python -m report_card``: a card for a correction defined outside the package (sequence-level IS
truncated at 2) end to end, a token-level one, the frontier place and the drift map, and the README's
snippet.

The end-to-end test runs the card's --quick parts with smaller settings than the command's
``--quick`` (which takes about 4 minutes on this machine): the simulator part on 2 of the committed
20 seeds, and the LLM smoke on 1 seed (the command's --quick: 2) of 3 updates from a 5-step warm
start with 20 held-out problems (so not paired with the committed runs; the card says so).
Everything else is the command's own code. About 30 s on an idle 2-core machine, 77 s at load 7.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _report_card import ROOT, _cell, loaded_fixture  # noqa: F401 (a fixture)

from report_card.load import CorrectionError, registered_correction, validate

# --------------------------------------------------------------------------- a new correction, end to end


def test_a_correction_from_outside_the_package_end_to_end(tmp_path, loaded):
    """seq_is_trunc (c = min(w, 2)) at eps = 0.2 is tic_trunc at eps = 1 (min(w, 1 + 1)): the card's
    exact moments and simulator runs must equal that registered scheme's, computed independently."""
    from report_card import card as card_mod
    from report_card import simulate
    from simulators.delay import static_behaviour
    from simulators.delay_sweeps import make_instance
    from simulators.optimizer_sweeps import run_setting
    from simulators.peers import CASES, exact_moments, token_view

    corr = loaded("seq_is_trunc")
    validate(corr)
    seeds = [0, 1]
    smoke = {"steps": 3, "eval_every": 3, "warm_start_steps": 5, "checkpoint_every": 0, "heldout_size": 20}
    c = card_mod.compute(corr, tmp_path / corr.name, quick=True, jobs=1, llm_overrides=smoke, llm_seeds=(0,),
                         sim_seeds=seeds, log=lambda *_: None)
    paths = card_mod.write(c, tmp_path / corr.name)
    assert all(p.is_file() for p in paths) and (tmp_path / corr.name / "frontier.png").is_file()
    text = paths[0].read_text()
    # membership: declared sup C = 2 is what the search finds; not a member of C_eps at eps = 0.2
    row = c["membership"]["rows"][0]
    assert row["declared_sup"] == 2.0 and row["search_max"] == pytest.approx(2.0, rel=1e-9)
    assert not row["declaration_wrong"] and not row["member_by_search"]
    assert c["robustness"]["passed"] and c["robustness"]["cases"] == 212
    # exact moments: tic_trunc at eps = 1, by the sweep's own function
    for r in c["moments"]:
        case = next(v for v in CASES.values() if v["env"] == r["env"])
        env, theta, _, u = make_instance(case["env"], case["instance"])
        ref = exact_moments(token_view(env, theta, static_behaviour(theta, r["Delta"], u)), case["G"], 1.0, "tic_trunc")
        assert r["bias_norm"] == pytest.approx(ref["bias_norm"], rel=1e-10, abs=1e-15)
        assert r["second_moment"] == pytest.approx(ref["second_moment"], rel=1e-10)
    assert len(c["moments"]) == 12 and {f["Delta"] for f in c["frontier"]} == {0.5, 1.0, 2.0, 3.0, 4.0}
    # simulator: tic_trunc at eps = 1 on the same seeds gives the same final J
    _, setting, _ = simulate.committed()
    ref, _ = run_setting({**setting, "scheme": "tic_trunc", "eps": 1.0}, seeds)
    got = {(r["optimizer"], r["d"]): r["final_J"] for r in c["simulator"]["table"] if r["scheme"] == corr.name}
    for (opt, d), v in got.items():
        want = ref[(ref["optimizer"] == opt) & (ref["d"] == d)]["final_J"].mean()
        assert v == pytest.approx(want, rel=1e-9), (opt, d)
    assert {x["n"] for x in c["simulator"]["differences"]} == {len(seeds)}
    # LLM smoke: its own 2 runs ran, from this card's folder, and were not paired with the study's
    short = _cell(c["llm"], "short", 64, "adam")
    assert short["state"].startswith("computed") and short["self"]["n"] == 1 and short["references"] == {}
    assert math.isfinite(short["self"]["pc_final"])
    assert sorted(p.name for p in (tmp_path / corr.name / "llm" / "adam").glob("short-*")) == \
        ["short-seq_is_trunc-d64-s0"]
    assert _cell(c["llm"], "long", 64, "adam")["state"] == "not computed"
    assert "python -m report_card --module" in text and "Smoke settings" in text
    assert np.isfinite([r["bias_norm"] for r in c["moments"]]).all()
    # THEORY §8: no table row for a new scheme; its exact sign-error probabilities at claims 20-22's points
    t8 = c["theory8"]
    assert t8["available"] and not t8["row"] and len(t8["points"]) == 5
    assert all(0 <= r["p_sign_median"] <= r["p_sign_max"] <= 1 for r in t8["points"])


def test_the_frontier_place_equals_f9s_summary():
    """GMC's card: dominated at E2, Delta = 1 only, by the estimators F9's caption names
    (claims.measures.peers_summary, an independent reading of the same table)."""
    from claims.measures import peers_summary
    from report_card import exact

    committed = exact.committed_peers()
    place = exact.frontier_place(exact.moments(registered_correction("gmc"), committed), committed)
    summary = peers_summary(committed)
    for env, s in summary.items():
        mine = {f["Delta"]: f["dominated_by"] for f in place if f["env"] == env and f["dominated_by"]}
        assert {D: sorted(v) for D, v in mine.items() if D != s["Delta"]} == \
            {D: sorted(v) for D, v in s["gmc_dominated_at"].items()}
        at_max = next(f for f in place if f["env"] == env and f["Delta"] == s["Delta"])
        assert at_max["on_frontier"] == s["gmc_on_frontier"] \
            and sorted(at_max["dominated_by"]) == sorted(s["gmc_dominated_by"])
    assert summary["token_mdp"]["gmc_dominated_at"] == {1.0: ["snis", "seq_tis_bn"]}  # not a vacuous comparison


def test_a_machine_whose_warm_start_differs_is_refused(tmp_path, loaded, monkeypatch):
    """The LLM part runs nothing where grids.check.check_warm_starts refuses this machine's warm start."""
    import grids.check
    import grids.runner
    from report_card import llm

    corr = loaded("seq_is_trunc")
    validate(corr)

    def refuse(folder, warm):
        raise ValueError("this machine's warm start is not the one the runs in X started from")

    monkeypatch.setattr(grids.runner, "_warm_starts", lambda grid: {})
    monkeypatch.setattr(grids.check, "check_warm_starts", refuse)
    part = llm.part(corr, tmp_path, quick=True, log=lambda *_: None)
    cell = _cell(part, "short", 64, "adam")
    assert cell["state"] == "refused" and "warm start is not the one" in cell["why"] and "self" not in cell
    assert not (tmp_path / "llm").exists()


def test_a_token_level_correction_from_outside(loaded):
    """A token loss: validated, swept for robustness, no group mass (not in C_eps's terms), no simulator
    form; its delay-0 gradient is IS's divided by the completion length (1/18 at the long horizon)."""
    from report_card import exact, llm, robustness, simulate

    corr = loaded("token_tis")
    assert corr.level == "token"
    from report_card.load import BATTERY_G

    assert validate(corr)[0]["evaluated"] == 24 * len(BATTERY_G)  # 12 log-ratios within +-30, two signs, per G
    rob = robustness.sweep(corr.name)
    assert rob["passed"] and rob["cases"] == 212
    assert not exact.membership(corr)["applies"] and not simulate.run(corr)["applies"]
    eq = llm.delay0_equivalence(corr.name)
    assert eq["kind"] == "scaled" and eq["scale"] == pytest.approx(1 / 18, rel=1e-12)
    assert llm.stands_for(eq, "adam") and not llm.stands_for(eq, "adamwclip")
    with pytest.raises(CorrectionError, match=r"token loss 'token_not_scalar' returns a loss of shape \(8,\)"):
        validate(loaded("token_not_scalar"))


def test_the_drift_of_a_cell_and_its_place_on_the_map(tmp_path, monkeypatch):
    """A cell's early KL is llm_runs.drift.summary's, median over its runs; it is placed on a map that is
    not provisional (llm_runs.drift.place) and not on a provisional one."""
    from grids import drift_place
    from llm_runs.drift import read_export, summary
    from report_card import llm_numbers

    runs = [["results/llm/mechanism", f"long-adamwclip-topr-d64-s{s}"] for s in (0, 1, 2)]
    kl = sorted(summary(*read_export(ROOT / r[0] / r[1]))["kl_early"] for r in runs)[1]
    row = {"estimator": "x", "optimizer": "adam", "boundary": 2 * kl, "censored": None,
           "levels": [{"drift": kl, "stable_share": 1.0, "n": 3}]}
    path = tmp_path / "map.json"
    monkeypatch.setattr(drift_place, "map_path", lambda: path)
    for provisional in (True, False):
        path.write_text(json.dumps({"axis": "kl", "provisional": provisional, "seeds": 10, "boundaries": [row]}))
        d = llm_numbers.drift(runs)
        assert d["kl_early"] == kl and d["kl_runs"] == 3
        if provisional:
            assert d["map"].startswith("pending: the drift study's map is provisional (10 whole seeds)")
        else:
            assert d["map"] == "placed" and d["held_at_nearest_level"] == d["below_boundary"] == ["x (adam)"]


def test_the_readme_s_add_a_correction_snippet_loads_and_validates(tmp_path):
    """The code block of the README's "Add a correction in three steps", written to a file outside the
    package as a new user would, registers a correction the card's loader accepts and validates."""
    import re
    from pathlib import Path

    from report_card.load import load_correction, unload, validate

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Add a correction in three steps"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    path = tmp_path / "my_correction.py"
    path.write_text(code)
    try:
        corr = load_correction(path)
        rows = validate(corr)  # a CorrectionError on any wrong shape, NaN or negative weight
        assert corr.name == "seq_is_trunc" and rows[0]["evaluated"] > 0 and rows[1]["result"] == "2"
    finally:
        unload(path)
