"""``python -m report_card``: bad correction files refused before any work, and the registered cards'
numbers equal the committed study's (a correction defined outside the package, end to end:
tests/test_report_card_outside.py; the command's edge cases and the passes a correction must earn:
tests/test_report_card_edges.py)."""
from __future__ import annotations

import json

import pytest
from _report_card import FIX, ROOT, _cell, loaded_fixture  # noqa: F401 (a fixture)

from report_card.load import CorrectionError, load_correction, registered_correction, unload, validate

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
