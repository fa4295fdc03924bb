"""Claims registry and `python -m bounds.verify` (issue 3): local claims PASS, planted wrong bounds FAIL,
the simulators interface (NOT-RUN / combine / ERROR), and the CLI's files."""
import inspect
import json
import sys
import types

import numpy as np
import pytest
import sympy as sp

import estimators
from bounds import bias, checks, claims, delay, verify
from bounds.symbols import C2, G, M, d, eps, eta

LOCAL = [1, 2, 3, 4, 5, 6, 10, 11, 12, 15]
SIMULATED_ONLY = [7, 8, 9, 13, 14, 16, 17, 18]


@pytest.fixture
def no_simulators(monkeypatch):
    """Make `import simulators.checks` fail as it does before issue 4 lands."""
    monkeypatch.setitem(sys.modules, "simulators.checks", None)


@pytest.fixture
def fake_simulators(monkeypatch):
    def install(checks_map):
        mod = types.ModuleType("simulators.checks")
        mod.CHECKS = checks_map
        monkeypatch.setitem(sys.modules, "simulators.checks", mod)
        return mod
    return install


def _sim(status, **kw):
    return lambda quick: {"expected": 1.0, "measured": 1.0, "tolerance": 0.0, "status": status,
                          "evidence": f"fake {status}", **kw}


def test_registry_shape():
    assert [c.id for c in claims.CLAIMS] == list(range(1, 19))
    for c in claims.CLAIMS:
        assert c.title and c.theory_ref.startswith("§") and c.statement
        assert set(c.kind.split("+")) <= set(claims.KINDS)
        assert (c.local is not None) == (c.id in LOCAL)
        assert c.simulated == (c.id in SIMULATED_ONLY + [6, 15])
    with pytest.raises(ValueError, match="unknown claim id"):
        claims.get_claim(19)


@pytest.mark.parametrize("cid", LOCAL)
def test_local_claims_pass(cid, no_simulators):
    row = claims.get_claim(cid).run(quick=True)
    assert tuple(row) == claims.KEYS
    assert row["status"] == "PASS", row["evidence"]
    assert row["seconds"] >= 0
    json.dumps(row)  # JSON-serialisable
    if cid in (6, 15):
        assert "MC part NOT-RUN (needs simulators (issue 4))" in row["evidence"]


def test_sympy_exponents_in_rows(no_simulators):
    r11, r12 = (claims.get_claim(i).run(quick=True) for i in (11, 12))
    assert (r11["measured"]["gmc"], r11["measured"]["tic_mask"]) == ("-2", "-4")
    m = r12["measured"]
    assert m["G"] == {"gmc": "-2/5", "tic_mask": "0"}
    assert m["epsilon"] == {"gmc": "-2/5", "tic_mask": "-4/5"}
    assert m["d"] == {"gmc": "4/5", "tic_mask": "4/5"}
    assert m["T"] == {"gmc": "-4/5", "tic_mask": "-4/5"}
    assert m["G-slope"]["gmc"] == pytest.approx(-0.4, abs=1e-3)


@pytest.mark.parametrize("cid", SIMULATED_ONLY)
def test_simulated_claims_not_run_without_simulators(cid, no_simulators):
    row = claims.get_claim(cid).run(quick=True)
    assert row["status"] == "NOT-RUN"
    assert "needs simulators (issue 4)" in row["evidence"]
    assert row["expected"]  # THEORY's statement is still shown


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
def test_planted_wrong_closed_form_fails(cid, module, name, wrong, monkeypatch, no_simulators):
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

    monkeypatch.setattr(checks.bias, "key_quadratic_bound", boom)
    row = claims.get_claim(5).run(quick=True)
    assert row["status"] == "ERROR"
    assert "ZeroDivisionError: planted" in row["evidence"]


# --- simulators interface --------------------------------------------------------------------


def test_simulator_results_are_combined(fake_simulators):
    fake_simulators({6: _sim("PASS"), 7: _sim("FAIL"), 8: lambda q: 1 / 0, 9: lambda q: "nonsense",
                     15: _sim("FAIL")})
    rows = {r["id"]: r for r in claims.run_claims([6, 7, 8, 9, 13], quick=True)}
    assert rows[6]["status"] == "PASS"
    assert rows[6]["measured"]["simulation"] == 1.0 and "fake PASS" in rows[6]["evidence"]
    assert rows[7]["status"] == "FAIL"
    assert rows[8]["status"] == "ERROR" and "ZeroDivisionError" in rows[8]["evidence"]
    assert rows[9]["status"] == "ERROR"
    assert rows[13]["status"] == "NOT-RUN" and "no claim 13" in rows[13]["evidence"]


def test_combined_claim_fails_when_simulation_fails(fake_simulators, monkeypatch):
    fake_simulators({6: _sim("FAIL")})
    assert claims.get_claim(6).run(quick=True)["status"] == "FAIL"
    fake_simulators({6: lambda q: {"status": "PASS", "evidence": "ok"}})
    monkeypatch.setattr(bias, "fourth_moment_group_mean", lambda s2, m4, G_: m4 / G_**3)
    assert claims.get_claim(6).run(quick=True)["status"] == "FAIL"


def test_broken_simulators_module_is_an_error(monkeypatch):
    mod = types.ModuleType("simulators.checks")  # no CHECKS mapping at all
    monkeypatch.setitem(sys.modules, "simulators.checks", mod)
    row = claims.get_claim(7).run(quick=True)
    assert row["status"] == "NOT-RUN" and "no CHECKS" in row["evidence"]


def test_jsonable():
    out = claims.jsonable({"a": sp.Rational(-2, 5), "b": np.float64(0.5), "c": {1, 2}, "d": float("inf"),
                           "e": np.bool_(True), 3: (np.int64(4),)})
    assert out == {"a": "-2/5", "b": 0.5, "c": [1, 2], "d": "inf", "e": True, "3": [4]}
    json.dumps(out)


# --- CLI -------------------------------------------------------------------------------------


def test_cli_writes_table_and_files(tmp_path, capsys, no_simulators):
    out = tmp_path / "v" / "claims.json"
    rc = verify.main(["--only", "5,7", "--json", str(out), "--quick"])
    assert rc == 1  # claim 7 is NOT-RUN
    printed = capsys.readouterr().out
    lines = [ln for ln in printed.splitlines() if ln[:3].strip() in {"5", "7"}]
    assert len(lines) == 2 and "PASS" in lines[0] and "NOT-RUN" in lines[1]
    assert lines[0].index("PASS") == lines[1].index("NOT-RUN")  # aligned status column
    rows = json.loads(out.read_text())
    assert [r["id"] for r in rows] == [5, 7]
    assert all(tuple(r) == claims.KEYS for r in rows)
    md = out.with_suffix(".md").read_text()
    assert "| 5 |" in md and "NOT-RUN" in md

    assert verify.main(["--only", "5", "--json", str(out), "--quick"]) == 0
    assert [r["id"] for r in json.loads(out.read_text())] == [5]


@pytest.mark.parametrize("bad", ["0", "3,x", "19", ""])
def test_cli_rejects_bad_only(bad, tmp_path):
    with pytest.raises(SystemExit) as exc:
        verify.main(["--only", bad, "--json", str(tmp_path / "c.json")])
    assert exc.value.code == 2
