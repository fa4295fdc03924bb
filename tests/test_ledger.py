"""THEORY's ledger (claims.ledger): every claim's recorded verdict, read from docs/THEORY.md §5,
and `python -m claims` exiting 0 exactly when every outcome matches it. A flipped, moved or
unreadable ledger entry is caught and named."""
import json
import re

import pytest

import claims
from claims import __main__ as cli
from claims.ledger import THEORY, Entry, LedgerError, annotate, ledger_summary, match, read_ledger

REFUTED_22 = ("refuted at `long E2 H=16 delta=+0.8`: IS 0.1079, TOPR 0.1047, TIC-trunc 0.1047 "
              "(tolerance 1e-4)")


def test_theory_ledger_covers_every_claim():
    ledger = read_ledger()
    assert sorted(ledger) == sorted(claims.BY_ID)
    assert {e.recorded for e in ledger.values()} == {"holds", "refuted"}
    refuted = {i: e for i, e in ledger.items() if e.recorded == "refuted"}
    assert list(refuted) == [22, 23, 26, 30]
    assert refuted[30].counterexample["point"] == "E5 small N=16; E5 small N=32"  # §9's split, one prompt
    assert refuted[26].counterexample == {"point": "the LLM pairs (7 uncensored)", "tolerance": 0.001, "values": {
        "LLM b": 0.801, "LLM b low": 0.35, "LLM b high": 1.252, "E3 b": 0.269}}  # the group-size rate: a revision
    assert refuted[23].counterexample["point"] == "E1 Delta=0.5 (variance); E2 Delta=0.5 (bias)"
    ce = refuted[22].counterexample
    assert ce == {"point": "long E2 H=16 delta=+0.8", "values": {"IS": 0.1079, "TOPR": 0.1047, "TIC-trunc": 0.1047},
                  "tolerance": 1e-4}
    assert ledger[19].stated_as == "conjecture" and ledger[22].stated_as == "theorem + conjecture"
    assert ledger[23].stated_as == "conjecture"
    assert (ledger[25].stated_as, ledger[25].recorded) == ("theorem", "holds")  # TRM's bounds
    assert all(e.counterexample is None for e in ledger.values() if e.recorded == "holds")


def _ledger_copy(tmp_path, cid: int, recorded: str):
    """A copy of THEORY.md whose claim ``cid`` records ``recorded`` instead."""
    text = THEORY.read_text()
    row = re.compile(rf"^(\| {cid} \|.*\| )([^|]+)( \|)$", re.MULTILINE)
    new, n = row.subn(lambda m: m.group(1) + recorded + m.group(3), text)
    assert n == 1
    path = tmp_path / "THEORY.md"
    path.write_text(new)
    return path


def test_unchanged_ledger_exits_0_with_claim_22_refuted_as_recorded(tmp_path, capsys):
    js = tmp_path / "c.json"
    assert cli.main(["--only", "5,22", "--quick", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "2 claims: 1 hold, 1 refuted as recorded (claim 22: refuted at long E2 H=16 delta=+0.8 as recorded" in out
    rows = {r["id"]: r for r in json.loads(js.read_text())["claims"]}
    assert rows[22]["status"] == "FAIL" and rows[22]["recorded"] == "refuted" and rows[22]["matches"] is True
    assert rows[22]["counterexample"]["point"] == "long E2 H=16 delta=+0.8"
    assert rows[22]["refuted_at"] == [{"point": "long E2 H=16 delta=+0.8",
                                       "values": pytest.approx({"IS": 0.1079, "TOPR": 0.1047, "TIC-trunc": 0.1047},
                                                               abs=1e-4)}]
    assert rows[5]["status"] == "PASS" and rows[5]["recorded"] == "holds" and rows[5]["counterexample"] is None


@pytest.mark.parametrize("cid, recorded, why", [
    (22, "holds", "recorded holds, but the check gave FAIL"),
    (5, "refuted at `y = 2 eps`: max 1 (tolerance 1e-9)", "the refutation no longer reproduces"),
    (22, REFUTED_22.replace("IS 0.1079", "IS 0.1200"), "IS 0.12 recorded, 0.1079 found"),
    (22, REFUTED_22.replace("H=16 delta=+0.8", "H=16 delta=+0.3"), "the counterexample has moved"),
])
def test_flipped_or_moved_ledger_entry_exits_1_and_names_the_claim(tmp_path, capsys, cid, recorded, why):
    ledger = _ledger_copy(tmp_path, cid, recorded)
    assert cli.main(["--only", "5,22", "--quick", "--ledger", str(ledger)]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("2 claims:"))
    assert "1 does not match the ledger (claim " + str(cid) + ": " in line and why in line, line


@pytest.mark.parametrize("recorded, message", [
    ("maybe", "claim 22: recorded verdict 'maybe' is neither"),
    ("refuted at `p`: IS high (tolerance 1e-4)", "claim 22: counterexample value 'IS high'"),
    # a malformed number names the claim, the column and the value (not Python's "could not convert")
    (REFUTED_22.replace("0.1079", "0.10.79"),
     "claim 22, column 'recorded': the counterexample value of 'IS' '0.10.79' is not a finite decimal number"),
    (REFUTED_22.replace("1e-4", "1e-4.5"), "claim 22, column 'recorded': tolerance '1e-4.5' is not a finite decimal"),
    (REFUTED_22.replace("1e-4", ""), "claim 22, column 'recorded': tolerance '' is not a finite decimal number"),
    (REFUTED_22.replace("1e-4", "nan"), "claim 22, column 'recorded': tolerance 'nan' is not a finite decimal"),
    (REFUTED_22.replace("0.1079", "1e999"), "the counterexample value of 'IS' '1e999' is not a finite decimal"),
    (REFUTED_22.replace("0.1079", "inf"), "the counterexample value of 'IS' 'inf' is not a finite decimal"),
    # a negative tolerance is refused, never read as "values moved beyond -1"
    (REFUTED_22.replace("1e-4", "-1"), "claim 22, column 'recorded': tolerance '-1' is negative"),
    (REFUTED_22.replace("TOPR", "IS"), "claim 22, column 'recorded': the counterexample names 'IS' twice"),
])
def test_unreadable_ledger_exits_2_before_any_claim_runs(tmp_path, capsys, monkeypatch, recorded, message):
    monkeypatch.setattr(cli, "run_claims", lambda *a, **k: pytest.fail("claims ran on an unreadable ledger"))
    ledger = _ledger_copy(tmp_path, 22, recorded)
    assert cli.main(["--only", "22", "--quick", "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_match_rules():
    ce = {"point": "p", "values": {"IS": 0.5}, "tolerance": 1e-3}
    refuted = Entry(1, "conjecture", "refuted", ce)
    fail_at = lambda *pts, v=0.5: {"status": "FAIL", "refuted_at": [{"point": q, "values": {"IS": v}} for q in pts]}
    assert match(fail_at("p"), refuted)[0]
    assert match(fail_at("p", v=0.5009), refuted)[0]
    assert not match(fail_at("p", v=0.502), refuted)[0]  # moved beyond the tolerance
    assert not match(fail_at("p", v=float("nan")), refuted)[0]  # a NaN found is no value within the tolerance
    assert not match(fail_at("p", "q"), refuted)[0]  # a second failing point
    assert not match({"status": "FAIL", "refuted_at": []}, refuted)[0]  # a check that names no point
    assert not match({"status": "ERROR", "refuted_at": []}, refuted)[0]
    assert not match({"status": "PASS", "refuted_at": []}, refuted)[0]
    holds = Entry(2, "theorem", "holds")
    assert match({"status": "PASS"}, holds)[0] and not match({"status": "ERROR"}, holds)[0]
    rows = annotate([{"id": 1, **fail_at("p")}, {"id": 2, "status": "FAIL"}, {"id": 3, "status": "PASS"}],
                    {1: refuted, 2: holds})
    assert [r["matches"] for r in rows] == [True, False, False]  # claim 3 is absent from the ledger
    assert ledger_summary(rows).startswith("3 claims: 0 hold, 1 refuted as recorded (claim 1: refuted at p")
    assert "2 do not match the ledger (claim 2: recorded holds, but the check gave FAIL; claim 3: absent" \
        in ledger_summary(rows)


def test_a_claim_id_that_is_no_plain_number_is_named(tmp_path):
    text = THEORY.read_text().replace("\n| 22 |", "\n| 2\u00b2 |")  # "2²".isdigit() is True, int() fails
    bad = tmp_path / "T.md"
    bad.write_text(text)
    with pytest.raises(LedgerError, match="claims table row .\\| 2\u00b2 \\|.* has no id"):
        read_ledger(bad)


def test_ledger_without_table_is_refused(tmp_path):
    bad = tmp_path / "T.md"
    bad.write_text("# no table\n")
    with pytest.raises(LedgerError, match="has no claims table"):
        read_ledger(bad)
