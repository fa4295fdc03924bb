"""The claims layer: registry, the one Result type, planted wrong bounds FAIL, claim 14's
thresholds, and `python -m claims`'s outputs (named, never replacing a full or foreign file)."""
import inspect
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import claims
import estimators
from bounds import bias, delay
from bounds.symbols import C2, G, M, d, eps, eta
from claims import __main__ as cli
from claims import closed_forms, enumeration, table
from claims.registry import CLAIMS
from claims.result import Result, combine

QUICK_CHEAP = [1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 18, 19, 24, 25]


def test_registry_shape():
    assert [c.id for c in claims.CLAIMS] == list(range(1, 31))
    for c in claims.CLAIMS:
        assert c.title and c.theory_ref.startswith("§")
        assert set(c.kind.split("+")) <= set(claims.KINDS)
        assert callable(c.check)
    assert claims.STATUSES == ("PASS", "FAIL", "ERROR")
    with pytest.raises(ValueError, match="unknown claim id 31; valid ids: 1..30$"):
        claims.get_claim(31)


@pytest.mark.parametrize("cid", QUICK_CHEAP)
def test_claims_pass_quick(cid):
    row = claims.get_claim(cid).run(quick=True)
    assert tuple(row) == claims.KEYS
    assert row["status"] == "PASS", row["evidence"]
    assert row["seconds"] >= 0
    json.dumps(row)  # JSON-serialisable


def test_sympy_exponents_in_rows():
    r11, r12 = (claims.get_claim(i).run(quick=True) for i in (11, 12))
    assert (r11["measured"]["gmc"], r11["measured"]["tic_mask"]) == ("-2", "-4")
    m = r12["measured"]
    assert m["G"] == {"gmc": "-2/5", "tic_mask": "0"}
    assert m["epsilon"] == {"gmc": "-2/5", "tic_mask": "-4/5"}
    assert m["d"] == {"gmc": "4/5", "tic_mask": "4/5"}
    assert m["T"] == {"gmc": "-4/5", "tic_mask": "-4/5"}
    assert m["G-slope"]["gmc"] == pytest.approx(-0.4, abs=1e-3)


# --- claim 14 as revised (THEORY §7) ---------------------------------------------------------


def test_claim14_thresholds_and_text():
    row = claims.get_claim(14).run(quick=False)
    assert row["status"] == "PASS", row["evidence"]
    # the values THEORY §7's revision was found with (E1 'mild'), to 5 decimals
    assert "Delta_crit(eps=0.2)=0.39563" in row["measured"]
    assert "Delta_gmc(G=8,eps=0.2)=0.42874" in row["measured"]
    for G_ in (2, 4, 8, 16):
        for e in (0.1, 0.2):
            assert f"Delta_gmc(G={G_},eps={e:g})=" in row["measured"]
    assert "first written" in row["evidence"] and "refuted" in row["evidence"]


def test_claim14_thresholds_ordered():
    th = enumeration.thresholds((0.2,), (2, 4, 8, 16))
    seq = [th["gmc"][(G_, 0.2)] for G_ in (2, 4, 8, 16)]
    assert all(b <= a for a, b in itertools.pairwise(seq))
    assert min(seq) >= th["crit"][0.2]
    # the bisection is on the enumeration: just above Delta_gmc a mixed-reward group exceeds the cap
    env, th_, u = th["env"], th["theta"], th["direction"]
    from simulators.delay import static_behaviour

    for G_ in (2, 8):
        D = th["gmc"][(G_, 0.2)]
        assert enumeration._max_mixed_wbar(env, th_, static_behaviour(th_, D * (1 + 1e-6), u), G_) > 1.2
        assert enumeration._max_mixed_wbar(env, th_, static_behaviour(th_, D * (1 - 1e-6), u), G_) <= 1.2


def test_claim8_reports_slope_with_range():
    row = claims.get_claim(8).run(quick=True)
    assert row["status"] == "PASS", row["evidence"]
    assert "(G=2..64)" in row["measured"] and "need not be" in row["expected"]


# --- planted wrong bounds must FAIL ----------------------------------------------------------


def _planted_D_gmc(eta=eta, d=d, G=G, eps=eps, C2=C2, M=M):
    """eps^-3 where Theorem 2 has eps^-2."""
    return delay.K_gmc(eps, C2, M) * eta**4 * d**4 / (G**2 * eps**3)


_planted_D_gmc.signature = inspect.signature(_planted_D_gmc)


def test_planted_eps_cubed_fails_claims_11_and_12(monkeypatch):
    monkeypatch.setattr(delay, "D_gmc", _planted_D_gmc)
    r11 = claims.get_claim(11).run(quick=True)
    assert r11["status"] == "FAIL"
    assert r11["measured"]["gmc"] == "-3"
    r12 = claims.get_claim(12).run(quick=True)
    assert r12["status"] == "FAIL"
    assert r12["measured"]["epsilon"]["gmc"] == "-3/5"


def test_planted_bias_bound_fails_claim_11(monkeypatch):
    # a GMC mass bound with the wrong eps power propagates through the composed D
    monkeypatch.setattr(bias, "m_gmc_quadratic", lambda s2, G_, e: s2 / (4 * G_ * e**sp.Rational(3, 2)))
    row = claims.get_claim(11).run(quick=True)
    assert row["status"] == "FAIL" and row["measured"]["gmc"] == "-3"


@pytest.mark.parametrize("cid, module, name, wrong", [
    (5, bias, "key_quadratic_bound", lambda y_, e: y_**2 / (3 * e)),
    (10, bias, "m_mask_two_point", lambda s2, e: s2 / (s2 + e**2)),
    (6, bias, "fourth_moment_group_mean", lambda s2, m4, G_: (m4 + 3 * G_ * s2**2) / G_**3),
    (15, bias, "lognormal_mu4", lambda D_: sp.exp(6 * D_**2) - 4 * sp.exp(3 * D_**2) + 6 * sp.exp(D_**2) - 4),
])
def test_planted_wrong_closed_form_fails(cid, module, name, wrong, monkeypatch):
    monkeypatch.setattr(module, name, wrong)
    assert claims.get_claim(cid).run(quick=True)["status"] == "FAIL"


def test_planted_wrong_gmc_weights_fail_claims_1_and_3(monkeypatch):
    real = estimators.weights

    def snis_for_gmc(scheme, log_ratio, eps, advantages=None):
        return real("snis" if scheme == "gmc" else scheme, log_ratio, eps, advantages)

    monkeypatch.setattr(estimators, "weights", snis_for_gmc)
    assert claims.get_claim(1).run(quick=True)["status"] == "FAIL"
    assert claims.get_claim(3).run(quick=True)["status"] == "FAIL"


def test_exception_in_check_is_an_error_row(monkeypatch):
    def boom(*a, **k):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(closed_forms.bias, "key_quadratic_bound", boom)
    row = claims.get_claim(5).run(quick=True)
    assert row["status"] == "ERROR"
    assert "ZeroDivisionError: planted" in row["evidence"]


def test_a_check_that_returns_no_result_is_an_error(monkeypatch):
    monkeypatch.setattr(enumeration, "check_9", lambda quick: {"status": "PASS"})
    row = claims.get_claim(9).run(quick=True)
    assert row["status"] == "ERROR" and "not a Result" in row["evidence"]


def test_two_part_claim_fails_when_one_part_fails(monkeypatch):
    monkeypatch.setattr(closed_forms, "check_6_enumeration",
                        lambda quick: Result.of(False, 0.0, 1.0, 0.0, "planted failure"))
    row = claims.get_claim(6).run(quick=True)
    assert row["status"] == "FAIL"
    assert "enumeration [FAIL]: planted failure" in row["evidence"] and "symbolic [PASS]" in row["evidence"]


def test_combine_and_result():
    ok, bad = Result.of(True, 1, 1, 0, "a"), Result.of(False, 1, 2, 0, "b")
    assert combine({"x": ok, "y": ok}).status == "PASS"
    assert combine({"x": ok, "y": bad}).status == "FAIL"
    assert combine({"x": bad, "y": Result.error(ValueError("v"))}).status == "ERROR"
    with pytest.raises(ValueError, match="status"):
        Result(1, 1, 0, "NOT-RUN", "")


def test_jsonable():
    out = claims.jsonable({"a": sp.Rational(-2, 5), "b": np.float64(0.5), "c": {1, 2}, "d": float("inf"),
                           "e": np.bool_(True), 3: (np.int64(4),)})
    assert out == {"a": "-2/5", "b": 0.5, "c": [1, 2], "d": "inf", "e": True, "3": [4]}
    json.dumps(out)


# --- CLI -------------------------------------------------------------------------------------


def test_cli_writes_named_outputs(tmp_path, capsys):
    js, md = tmp_path / "v" / "c.json", tmp_path / "v" / "c.md"
    rc = cli.main(["--only", "5,9", "--json", str(js), "--md", str(md), "--quick"])
    assert rc == 0
    printed = capsys.readouterr().out
    lines = [ln for ln in printed.splitlines() if ln[:3].strip() in {"5", "9"}]
    assert len(lines) == 2 and lines[0].index("PASS") == lines[1].index("PASS")  # aligned status column
    doc = json.loads(js.read_text())
    assert doc["format"] == "gmc-grpo-claims/1" and doc["complete"] is False and doc["quick"] is True
    assert doc["provenance"]["git_commit"] and doc["provenance"]["versions"]["sympy"]
    assert [r["id"] for r in doc["claims"]] == [5, 9]
    assert all(tuple(r)[: len(claims.KEYS)] == claims.KEYS for r in doc["claims"])
    assert all(r["recorded"] == "holds" and r["matches"] is True for r in doc["claims"])  # THEORY's ledger
    assert "| 5 |" in md.read_text()
    # a partial table of the toolkit's own may be replaced by another partial run
    assert cli.main(["--only", "5", "--json", str(js), "--quick"]) == 0
    assert [r["id"] for r in json.loads(js.read_text())["claims"]] == [5]


def test_cli_partial_run_without_outputs_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert cli.main(["--only", "5", "--quick"]) == 0
    assert not any(tmp_path.rglob("*"))
    assert "nothing written" in capsys.readouterr().out


def _never_run(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("claims ran although the outputs were refused")
    monkeypatch.setattr(cli, "run_claims", fail)


def test_cli_refuses_foreign_files(tmp_path, monkeypatch):
    _never_run(monkeypatch)
    other = tmp_path / "notes.md"
    other.write_text("my notes\n")
    assert cli.main(["--only", "5", "--md", str(other)]) == 2
    assert other.read_text() == "my notes\n"
    data = tmp_path / "n.json"
    data.write_text('{"mine": 1}\n')
    assert cli.main(["--only", "5", "--json", str(data)]) == 2
    assert data.read_text() == '{"mine": 1}\n'


def test_cli_refuses_one_file_for_two_outputs(tmp_path, monkeypatch):
    _never_run(monkeypatch)
    assert cli.main(["--only", "5", "--json", str(tmp_path / "o.md"), "--md", str(tmp_path / "o.md")]) == 2
    assert not (tmp_path / "o.md").exists()


def test_cli_partial_run_never_replaces_the_full_table(tmp_path, monkeypatch):
    full = tmp_path / "claims.json"
    rows = [{**dict.fromkeys(claims.KEYS), "id": i, "status": "PASS"} for i in claims.BY_ID]
    full.write_text(json.dumps({"format": "gmc-grpo-claims/1", "complete": True, "quick": False, "claims": rows}))
    before = full.read_text()
    _never_run(monkeypatch)
    assert cli.main(["--only", "1", "--json", str(full)]) == 2
    assert cli.main(["--quick", "--json", str(full)]) == 2
    assert full.read_text() == before
    legacy = tmp_path / "legacy.json"  # the older list-only format
    legacy.write_text(json.dumps(rows))
    assert cli.main(["--only", "1", "--json", str(legacy)]) == 2


def test_cli_checks_writability_before_computing(tmp_path, monkeypatch):
    _never_run(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert cli.main(["--only", "5", "--json", str(afile / "c.json")]) == 2  # a parent that is a file
    assert cli.main(["--only", "5", "--json", str(tmp_path)]) == 2  # a folder
    assert afile.read_text() == "x"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_cli_refuses_a_path_that_permission_bits_call_writable(monkeypatch, capsys):
    """/proc passes os.access (as root every path does), yet no folder can be made there: the
    check creates the parent and a probe file first, so this is refused before any claim runs."""
    _never_run(monkeypatch)
    assert cli.main(["--only", "5", "--json", "/proc/gmc-no-such-folder/c.json"]) == 2
    assert "cannot write /proc/gmc-no-such-folder/c.json" in capsys.readouterr().err


def test_writability_check_makes_the_folders_and_leaves_no_probe(tmp_path):
    from schema.io import check_writable

    target = tmp_path / "a" / "b" / "c.json"
    assert check_writable(target) == target
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == []


@pytest.mark.parametrize("bad", ["0", "3,x", str(max(c.id for c in CLAIMS) + 1), ""])
def test_cli_rejects_bad_only(bad, tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--only", bad, "--json", str(tmp_path / "c.json")])
    assert exc.value.code == 2


def test_cli_full_run_may_replace_its_own_files(tmp_path, monkeypatch):
    """The default outputs of a full run (claims.json, claims.md, abstract.json as the toolkit wrote
    them) are accepted for replacement by the next full run, and refused to a partial one."""
    from claims.abstract import write_abstract

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    js, md, ab = cli.default_paths()
    rows = [{**dict.fromkeys(claims.KEYS), "id": i, "status": "PASS"} for i in claims.BY_ID]
    js.parent.mkdir(parents=True)
    js.write_text(json.dumps({"format": "gmc-grpo-claims/1", "complete": True, "quick": False, "claims": rows}))
    md.write_text(table.markdown([{**r, "title": "t", "theory_ref": "§5", "kind": "exact", "seconds": 0.0,
                                   "evidence": "e"} for r in rows], 1.0, False, True))
    write_abstract(ab)
    cli.check_outputs([js, md, ab], full=True)  # no error
    with pytest.raises(ValueError, match="full claims table"):
        cli.check_outputs([ab], full=False)
