"""The second-rounding replicate's comparison (studies.replicate): the interval of a difference of two
stable shares, and the replicate grid forcing and recording its kernel path."""
from __future__ import annotations

from studies.replicate import analysis as replicate


def test_the_committed_run_of_a_replicate_cell():
    assert replicate._committed_name("study", "long-study-gmc-d64-s3") == "long-gmc-d64-s3"
    assert replicate._committed_name("sgd", "long-sgd-is-d64-s3") == "long-sgd-is-d64-s3"


def test_the_replicate_grid_forces_its_kernel_path_and_others_record_none(monkeypatch):
    import os

    from llm_runs import study
    from llm_runs.grids import AVX2_KERNELS, STUDIES

    assert STUDIES["replicate_avx2"].settings()["kernel_env"] == [list(kv) for kv in AVX2_KERNELS]
    assert "kernel_env" not in STUDIES["primary"].settings()  # recorded settings of earlier grids unchanged
    for k, _ in AVX2_KERNELS:  # set, then removed: monkeypatch restores each to its state before the test
        monkeypatch.setenv(k, "unset")
        monkeypatch.delenv(k)
    monkeypatch.setattr(study, "_warm_starts", lambda s: (_ for _ in ()).throw(ValueError("stop here")))
    assert study.main(["--grid", "replicate_avx2", "--out", "/nonexistent/never-made"]) == 2
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
