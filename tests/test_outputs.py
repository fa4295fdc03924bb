"""Outputs named by a user: a file the toolkit did not write is never replaced, and an output
path that cannot be written is refused before the work starts (one rule: ``schema.io.check_output``)."""
from __future__ import annotations

import json

import pytest

from schema.io import check_output, written_by_toolkit

USER_TEXT = "my own notes, not the toolkit's\n"


def _user_file(path):
    path.write_text(USER_TEXT)
    return path


def test_check_output_rule(tmp_path):
    ours = tmp_path / "a.json"
    ours.write_text(json.dumps({"format": "gmc-grpo-claims/1"}))
    assert written_by_toolkit(ours) and check_output(ours) == ours
    md = tmp_path / "a.md"
    md.write_text("<!-- gmc-grpo-claims: written by python -m claims -->\n")
    assert written_by_toolkit(md)
    with pytest.raises(ValueError, match="not written by the toolkit"):
        check_output(_user_file(tmp_path / "b.json"))
    assert check_output(tmp_path / "new" / "c.json")  # a new file in a new folder: fine
    with pytest.raises(NotADirectoryError):
        check_output(tmp_path / "b.json" / "d.json")


def test_claims_study_json_never_replaces_a_user_file(tmp_path, capsys):
    from studies.staleness.analysis import main

    target = _user_file(tmp_path / "verdicts.json")
    assert main(["--root", str(tmp_path / "nothing"), "--json", str(target)]) == 2
    assert "not written by the toolkit" in capsys.readouterr().err
    assert target.read_text() == USER_TEXT


def test_claims_study_json_unwritable_is_refused_before_the_analysis(tmp_path, capsys, monkeypatch):
    from studies.staleness import analysis as study

    monkeypatch.setattr(study, "read_runs", lambda root: pytest.fail("the analysis ran before the check"))
    blocker = _user_file(tmp_path / "file")
    assert study.main(["--json", str(blocker / "verdicts.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_claims_study_replaces_its_own_verdicts(tmp_path):
    from studies.staleness.analysis import is_verdicts_text

    assert is_verdicts_text(json.dumps({"H1": {"verdict": "REFUTED"}, "H2": {"verdict": "NOT DECIDED"}}))
    assert not is_verdicts_text(json.dumps({"H1": 3}))
    assert not is_verdicts_text(USER_TEXT)


def test_claims_abstract_out_never_replaces_a_user_file(tmp_path, capsys, monkeypatch):
    from claims import abstract

    monkeypatch.setattr(abstract, "verdicts", lambda: pytest.fail("the verdicts were computed before the check"))
    target = _user_file(tmp_path / "abstract.json")
    assert abstract.main(["--out", str(target)]) == 2
    assert "not written by the toolkit" in capsys.readouterr().err
    assert target.read_text() == USER_TEXT


def test_figures_report_out_never_replaces_a_user_file_and_checks_first(tmp_path, capsys, monkeypatch):
    from studies.report import build as report

    monkeypatch.setattr(report, "build", lambda *a, **k: pytest.fail("the report was built before the check"))
    out = tmp_path / "out"
    out.mkdir()
    target = _user_file(out / "REPORT.md")
    assert report.main(["--out", str(out), "--no-draw"]) == 2
    err = capsys.readouterr().err
    assert "REPORT.md" in err and "not written by the toolkit" in err
    assert target.read_text() == USER_TEXT
    target.unlink()
    assert report.main(["--out", str(_user_file(tmp_path / "file") / "sub"), "--no-draw"]) == 2
    assert "cannot write" in capsys.readouterr().err
    # its own report (the committed form) is replaced
    assert report._is_report_text("# GMC-GRPO toolkit: theory against measurement\n")


def test_simulator_sweep_unwritable_out_is_one_line(tmp_path, capsys):
    from simulators.sweep import main

    blocker = _user_file(tmp_path / "file")
    assert main(["bias_vs_G", "--quick", "--no-progress", "--out", str(blocker / "sweep")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "file" in err


# --------------------------------------------------------------------------- strict JSON


def _strict(text: str):
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_every_json_written_is_strict_and_reads_back_to_the_same_values(tmp_path):
    from schema.io import write_json
    from schema.results import read_json

    obj = {"max_grad_norm": float("inf"), "low": -float("inf"), "gap": float("nan"), "x": [1.5, float("inf")],
           "nested": {"y": float("-inf")}, "name": "inf"}
    path = write_json(tmp_path / "a.json", obj)
    _strict(path.read_text())
    back = read_json(path)
    assert back["max_grad_norm"] == float("inf") and back["low"] == -float("inf") and back["gap"] != back["gap"]
    assert back["x"] == [1.5, float("inf")] and back["nested"] == {"y": -float("inf")} and back["name"] == "inf"


def test_a_trainer_config_with_an_infinite_setting_is_strict_json_and_resumes(tmp_path):
    from llm_runs.config import load_run_config
    from llm_runs.train import main

    model = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1}
    flags = ["--warm-start-steps=5", "--heldout-size=8", "--eval-train-size=8", "--prompts-per-step=2",
             "--group-size=2", "--eval-every=0", "--threads=1", f"--cache-dir={tmp_path / 'cache'}",
             f"--model-kwargs={json.dumps(model)}", "--max-grad-norm", "inf", "--no-progress"]
    out = tmp_path / "run"
    assert main(["--out", str(out), "--steps", "2", *flags]) == 0
    _strict((out / "config.json").read_text())
    for f in out.glob("*.json"):
        _strict(f.read_text())
    assert load_run_config(out).max_grad_norm == float("inf")
    assert main(["--out", str(out), "--resume", "--steps", "2", *flags]) == 0  # the stored setting matches


def test_claims_mechanism_json_never_replaces_a_user_file_and_checks_first(tmp_path, capsys, monkeypatch):
    from studies.mechanism import analysis as mechanism

    monkeypatch.setattr(mechanism, "analyse", lambda *a: pytest.fail("the analysis ran before the check"))
    target = _user_file(tmp_path / "verdicts.json")
    assert mechanism.main(["--json", str(target)]) == 2
    assert "not written by the toolkit" in capsys.readouterr().err
    assert target.read_text() == USER_TEXT
    blocker = _user_file(tmp_path / "file")
    assert mechanism.main(["--json", str(blocker / "verdicts.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "Traceback" not in err
    assert mechanism.is_mechanism_verdicts_text(json.dumps({"hypotheses": {"M1": {"verdict": "REFUTED"}}}))
    assert not mechanism.is_mechanism_verdicts_text(USER_TEXT)


def test_a_simulator_table_with_an_infinite_setting_resumes(tmp_path):
    from schema.io import same_settings_or_move_aside, write_json

    cfg = {"sweep": "x", "settings": [{"eps": float("inf"), "G": 4}]}
    write_json(tmp_path / "config.json", cfg)
    _strict((tmp_path / "config.json").read_text())
    assert same_settings_or_move_aside(tmp_path, cfg, ("sweep", "settings")) is True  # the same table: resume


@pytest.mark.parametrize("command", ["studies.group_size", "studies.corrections_2026", "studies.drift",
                                     "studies.replicate"])
@pytest.mark.parametrize("target", ["a user file", "under a file"])
def test_a_study_s_json_never_replaces_a_user_file_and_is_checked_before_any_work(tmp_path, capsys, monkeypatch,
                                                                                 command, target):
    """Each study's --json: a file the toolkit did not write is kept, a path that cannot be written is one line,
    both before a run is read (the results root here holds none, so reading would fail otherwise)."""
    import importlib

    main = importlib.import_module({"studies.group_size": "studies.group_size.__main__",
                                    "studies.corrections_2026": "studies.corrections_2026.analysis",
                                    "studies.drift": "studies.drift.analysis",
                                    "studies.replicate": "studies.replicate.analysis"}[command]).main
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "results"))
    user = _user_file(tmp_path / "notes.json")
    path = user if target == "a user file" else user / "verdicts.json"
    assert main(["--json", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("not written by the toolkit" in err[0] or "cannot write" in err[0]), err
    assert user.read_text() == USER_TEXT and not (tmp_path / "results").exists()
