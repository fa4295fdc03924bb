"""``python -m report_card``: bad correction files refused before any work, the registered cards'
numbers equal the committed study's, and a card for a correction defined outside the package
(sequence-level IS truncated at 2) end to end.

The end-to-end test runs the card's --quick parts with smaller settings than the command's
``--quick`` (which takes about 4 minutes on this machine): the simulator part on 2 of the committed
20 seeds, and the LLM smoke on 1 seed (the command's --quick: 2) of 3 updates from a 5-step warm
start with 20 held-out problems (so not paired with the committed runs; the card says so).
Everything else is the command's own code. About 30 s on an idle 2-core machine, 77 s at load 7.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from report_card.load import CorrectionError, load_correction, registered_correction, unload, validate

FIX = Path(__file__).resolve().parent / "card_fixtures"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def loaded():
    paths = []

    def load(name):
        paths.append(FIX / f"{name}.py")
        return load_correction(paths[-1])

    yield load
    for p in paths:
        unload(p)


# --------------------------------------------------------------------------- bad files


def test_a_file_that_registers_nothing_is_refused():
    import estimators

    before = set(estimators.SCHEMES)
    with pytest.raises(CorrectionError, match=r"no_registration.py registers no correction"):
        load_correction(FIX / "no_registration.py")
    assert set(estimators.SCHEMES) == before


def test_a_name_clash_is_refused_and_rolled_back():
    import estimators

    gmc = estimators.SCHEMES["gmc"]
    with pytest.raises(CorrectionError, match=r"name clash: a scheme named 'gmc' is already registered"):
        load_correction(FIX / "name_clash.py")
    assert estimators.SCHEMES["gmc"] is gmc


@pytest.mark.parametrize(("name", "message"), [
    ("wrong_shape", r"returns weights of shape \(14, 1\) for log-ratios of shape \(14, 4\)"),
    ("negative_weight", r"gives a negative weight \(-1\) for group log-ratios .* advantages \[-1.0"),
    ("broken_nan", r"gives a NaN weight for group log-ratios \[5.0, 5.0, 5.0, 5.0\]"),
])
def test_the_battery_names_what_is_wrong(loaded, name, message):
    corr = loaded(name)
    with pytest.raises(CorrectionError, match=message):
        validate(corr)


def test_the_command_refuses_before_any_work(tmp_path, capsys):
    from report_card.__main__ import main

    assert main(["--module", str(FIX / "no_registration.py"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no_registration.py registers no correction")
    assert not any(tmp_path.iterdir())  # nothing was computed or written
    assert main(["--name", "no_such_correction", "--out", str(tmp_path)]) == 2
    assert "no registered correction named 'no_such_correction'" in capsys.readouterr().err


def test_a_broken_correction_gets_a_card_that_says_so(tmp_path, capsys):
    from report_card.__main__ import main

    try:
        rc = main(["--module", str(FIX / "broken_nan.py"), "--quick", "--out", str(tmp_path)])
    finally:
        unload(FIX / "broken_nan.py")
    assert rc == 2
    card = (tmp_path / "broken_nan" / "CARD.md").read_text()
    assert "Refused before any work started" in card and "NaN weight" in card and "[5.0, 5.0, 5.0, 5.0]" in card
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "broken_nan").iterdir()) == ["CARD.html", "CARD.md", "card.json"]
    assert json.loads((tmp_path / "broken_nan" / "card.json").read_text())["refused"] is True


def test_a_wrong_declaration_is_reported_not_trusted(loaded):
    from report_card import exact
    from report_card.verdict import verdict

    corr = loaded("wrong_sup")
    validate(corr)  # a finite, non-negative weighting: only its declaration is wrong
    m = exact.membership(corr)
    row = m["rows"][0]
    assert row["declared_sup"] == 1.0 and row["search_max"] == pytest.approx(2.0, rel=1e-12)
    assert m["declaration_wrong"] and not row["member_by_search"]
    breaks = dict(verdict({"name": corr.name, "membership": m}))["Where it breaks"]
    assert "declared sup of a group's mass 1 is wrong: the search found 2" in breaks


# --------------------------------------------------------------------------- the committed study's numbers


@pytest.fixture(scope="module")
def registered_llm(tmp_path_factory):
    from report_card import llm

    out = {}
    for name in ("topr", "gmc"):
        corr = registered_correction(name)
        validate(corr)
        out[name] = llm.part(corr, tmp_path_factory.mktemp(name), quick=False, new_runs=False)
    return out


def _cell(part, horizon, delay, arm):
    return next(c for c in part["cells"] if c["cell"] == {"horizon": horizon, "delay": delay, "arm": arm})


def test_topr_and_gmc_cards_equal_the_committed_verdicts(registered_llm):
    """Read, not rerun: the same floats as results/llm/study/verdicts.json (H2) and
    results/llm/mechanism/verdicts.json (M2b), bit for bit."""
    h2 = json.loads((ROOT / "results/llm/study/verdicts.json").read_text())["H2"]["baselines"]
    m2b = json.loads((ROOT / "results/llm/mechanism/verdicts.json").read_text())["hypotheses"]["M2b"]["baselines"]
    shares = json.loads((ROOT / "results/llm/mechanism/verdicts.json").read_text())["stable_shares"]
    gmc, topr = registered_llm["gmc"], registered_llm["topr"]
    for ref in ("topr", "gspo"):
        d = _cell(gmc, "long", 64, "adam")["references"][ref]["difference"]
        assert {k: d[k] for k in ("n", "mean", "low", "high")} == {k: h2[ref][k] for k in ("n", "mean", "low", "high")}
    d = _cell(gmc, "long", 64, "adamwclip")["references"]["topr"]["difference"]
    assert {k: d[k] for k in ("n", "mean", "low", "high")} == {k: m2b["topr"][k] for k in ("n", "mean", "low", "high")}
    # TOPR's card: the same pairs the other way round (the same bootstrap resamples, negated)
    d = _cell(topr, "long", 64, "adam")["references"]["gmc"]["difference"]
    # (the percentile interpolation of negated resamples may round the last bit the other way)
    assert (d["mean"], d["low"], d["high"]) == pytest.approx((-h2["topr"]["mean"], -h2["topr"]["high"],
                                                              -h2["topr"]["low"]), rel=1e-14, abs=0)
    for part, name in ((gmc, "gmc"), (topr, "topr")):
        s = _cell(part, "long", 64, "adamwclip")["self"]
        assert [s["stable"], s["n"]] == shares[f"adamwclip/{name}"]


def test_topr_and_gmc_cards_equal_the_study_tables(registered_llm):
    """Against the staleness study's difference table and the committed report's printed numbers."""
    from report_card import llm
    from studies.staleness.analysis import differences_table

    runs = llm.committed_runs(("topr", "gmc"))
    study = runs[(runs["source"] == "results/llm/study") & (runs["arm"] == "adam")].reset_index(drop=True)
    tab = differences_table(study)
    report = (ROOT / "results/REPORT.md").read_text()
    for horizon in ("short", "long"):
        t = tab[(tab["horizon"] == horizon) & (tab["delay"] == 64) & (tab["baseline"] == "topr")].iloc[0]
        d = _cell(registered_llm["gmc"], horizon, 64, "adam")["references"]["topr"]["difference"]
        assert (d["n"], d["mean"], d["low"], d["high"]) == (t["n"], t["mean"], t["low"], t["high"])
        assert f"| {horizon} | 64 | TOPR | 10 | {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] |" in report
    s = _cell(registered_llm["topr"], "long", 64, "adam")["self"]
    assert (s["stable"], s["n"], f"{s['pc_final']:.3f}") == (10, 10, "0.617")  # README's study table
    s = _cell(registered_llm["gmc"], "long", 64, "adam")["self"]
    assert (s["stable"], s["n"], f"{s['pc_final']:.3f}") == (3, 10, "0.161")


def test_committed_cards_hold_the_same_numbers(registered_llm):
    for name, part in registered_llm.items():
        path = ROOT / "results/cards" / name / "card.json"
        assert path.is_file(), f"{path} is not committed"
        committed = json.loads(path.read_text())["llm"]
        for a, b in zip(committed["cells"], part["cells"], strict=True):
            assert a["state"] == b["state"]
            if "self" in b:
                assert (a["self"]["stable"], a["self"]["n"], a["self"]["pc_final"]) == \
                    (b["self"]["stable"], b["self"]["n"], b["self"]["pc_final"])
            for r, v in b.get("references", {}).items():
                if v.get("available"):
                    assert a["references"][r]["difference"] == v["difference"]


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


# --------------------------------------------------------------------------- edge cases of the command


def _strict_json(text: str):
    def refuse(c):
        raise ValueError(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def test_every_committed_card_is_strict_json():
    from schema.io import loads_json

    cards = sorted((ROOT / "results/cards").glob("*/card.json"))
    assert cards
    for path in cards:
        _strict_json(path.read_text())
        assert loads_json(path.read_text())["name"] == path.parent.name


def test_a_card_s_json_is_the_toolkit_s_strict_json(tmp_path):
    from report_card.card import card_json
    from schema.io import loads_json

    text = card_json({"a": {"b": (1.0, math.nan)}, "c": np.float64(math.inf), "d": np.int64(3), "e": np.arange(2)})
    doc = _strict_json(text)
    assert doc == {"a": {"b": [1.0, "NaN"]}, "c": "Infinity", "d": 3, "e": [0, 1]}
    back = loads_json(text)
    assert math.isnan(back["a"]["b"][1]) and back["c"] == math.inf


def test_a_refusal_replaces_an_earlier_passing_card(tmp_path, capsys):
    from report_card.__main__ import main

    folder = tmp_path / "broken_nan"
    folder.mkdir()
    for name, text in (("card.json", '{"passed": true}'), ("CARD.html", "<p>pass</p>"), ("CARD.md", "pass"),
                       ("f1.png", "png")):
        (folder / name).write_text(text)
    try:
        assert main(["--module", str(FIX / "broken_nan.py"), "--out", str(tmp_path)]) == 2
    finally:
        unload(FIX / "broken_nan.py")
    err = capsys.readouterr().err
    assert "replaced by the refusal" in err and "card.json" in err
    assert sorted(p.name for p in folder.iterdir()) == ["CARD.html", "CARD.md", "card.json"]
    assert _strict_json((folder / "card.json").read_text())["refused"] is True
    assert "Refused" in (folder / "CARD.html").read_text() and "pass</p>" not in (folder / "CARD.html").read_text()


@pytest.mark.parametrize(("fixture", "message"), [
    ("exits_on_import", "exits_on_import.py failed to import: SystemExit"),
    ("bad_metadata", "in_class must be True or False, got 'no'"),
    ("path_name", "a correction's name must be letters"),
])
def test_a_file_that_exits_or_declares_badly_is_one_line(tmp_path, capsys, fixture, message):
    from report_card.__main__ import main

    try:
        rc = main(["--module", str(FIX / f"{fixture}.py"), "--out", str(tmp_path / "out")])
    finally:
        unload(FIX / f"{fixture}.py")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0]
    assert not any(p for p in tmp_path.rglob("*") if p.is_file() and tmp_path / "out" not in p.parents)


def test_nothing_is_written_outside_out(tmp_path):
    from report_card.load import card_folder

    for name in ("../x", "a/b", "/abs", "..", ".", "x/../../y"):
        with pytest.raises(CorrectionError, match="outside"):
            card_folder(tmp_path / "cards", name)
    assert card_folder(tmp_path / "cards", "ok-name_1.2") == tmp_path / "cards" / "ok-name_1.2"


@pytest.mark.parametrize(("fixture", "message"), [
    ("mutates_input", r"writes into the log-ratios it is given"),
    ("exits_in_battery", r"raises SystemExit"),
    ("nan_alone", r"gives a NaN weight for group log-ratios \[5.0, 5.0"),
    ("raises_alone", r"raises ZeroDivisionError on group log-ratios \[-5.0, -5.0, -5.0, -5.0\] \(alone"),
])
def test_the_battery_catches_what_a_run_would_hit(loaded, fixture, message):
    corr = loaded(fixture)
    with pytest.raises(CorrectionError, match=message):
        validate(corr)


def test_a_module_path_without_py(tmp_path, capsys):
    from report_card.__main__ import main

    stem = FIX / "broken_nan"
    plain = tmp_path / "broken_copy"
    plain.write_text((FIX / "broken_nan.py").read_text().replace('"broken_nan"', '"broken_copy"'))
    for path in (stem, plain):
        try:
            rc = main(["--module", str(path), "--out", str(tmp_path / "out")])
        finally:
            unload(path.with_name(path.name + ".py") if path == stem else path)
        err = capsys.readouterr().err
        assert rc == 2 and "NaN weight" in err and "Traceback" not in err


def test_the_plan_scales_with_the_correction_s_own_cost(loaded):
    from report_card.plan import ROBUST_S, _seconds, cost_factor, local_parts

    corr = loaded("slow_trunc")
    k, own, ref = cost_factor(corr)
    assert own >= 0.25 and k == pytest.approx(own / ref) and k > 100
    text = "\n".join(local_parts(corr, (k, own, ref)))
    assert f"scaled by {k:.3g}" in text and f"robustness sweep: computed, about {_seconds(ROBUST_S * k)}" in text
    assert "about 1 s" not in text
    gmc = registered_correction("gmc")
    assert "the times below are the measured ones" in "\n".join(local_parts(gmc, (1.0, 1e-4, 1e-4)))


def test_missing_simulator_results_are_one_line(tmp_path, monkeypatch, capsys):
    from report_card.__main__ import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "fresh"))
    (tmp_path / "fresh").mkdir()
    rc = main(["--estimator", "topr", "--no-new-runs", "--out", str(tmp_path / "cards")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "python -m simulators.sweep peers" in err[0]


# --------------------------------------------------------------------------- no pass it did not earn


@pytest.mark.parametrize(("fixture", "where", "message"), [
    # NaN at one group size only: the battery runs every G the card uses, and names G and the condition
    ("nan_at_g8", "battery", (r"gives a NaN weight for group log-ratios \[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0\] "
                              r"\(G = 8, completion 0\)")),
    ("nan_at_g8", "policy_loss", (r"'nan_at_g8' is declared bounded but gives a NaN weight at G = 8 .*the "
                                  r"correction's own weights")),
    # a correction that writes into its inputs: each input compared with its copy after the call, numpy and torch
    ("mutates_input", "battery", r"writes into the log-ratios it is given \(numpy: group"),
    ("mutates_torch", "battery", r"writes into the log-ratios it is given \(torch: group \[1e-06, .*G = 4\)"),
    ("mutates_advantages", "battery", r"writes into the advantages it is given \(torch: group \[-1.0"),
    ("token_mutates", "battery", r"token loss 'token_mutates' writes into the old_logp it is given \(at G = 4"),
    # a loss declared bounded whose infinities policy_loss refuses fails the sweep: they are no refusals
    ("token_inf", "sweep", r"declared bounded, its loss is not finite \('token_inf' is declared bounded but its loss"),
])
def test_a_correction_gets_no_pass_it_did_not_earn(loaded, fixture, where, message):
    import re

    import torch

    from estimators.losses import policy_loss
    from report_card import robustness

    corr = loaded(fixture)
    if where == "battery":
        with pytest.raises(CorrectionError, match=message):
            validate(corr)
    elif where == "sweep":
        validate(corr)  # finite on the battery's ratios: the sweep's 1e4 is where it breaks
        res = robustness.sweep(corr.name)
        assert not res["passed"] and res["refused"] == 0 and res["n_failures"] > 0
        assert re.search(message, res["failures"][0]), res["failures"][0]
    else:
        logp = torch.full((16, 3), -1.0, dtype=torch.float64)
        with pytest.raises(ValueError, match=message) as e:
            policy_loss(corr.name, logp.requires_grad_(), logp.detach() - 0.1, torch.ones(16, 3),
                        torch.linspace(-1, 1, 16, dtype=torch.float64), 8, 0.2)
        assert "scale the advantages" not in str(e.value)


@pytest.mark.parametrize("fixture", ["mutates_input", "mutates_torch", "mutates_advantages", "token_mutates"])
def test_policy_loss_gives_a_correction_copies_so_its_writes_change_nothing_of_the_caller(loaded, fixture):
    """The caller's tensors keep their values whatever the correction writes into what it is given, and a scheme's
    seq_log_ratio (computed by policy_loss, not by the scheme) is the batch's."""
    import torch

    from estimators.losses import policy_loss, trajectory_log_ratio

    corr = loaded(fixture)
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 3, generator=gen, dtype=torch.float64) * 30.0 - 0.5
    logp = (old + torch.randn(8, 3, generator=gen, dtype=torch.float64)).clamp(max=-1e-3)
    mask, adv = torch.ones(8, 3, dtype=torch.float64), torch.linspace(-1, 1, 8, dtype=torch.float64)
    given = [t.clone() for t in (logp, old, mask, adv)]
    out = policy_loss(corr.name, logp, old, mask, adv, 4, 0.2)
    if corr.level == "trajectory":
        assert torch.equal(out.seq_log_ratio, trajectory_log_ratio(logp, old, mask).reshape(2, 4))
    assert all(torch.equal(a, b) for a, b in zip((logp, old, mask, adv), given))


def test_the_loss_refusal_blames_the_advantages_only_when_their_scale_is_the_cause():
    import torch

    from estimators.losses import policy_loss

    old = torch.full((4, 2), -0.6)
    adv = torch.tensor([3e38, -3e38, 3e38, -3e38])
    with pytest.raises(ValueError, match=r"'gmc': the loss overflows torch.float32 .* at G = 2 .*finite with them "
                                         r"scaled to at most 1 .*scale the advantages down"):
        policy_loss("gmc", old + 0.1, old, torch.ones(4, 2), adv, 2, 0.2)
    with pytest.raises(ValueError, match=r"'sapo' is declared bounded but its loss is -?inf at G = 2 .*not the "
                                         r"advantages' scale; the knobs tau_pos = 1e-40") as e:
        policy_loss("sapo", old + 0.5, old, torch.ones(4, 2), torch.tensor([1.0, -1.0, 1.0, -1.0]), 2, 0.2,
                    tau_pos=1e-40)
    assert "scale the advantages down" not in str(e.value)
