"""studies.gpu.run: the Qwen3-0.6B study's whole code path at a tiny shape on the CPU, its plan and cost
model, its deadline, and its section of the report."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import time

import pytest
import torch

from llm_runs.presets import char_tokenizer
from llm_runs.tasks import ScratchpadTask
from schema.results import read_run, read_run_config, run_folders
from studies.gpu import run as gpu_study
from studies.gpu.check import QWEN3_0_6B_SHAPE
from studies.gpu.figures.f14_gpu_pc_vs_delay import read_gpu_runs
from studies.staleness.analysis import whole_seeds

RUNS = ["long-gmc-d0-s0", *(f"long-{e}-d2-s0" for e in gpu_study.GPU_ESTIMATORS)]


def _main(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = gpu_study.main(argv)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``--tiny`` once for the module (the character tokenizer: it tokenises the task as Qwen3's does)."""
    root = tmp_path_factory.mktemp("gpu_study")
    tok = root / "tokenizer"
    char_tokenizer(ScratchpadTask.alphabet).save_pretrained(tok)
    out = root / "results" / "llm" / "gpu_study"
    rc, text = _main(["--tiny", "--tokenizer-dir", str(tok), "--out", str(out), "--export", str(root / "export")])
    return {"rc": rc, "text": text, "out": out, "root": root, "tok": tok}


def test_tiny_study_writes_run_folders_that_schema_results_reads(tiny):
    assert tiny["rc"] == 0, tiny["text"]
    out = tiny["out"]
    assert [p.name for p in run_folders(out)] == sorted(RUNS)
    for run in run_folders(out):
        settings, m = read_run(run)
        cfg = read_run_config(run)
        assert list(m["step"]) == [0, 1, 2, 3] and (run / "summary.json").is_file()
        assert (cfg["preset"], cfg["amp"], cfg["dtype"], cfg["task"], cfg["terms"]) == \
            ("qwen3-0.6b", "bfloat16", "float32", "scratchpad", 7)
        assert settings["delay"] == (0 if "-d0-" in run.name else 2)
        assert m["train/grad_norm"].iloc[:3].notna().all()
    runs = read_gpu_runs(out)
    assert whole_seeds(runs) == [0] and set(runs["horizon"]) == {"long"} and runs["complete"].all()
    assert sorted(json.loads((out / "sweep.json").read_text())["runs"]) == sorted(RUNS)
    record = json.loads((out / "gpu_study.json").read_text())
    ws = record["warm_start"]
    assert (ws["prompt_tokens"], ws["completion_tokens"]) == (14, 18)
    assert ws["steps"] == 10 and ws["stopped"] == "max_steps" and [c["step"] for c in ws["curve"]] == [0, 5, 10]
    assert [w["seed"] for w in record["waves"]] == [0] and not record["cut_at_deadline"]
    assert {r["run"] for r in record["runs"]} == set(RUNS)
    lines = tiny["text"].splitlines()
    head = lines.index(" | ".join(gpu_study.SUMMARY_HEADER))
    table = lines[head + 1:head + 7]
    assert sorted(row.split(" | ")[0] for row in table) == sorted(["gmc", *gpu_study.GPU_ESTIMATORS])
    assert all("1/1 complete" in row for row in table)
    assert "completions are 18 tokens" in tiny["text"] and "fitted: seeds [0] of [0]" in tiny["text"]


def test_export_is_one_archive_of_the_light_files_and_no_weights(tiny, tmp_path):
    import tarfile

    with tarfile.open(tiny["root"] / "export" / gpu_study.EXPORT_NAME) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert not [n for n in names if n.endswith(".safetensors") or "checkpoints" in n]
    dest = tmp_path / "gpu_study"
    assert sorted(p.name for p in run_folders(dest)) == sorted(RUNS)
    assert (dest / "gpu_study.json").is_file() and not (dest / "warmstart").exists()
    for run in run_folders(dest):
        assert read_run(run)[1].equals(read_run(tiny["out"] / run.name)[1])


def test_rerun_skips_finished_runs_and_restarts_a_cut_short_one(tiny):
    out = tiny["out"]
    cut = out / "long-is-d2-s0"
    (cut / "summary.json").unlink()
    shutil.rmtree(cut / "checkpoints")
    lines = (cut / "metrics.csv").read_text().splitlines(keepends=True)
    (cut / "metrics.csv").write_text("".join(lines[:3]))  # header and two updates: killed at the deadline
    before = {r: (out / r / "summary.json").stat().st_mtime_ns for r in RUNS if r != cut.name}
    rc, text = _main(["--tiny", "--tokenizer-dir", str(tiny["tok"]), "--out", str(out)])
    assert rc == 0, text
    assert "warm start: reusing" in text and "5 complete, 1 to run (1 resumed)" in text
    assert list(read_run(cut)[1]["step"]) == [0, 1, 2, 3] and (cut / "summary.json").is_file()
    assert {r: (out / r / "summary.json").stat().st_mtime_ns for r in before} == before


def test_qwen3_0_6b_parameter_count_is_the_architectures():
    h, L, V, hd, f = 1024, 28, 151936, 128, 3072
    q, kv = 16 * hd, 8 * hd
    layer = h * q + 2 * h * kv + q * h + 2 * hd + 3 * h * f + 2 * h  # q k v o, q/k norms, mlp, two norms
    params, embed = gpu_study.parameter_counts(QWEN3_0_6B_SHAPE, V)
    assert (params, embed) == (V * h + L * layer + h, V * h) == (596_049_920, 155_582_464)


def test_dry_run_prices_the_plan_and_refuses_one_over_budget_or_memory():
    rc, text = _main(["--dry-run"])
    assert rc == 0, text
    assert "596.0M parameters" in text and "prompts 14 tokens, completions 18 tokens" in text
    params, embed = gpu_study.parameter_counts(QWEN3_0_6B_SHAPE, 151936)
    plan = gpu_study.PLANS["gpu"]
    cost = gpu_study.cost_model(plan, params, embed, 14, 18)
    assert cost["flops_per_token_forward"] == 2 * params
    assert cost["sft_flop_per_step"] == plan.warm.batch * 32 * 6 * params
    assert cost["total_s"] <= plan.budget_s and f"total {cost['total_s']:.0f} s" in text
    assert cost["total_s"] == pytest.approx(gpu_study.STUDY_OVERHEAD_S + gpu_study.EXPORT_MARGIN_S
                                            + cost["warm_start_s"] + len(plan.seeds) * cost["seed_s"])
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        assert _main(["--dry-run", "--steps", "400"])[0] == 2
        assert _main(["--dry-run", "--jobs", "3"])[0] == 2
        assert _main(["--dry-run", "--delay", "0"])[0] == 2
    err = buf.getvalue()
    assert "exceed its 480 s budget" in err and "at most 2 fit" in err and "--delay must be >= 1" in err
    assert gpu_study.max_jobs(plan, params, embed) == plan.jobs == 2


def test_the_device_run_refuses_without_a_gpu(tiny, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        rc, _ = _main(["--tokenizer-dir", str(tiny["tok"]), "--out", str(tmp_path / "gs")])
    assert rc == 2 and "no CUDA device" in buf.getvalue() and not (tmp_path / "gs").exists()


def test_deadline_executor_kills_running_runs_and_starts_nothing_after_it(tmp_path):
    ex = gpu_study.DeadlineExecutor(2, time.monotonic() + 60)
    job = ex.start_command([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "a.log")
    ex.cut()
    assert job.result() == -9 and ex.cut_runs == ["a"]
    ex.deadline = time.monotonic() - 1
    late = ex.start_command([sys.executable, "-c", "pass"], log_path=tmp_path / "b.log")
    assert late.poll() == -9 and ex.unstarted == ["b"] and not (tmp_path / "b.log").exists()
    ex.close()


def test_report_shows_the_gpu_study_or_says_it_has_not_run(tiny, monkeypatch, tmp_path):
    from studies.report import build as report

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "empty"))
    md = "\n".join(report.gpu_study_section(tmp_path, tmp_path / "figs", draw_missing=False))
    assert "Not yet run on a GPU: `python -m studies.gpu.run`" in md
    monkeypatch.setenv("GMC_RESULTS", str(tiny["root"] / "results"))
    md = "\n".join(report.gpu_study_section(tmp_path, tmp_path / "figs", draw_missing=True))
    assert "| model | plain answer |" in md and "At the largest delay (d = 2) and the long horizon" in md
    assert "F14. Qwen3-0.6B on one GPU" in md and (tmp_path / "figs" / "f14_gpu_pc_vs_delay.png").is_file()
    assert "Warm start: 10 supervised steps" in md


def test_warm_start_stops_at_the_target_or_the_deadline_and_is_reused_only_with_its_settings(tiny, tmp_path):
    import dataclasses

    from llm_runs.presets import load_pretrained
    from studies.gpu.check import load_tokenizer

    tok = load_tokenizer(tiny["tok"])
    plan = gpu_study.PLANS["tiny"]
    easy = dataclasses.replace(plan, warm=dataclasses.replace(plan.warm, target_pc=0.0))
    info = gpu_study.warm_start(easy, tok, tmp_path / "a", lambda msg: None)
    assert (info["steps"], info["stopped"], info["reached"]) == (0, "target", True)
    model, _ = load_pretrained(tmp_path / "a")
    assert sum(p.numel() for p in model.parameters()) == info["parameters"]
    late = gpu_study.warm_start(plan, tok, tmp_path / "b", lambda msg: None, deadline=time.monotonic() - 1)
    assert (late["steps"], late["stopped"], late["reached"]) == (0, "time", False)
    assert gpu_study.warm_start(easy, tok, tmp_path / "a", lambda msg: None) == info
    with pytest.raises(ValueError, match="holds a warm start of other settings"):
        gpu_study.warm_start(plan, tok, tmp_path / "a", lambda msg: None)


def test_the_gpu_runs_reader_refuses_a_run_its_sweep_did_not_plan(tiny, tmp_path):
    copy = tmp_path / "gpu_study"
    shutil.copytree(tiny["out"], copy, ignore=shutil.ignore_patterns("warmstart", "checkpoints"))
    assert len(read_gpu_runs(copy)) == len(RUNS)
    shutil.copytree(copy / "long-is-d2-s0", copy / "long-is-d8-s0")
    with pytest.raises(ValueError, match="its sweep did not plan: long-is-d8-s0"):
        read_gpu_runs(copy)


# --------------------------------------------------------------------------- refused before the warm start


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """A tokenizer, and a warm start that fails the test if it starts: every refusal below comes first."""
    monkeypatch.setattr(gpu_study, "warm_start", lambda *a, **k: pytest.fail("the warm start ran before the check"))
    tok = tmp_path / "tokenizer"
    char_tokenizer(ScratchpadTask.alphabet).save_pretrained(tok)
    return tok


def _refused(argv, *needles):
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        rc, _ = _main(argv)
    err = buf.getvalue()
    assert rc == 2 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


def test_a_bad_run_setting_is_refused_by_the_dry_run_and_before_the_warm_start(no_work, tmp_path):
    _refused(["--dry-run", "--lr", "-1"], "lr")
    _refused(["--tiny", "--dry-run", "--lr", "-1", "--tokenizer-dir", str(no_work)], "lr")
    out = tmp_path / "gs"
    _refused(["--tiny", "--lr", "-1", "--tokenizer-dir", str(no_work), "--out", str(out)], "lr")
    assert not out.exists()  # no sweep.json left to block the retry


def test_export_never_replaces_a_user_file_and_is_checked_before_the_work(no_work, tmp_path):
    out = tmp_path / "gs"
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    _refused(["--tiny", "--tokenizer-dir", str(no_work), "--out", str(out), "--export", str(a_file)], str(a_file))
    dest = tmp_path / "export"
    dest.mkdir()
    (dest / "gpu_study.tar.gz").write_text("mine")
    _refused(["--tiny", "--tokenizer-dir", str(no_work), "--out", str(out), "--export", str(dest)],
             "not written by the toolkit")
    assert (dest / "gpu_study.tar.gz").read_text() == "mine" and a_file.read_text() == "mine"
    assert not out.exists()


def test_out_is_never_a_trainers_run_folder_nor_replaces_a_user_record(no_work, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"config": {}}')
    (run / "metrics.csv").write_text("step\n0\n")
    _refused(["--tiny", "--tokenizer-dir", str(no_work), "--out", str(run)], str(run))
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "metrics.csv"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "gpu_study.json").write_text("mine")
    _refused(["--tiny", "--tokenizer-dir", str(no_work), "--out", str(mine)], "gpu_study.json")
    assert sorted(p.name for p in mine.iterdir()) == ["gpu_study.json"]
    assert (mine / "gpu_study.json").read_text() == "mine"


def test_the_export_archive_is_recognised_as_the_toolkits(tmp_path):
    import tarfile

    src = tmp_path / "gpu_study"
    src.mkdir()
    (src / "gpu_study.json").write_text("{}")
    archive = gpu_study.export(src, tmp_path / "export")
    from schema.io import written_by_toolkit

    assert written_by_toolkit(archive, gpu_study.is_export_archive)
    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as tar:
        tar.add(src / "gpu_study.json", arcname="notes.txt")
    assert not written_by_toolkit(other, gpu_study.is_export_archive)
