"""The committed warm starts: the study's grids start from them on any CPU, their weights are
refused when they do not hash to their record, a cached warm start is checked against its own
record, and a machine that rounds the recipe differently uses the committed weights, says so,
and its runs are accepted as the same design while the byte-for-byte replay is skipped.

The trainers here are a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llm_runs import committed_warmstarts as committed
from llm_runs import warmstart
from llm_runs.config import resolve_config
from llm_runs.tasks import build_task

MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1}
SMALL = {"model_kwargs": MODEL, "warm_start_steps": 5, "heldout_size": 8, "eval_train_size": 8, "prompts_per_step": 2,
         "group_size": 2, "eval_every": 0, "threads": 1, "steps": 3, "checkpoint_every": 0}
ROOT = Path(__file__).resolve().parents[1]


def _small(cache, **kw):
    return resolve_config({**SMALL, "cache_dir": str(cache), **kw})


@pytest.mark.parametrize("which, run", [("long", "results/llm/study/long-gmc-d64-s0"),
                                        ("short", "results/llm/study/short-gmc-d64-s0")])
def test_the_committed_warm_starts_are_the_ones_the_committed_runs_started_from(which, run, tmp_path):
    import dataclasses

    from llm_runs.reference import committed_config

    cfg = dataclasses.replace(committed_config(which), cache_dir=str(tmp_path))
    if not committed.committed_path(cfg).is_dir():
        pytest.fail(f"no committed warm start for {which} ({committed.committed_path(cfg)})")
    from schema.results import read_run_doc

    used = read_run_doc(ROOT / run)["warm_start"]  # packed or not
    ws = warmstart.get_warm_start(cfg, build_task(cfg), log=lambda m: None)
    assert ws.info["source"] == "committed"
    assert committed.weights_digest(ws.path) == ws.info["weights_sha256"]  # reassembled and checked
    assert warmstart.differs(used, ws.info) is None  # same key, held-out pc to every bit (and hash where recorded)
    for part in committed.committed_path(cfg).iterdir():
        assert part.stat().st_size <= committed.PART_BYTES


def _commit_small(tmp_path, monkeypatch):
    root = tmp_path / "committed"
    monkeypatch.setenv(committed.COMMITTED_ENV, str(root))
    cfg = _small(tmp_path / "made-here")
    warmstart.commit(cfg, build_task(cfg), log=lambda m: None)
    return cfg, committed.committed_path(cfg)


def test_a_corrupted_committed_warm_start_is_refused_by_its_hash(tmp_path, monkeypatch):
    cfg, folder = _commit_small(tmp_path, monkeypatch)
    part = next(folder.glob("*.part-00"))
    data = bytearray(part.read_bytes())
    data[-3] ^= 0x01  # one bit of one weight
    part.write_bytes(bytes(data))
    fresh = _small(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"committed warm start .* corrupt or edited: its weights hash to"):
        warmstart.get_warm_start(fresh, build_task(fresh), log=lambda m: None)
    assert not any((tmp_path / "elsewhere" / "warmstart").glob("tiny-cpu-*[!0-9]"))  # nothing half-written kept
    with pytest.raises(ValueError, match="never replaced"):
        warmstart.commit(cfg, build_task(cfg), log=lambda m: None)


def _other_weights(path: Path) -> None:
    """Replace the weights in ``path`` by other finite weights of the same shapes (every weight halved)."""
    from safetensors.torch import load_file, save_file

    f = path / "model.safetensors"
    tensors = load_file(str(f))
    save_file({k: v * 0.5 for k, v in tensors.items()}, str(f), metadata={"format": "pt"})


def test_a_cached_warm_start_whose_weights_were_swapped_is_refused_and_named(tmp_path):
    cfg = _small(tmp_path)
    ws = warmstart.get_warm_start(cfg, build_task(cfg), log=lambda m: None)
    original = committed.weights_digest(ws.path)
    _other_weights(ws.path)
    said = []
    again = warmstart.get_warm_start(cfg, build_task(cfg), log=said.append)
    assert "the cache was edited or corrupted" in "\n".join(said)
    assert committed.weights_digest(again.path) == original == again.info["weights_sha256"]  # recomputed
    assert [p for p in ws.path.parent.iterdir() if ".corrupt-" in p.name]  # kept aside, never deleted


def test_a_cached_warm_start_whose_recorded_hash_was_edited_is_refused_as_a_cache_problem(tmp_path):
    cfg = _small(tmp_path)
    ws = warmstart.get_warm_start(cfg, build_task(cfg), log=lambda m: None)
    record = ws.path / "warmstart.json"
    info = json.loads(record.read_text())
    info["weights_sha256"] = "0" * 64
    record.write_text(json.dumps(info))
    said = []
    warmstart.get_warm_start(cfg, build_task(cfg), log=said.append)
    text = "\n".join(said)
    assert "cache was edited or corrupted" in text and "CPU" not in text and "rounds" not in text


def test_a_machine_that_rounds_differently_uses_the_committed_weights_and_its_runs_pair(tmp_path, monkeypatch):
    """The committed weights stand for what another CPU computed: other bits than this machine's recipe
    gives, and another rounding fingerprint. A run here starts from them and says so; the analysis
    takes it as the same design; the byte-for-byte replay is skipped with the reason."""
    from grids.check import check_pairing, check_warm_starts
    from llm_runs.replay import ReplaySkipped, replay
    from llm_runs.trainer import Trainer

    cfg, folder = _commit_small(tmp_path, monkeypatch)
    made_here = warmstart.get_warm_start(cfg, build_task(cfg), log=lambda m: None)
    # the committing machine computed other bits: other weights, their hash and another fingerprint
    work = tmp_path / "other-machine"
    shutil.copytree(made_here.path, work)
    _other_weights(work)
    for old in folder.glob("*.part-*"):
        old.unlink()
    (folder / "model.safetensors.part-00").write_bytes((work / "model.safetensors").read_bytes())
    record = json.loads((folder / "warmstart.json").read_text())
    record.update(weights_sha256=committed.weights_digest(work), heldout_pc=0.123, rounding_fingerprint="f" * 64)
    (folder / "warmstart.json").write_text(json.dumps(record))

    grid = tmp_path / "grid"
    said = []
    Trainer(_small(tmp_path / "cache-here"), grid / "run-s0", progress=False, log=said.append).run()
    used = json.loads((grid / "run-s0" / "config.json").read_text())["warm_start"]
    assert used["source"] == "committed" and used["rounding"] == "differs"
    assert used["weights_sha256"] == record["weights_sha256"] != made_here.info["weights_sha256"]
    assert "rounds the warm-start recipe differently" in "\n".join(said)
    # the same design: the grid and its pairing accept the run as started from the committed warm start
    check_warm_starts(grid, {"long": record})
    reference = tmp_path / "reference"
    (reference / "run-s0").mkdir(parents=True)
    (reference / "run-s0" / "config.json").write_text(json.dumps({"warm_start": record, "config": {}}))
    check_pairing(grid, reference)
    # made on this machine: it replays here to every byte, whatever the warm start's machine rounded
    assert replay(grid / "run-s0", 2, cache_dir=tmp_path / "cache-replay") == []
    # the same run as if made on another machine (the committing one): skipped, with the reason
    doc = json.loads((grid / "run-s0" / "config.json").read_text())
    doc["machine"] = {**doc["machine"], "cpu_flags": "0" * 16}
    (grid / "run-s0" / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ReplaySkipped, match="byte-for-byte check is skipped"):
        replay(grid / "run-s0", 2, cache_dir=tmp_path / "cache-replay")
    # the recipe's rounding is a proxy: compared all the same, the run replays here to every byte
    assert replay(grid / "run-s0", 2, cache_dir=tmp_path / "cache-replay", anyway=True) == []


def test_a_run_made_on_a_forced_kernel_path_replays_only_on_that_path(tmp_path, monkeypatch):
    from llm_runs.replay import ReplaySkipped, replay
    from llm_runs.trainer import Trainer

    for name in warmstart.KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    Trainer(_small(tmp_path / "cache"), tmp_path / "run", progress=False, log=lambda m: None).run()
    doc = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "kernel_env" not in doc["machine"]
    doc["machine"]["kernel_env"] = {"ATEN_CPU_CAPABILITY": "avx2"}  # as a run made with the variable set records
    (tmp_path / "run" / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ReplaySkipped, match=r"kernel path .*ATEN_CPU_CAPABILITY.* forces none, so the byte-for-byte "
                                            r"check is skipped: replay it with ATEN_CPU_CAPABILITY=avx2"):
        replay(tmp_path / "run", 2, cache_dir=tmp_path / "cache")
    doc["machine"].pop("kernel_env")  # the same run made on no forced path, replayed on a forced one: skipped too
    (tmp_path / "run" / "config.json").write_text(json.dumps(doc))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pytest.raises(ReplaySkipped, match=r"kernel path of the machine \(none forced\), this process forces "
                                            r"\{'ATEN_CPU_CAPABILITY': 'default'\}, so the byte-for-byte check is "
                                            r"skipped: replay it with none of ATEN_CPU_CAPABILITY"):
        replay(tmp_path / "run", 2, cache_dir=tmp_path / "cache")


def test_the_replay_writes_its_outcome_and_never_replaces_a_foreign_file(tmp_path, monkeypatch):
    from llm_runs.replay import REPLAY_FORMAT, main
    from llm_runs.trainer import Trainer

    for name in warmstart.KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    Trainer(_small(tmp_path / "cache"), tmp_path / "run", progress=False, log=lambda m: None).run()
    out = tmp_path / "replay.json"
    run = [str(tmp_path / "run"), "--steps", "2", "--cache-dir", str(tmp_path / "cache")]
    assert main([*run, "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["format"] == REPLAY_FORMAT and rec["steps"] == 2 and rec["fields_differing"] == 0
    assert rec["columns_differing"] == [] and len(rec["identical_columns"]) == rec["columns_compared"] > 10
    assert rec["machine"] == warmstart.machine() and "train/loss" in rec["identical_columns"]
    foreign = tmp_path / "mine.json"
    foreign.write_text("{}")
    assert main([*run, "--json", str(foreign)]) == 2
    assert foreign.read_text() == "{}"


def test_the_replay_names_the_columns_that_differ():
    from llm_runs.replay import differing_columns

    lines = ["step 0 stale/mu4: '1.0' vs '1.1'", "step 1 train/loss: '2' vs '3'", "step 1 stale/mu4: '4' vs '5'",
             "step 3: missing from the replay"]
    assert differing_columns(lines) == ["stale/mu4", "train/loss"]


def test_a_machine_that_rounds_as_the_committing_one_replays_byte_for_byte(tmp_path, monkeypatch):
    from llm_runs.replay import replay
    from llm_runs.trainer import Trainer

    _commit_small(tmp_path, monkeypatch)
    Trainer(_small(tmp_path / "cache-here"), tmp_path / "run", progress=False, log=lambda m: None).run()
    used = json.loads((tmp_path / "run" / "config.json").read_text())["warm_start"]
    assert used["source"] == "committed" and used["rounding"] == "same"
    assert replay(tmp_path / "run", 3, cache_dir=tmp_path / "cache-replay") == []


def test_the_rounding_fingerprint_leaves_the_random_state_alone(tmp_path):
    import random

    import numpy as np
    import torch

    cfg = _small(tmp_path)
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    before = (torch.get_rng_state().clone(), np.random.get_state()[1].copy(), random.getstate())
    first = warmstart.rounding_fingerprint(cfg, build_task(cfg))
    assert torch.equal(torch.get_rng_state(), before[0]) and (np.random.get_state()[1] == before[1]).all()
    assert random.getstate() == before[2]
    assert warmstart.rounding_fingerprint(cfg, build_task(cfg)) == first  # deterministic on one machine


def test_check_names_every_committed_warm_start_by_its_settings(tmp_path, monkeypatch, capsys):
    """``python -m llm_runs.warmstart --check`` rebuilds each committed recipe from its record and
    recomputes it here (a small one: this machine made it, so it reproduces the bits)."""
    _, folder = _commit_small(tmp_path, monkeypatch)
    assert list(committed.committed_configs()) == [folder.name]
    assert warmstart.main(["--check"]) == 0
    assert "reproduces the committed bits" in capsys.readouterr().out
    assert warmstart.main(["--check", "--only", "nothing"]) == 2



def test_the_larger_models_warm_start_is_named_by_the_runs_that_started_from_it():
    """Not committed yet: the scale grids record one start (its weights' sha256) and the machine kind
    that made it, which is what ``--commit large`` must reproduce before committing anything."""
    from grids import grid_folder
    from llm_runs.reference import committed_config

    cfg = committed_config("large")
    found = committed.recorded_starts(committed.warm_start_key(cfg),
                                      [grid_folder(g) for g in ("scale", "scale_mech", "scale_variants")])
    assert list(found) == ["03f620f0824341f6cb695a175d34c25123ee0cb7103f74121e4932f3cd098d12"]
    assert found[next(iter(found))]["runs"] == 55 and found[next(iter(found))]["cpu_flags"] == ["fc7df03f53a7dec4"]


def test_a_warm_start_other_than_the_one_the_committed_runs_started_from_is_never_committed(tmp_path, monkeypatch):
    root = tmp_path / "committed"
    monkeypatch.setenv(committed.COMMITTED_ENV, str(root))
    cfg = _small(tmp_path / "made-here")
    with pytest.raises(ValueError, match=r"committed runs started from 0000000000000000: .* nothing was committed"):
        warmstart.commit(cfg, build_task(cfg), log=lambda m: None, expect_sha256="0" * 64)
    assert not root.exists() or not any(root.iterdir())
    here = warmstart.get_warm_start(cfg, build_task(cfg), log=lambda m: None).info["weights_sha256"]
    warmstart.commit(cfg, build_task(cfg), log=lambda m: None, expect_sha256=here)
    assert committed.committed_record(cfg)["weights_sha256"] == here


def test_commit_of_a_warm_start_already_committed_changes_nothing(capsys):
    before = sorted((p.name, p.stat().st_mtime_ns) for p in committed.committed_root().rglob("*"))
    assert warmstart.main(["--commit", "long"]) == 0
    assert "already committed" in capsys.readouterr().out
    assert sorted((p.name, p.stat().st_mtime_ns) for p in committed.committed_root().rglob("*")) == before


def _committed_copy(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "warmstarts"
    shutil.copytree(committed.committed_root(), root)
    monkeypatch.setenv(committed.COMMITTED_ENV, str(root))
    return root


def test_check_hashes_the_committed_files_as_read(tmp_path, monkeypatch, capsys):
    """A flipped byte in the weights, or an edited record over intact weights, is a corrupt warm start:
    ``--check`` says so and exits 2 before recomputing anything; it never vouches for the bits and never
    blames the CPU."""
    root = _committed_copy(tmp_path, monkeypatch)
    folder = min(p for p in root.iterdir() if p.is_dir())
    cfg = committed.committed_configs()[folder.name]
    assert committed.committed_digest(cfg) == committed.committed_record(cfg)["weights_sha256"]  # intact
    part = min(folder.glob("*.safetensors.part-*"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    assert warmstart.main(["--check", "--only", folder.name]) == 2
    err = capsys.readouterr()
    assert "is corrupt" in err.err and "not a rounding difference" in err.err and "reproduces" not in err.out
    data[len(data) // 2] ^= 0x01  # intact weights, an edited record
    part.write_bytes(bytes(data))
    rec = json.loads((folder / "warmstart.json").read_text())
    rec["weights_sha256"] = "0" * 64
    (folder / "warmstart.json").write_text(json.dumps(rec))
    assert warmstart.main(["--check", "--only", folder.name]) == 2
    err = capsys.readouterr()
    assert "is corrupt" in err.err and "does NOT reproduce" not in err.out + err.err
    assert len(err.err.strip().splitlines()) == 1


@pytest.mark.parametrize("cut", ["short", "step"])
def test_a_short_or_torn_stored_row_is_one_line_before_any_replay(tmp_path, capsys, cut):
    from llm_runs.replay import main as replay_main

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests/reference_runs/short-token_clip-d16-s0", run)
    path = run / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = (lines[2][: len(lines[2]) // 3] if cut == "short" else "x" + lines[2][1:]).rstrip("\n") + "\n"
    path.write_text("".join(lines))
    assert replay_main([str(run), "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 3" in err[0] and "Traceback" not in err[0]
    with pytest.raises(SystemExit) as stop:
        replay_main([str(run), "--steps", "0"])
    assert stop.value.code == 2


@pytest.mark.parametrize("damage", ["garbage", "no settings", "gone"])
def test_check_names_a_damaged_record_in_one_line(tmp_path, monkeypatch, capsys, damage):
    root = _committed_copy(tmp_path, monkeypatch)
    folder = min(p for p in root.iterdir() if p.is_dir())
    record = folder / "warmstart.json"
    if damage == "garbage":
        record.write_text("{not json")
    elif damage == "no settings":
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "settings"}))
    else:
        record.unlink()
    assert warmstart.main(["--check", "--only", folder.name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and folder.name in err[0]
