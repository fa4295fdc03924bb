"""The second-rounding replicate's comparison (studies.replicate): the interval of a difference of two
stable shares, and the replicate grid forcing and recording its kernel path."""
from __future__ import annotations

from studies.replicate import analysis as replicate


def test_the_committed_run_of_a_replicate_cell():
    assert replicate._committed_name("study", "long-study-gmc-d64-s3") == "long-gmc-d64-s3"
    assert replicate._committed_name("sgd", "long-sgd-is-d64-s3") == "long-sgd-is-d64-s3"


def test_the_replicate_grid_forces_its_kernel_path_and_others_record_none(monkeypatch):
    import os

    from grids import runner as study
    from studies.grids import GRIDS
    from studies.replicate.grids import AVX2_KERNELS

    assert GRIDS["replicate_avx2"].record()["kernel_env"] == [list(kv) for kv in AVX2_KERNELS]
    assert "kernel_env" not in GRIDS["primary"].record()  # recorded settings of earlier grids unchanged
    for k, _ in AVX2_KERNELS:  # set, then removed: monkeypatch restores each to its state before the test
        monkeypatch.setenv(k, "unset")
        monkeypatch.delenv(k)
    monkeypatch.setattr(study, "_warm_starts", lambda s: (_ for _ in ()).throw(ValueError("stop here")))
    assert study.main(["--grid", "replicate_avx2", "--out", "/nonexistent/never-made"], GRIDS) == 2
    assert all(os.environ.get(k) == v for k, v in AVX2_KERNELS)


def test_the_machine_record_names_a_forced_kernel_path(monkeypatch):
    from llm_runs.warmstart import machine

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    assert "kernel_env" not in machine()
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert machine()["kernel_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def test_the_machines_that_made_the_committed_replicate_runs_are_counted():
    from grids import grid_folder
    from grids.run_table import read_runs

    rep = read_runs(grid_folder("replicate_avx2"), "replicate_avx2")
    made = replicate.machines(rep)
    assert sum(m["runs"] for m in made) == int(rep["complete"].sum()) > 0
    assert all(m["kernel_env"].get("ATEN_CPU_CAPABILITY") == "avx2" and m["cpu_capability"] == "AVX2" for m in made)


def test_the_report_names_the_machines_and_what_the_replays_across_them_found(tmp_path):
    import json

    from studies.report.sections.replicate import machine_lines

    one = {"cpu_capability": "AVX2", "cpu_flags": "aaaa", "kernel_env": {"ATEN_CPU_CAPABILITY": "avx2"}, "runs": 7}
    other = {"cpu_capability": "AVX2", "cpu_flags": "bbbb", "kernel_env": {}, "runs": 3}
    assert machine_lines([one], []) == []
    text = machine_lines([one, other], [])[1]
    assert "Made on 2 machines" in text and "7 runs on AVX2 (CPU flags aaaa, forced ATEN_CPU_CAPABILITY=avx2)" in text
    assert "3 runs on AVX2 (CPU flags bbbb, native path)" in text and "is not checked" in text
    rec = {"run": "results/llm/replicate_avx2/long-sgd-gmc-d64-s0", "steps": 200, "machine": other,
           "columns_compared": 40, "columns_differing": ["stale/mu4"], "fields_differing": 9,
           "identical_columns": ["x"] * 39}
    (tmp_path / "replay-a.json").write_text(json.dumps(rec))
    text = machine_lines([one, other], [tmp_path / "replay-a.json"])[1]
    assert "`long-sgd-gmc-d64-s0` (200 updates) replayed on AVX2 (CPU flags bbbb, native path): 39 of 40 columns " \
           "byte-identical, 9 fields differing in `stale/mu4`" in text


def test_the_study_sections_say_whether_their_verdicts_survived(tmp_path):
    import json

    from studies.report.sections.replicate import survival_lines

    assert survival_lines(("H1",), tmp_path / "none.json") == []
    v = {"seeds_whole": [0], "provisional": True}
    (tmp_path / "c.json").write_text(json.dumps(v))
    assert "too few whole seeds to re-decide M1, M2b" in survival_lines(("M1", "M2b"), tmp_path / "c.json")[0]
    v = {"seeds_whole": list(range(10)), "provisional": False,
         "verdicts": {"H1": {"replicate": "REFUTED", "committed": "REFUTED", "same": True},
                      "H2": {"replicate": "CONFIRMED", "committed": "REFUTED", "same": False},
                      "M1": {"replicate": "CONFIRMED", "committed": "CONFIRMED", "same": True}}}
    (tmp_path / "c.json").write_text(json.dumps(v))
    text = survival_lines(("H1", "H2", "H4"), tmp_path / "c.json")[0]
    assert "10 of 10 seeds whole" in text and "H1 REFUTED in the replicate against REFUTED committed (the same)" in text
    assert "H2 CONFIRMED in the replicate against REFUTED committed (CHANGED)" in text and "M1" not in text
    assert "do NOT all survive" in text
    assert "These verdicts survive" in survival_lines(("M1",), tmp_path / "c.json")[0]
    (tmp_path / "c.json").write_text(json.dumps({**v, "seeds_whole": [0, 1], "provisional": True}))
    text = survival_lines(("H2",), tmp_path / "c.json")[0]
    assert "(differs so far)" in text and "CHANGED" not in text and "no verdict is said to survive" in text


def test_the_readme_says_when_the_replicate_left_its_single_machine():
    from studies.report.findings import machines_sentence

    one = {"cpu_capability": "AVX2", "cpu_flags": "a", "kernel_env": {}, "runs": 3}
    assert machines_sentence({"machines": [one]}) == "" == machines_sentence({})
    said = machines_sentence({"machines": [one, {**one, "cpu_flags": "b"}]})
    assert "from 2 machines, where the pre-registration names one" in said
