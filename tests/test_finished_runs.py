"""A finished run whose files are torn is never counted complete: the grid runner's ``--resume`` (and every
sweep) names it with what is wrong and the commands that move it aside, runs nothing and changes nothing; packing
refuses it too. One check decides (schema.results.finished_run_problem, through llm_runs.run_folder.run_state)."""
from __future__ import annotations

import gzip
import json
import shlex
import subprocess

import pytest

from grids.sweep import SWEEPS, Sweep, run_sweep
from llm_runs.config import resolve_config
from llm_runs.metrics import run_columns
from llm_runs.run_folder import run_state
from schema.results import finished_run_problem, pack_metrics

T = 6


def _sweep(tmp_path) -> Sweep:
    base = {**SWEEPS["quick"].base, "steps": T, "cache_dir": str(tmp_path / "cache")}
    return Sweep("t", str(tmp_path / "sweep"), base, ("gmc",), (0,), (0,))


def _finished_run(tmp_path):
    """A finished run folder of the sweep's one cell as the trainer leaves it: config.json of the planned settings,
    metrics.csv with updates 0..T-1 and the final evaluation row T, summary.json."""
    sweep = _sweep(tmp_path)
    (cell,) = sweep.cells()
    run = tmp_path / "sweep" / cell.name
    run.mkdir(parents=True)
    config = resolve_config(cell.overrides)
    (run / "config.json").write_text(json.dumps({"config": config.to_dict()}))
    columns = run_columns(config)
    evals = [c for c in columns if c.startswith("eval/") or c == "perf/eval_s"]
    row = lambda t, cols: ",".join([str(t)] + [f"0.{t + 1}25" if c in cols else "" for c in columns[1:]]) + "\n"
    rows = [row(t, columns if t == 0 else set(columns) - set(evals)) for t in range(T)]
    rows.append(row(T, [*evals, columns[-1]]))  # the final evaluation, its last field a number
    (run / "metrics.csv").write_text(",".join(columns) + "\n" + "".join(rows))
    (run / "summary.json").write_text(json.dumps({"steps": T, "heldout_acc_end": 0.75}))
    return sweep, run


def _cut(path, n):
    path.write_bytes(path.read_bytes()[:-n])


def _packed_and_cut(run):
    data = gzip.compress((run / "metrics.csv").read_bytes())
    (run / "metrics.csv").unlink()
    (run / "metrics.csv.gz").write_bytes(data[: len(data) // 2])


TORN = {
    "rows lost at a line boundary": (lambda run: (run / "metrics.csv").write_text(
        "".join((run / "metrics.csv").read_text().splitlines(keepends=True)[:-3])), r"holds steps 0\.\.3, not 0\.\.6"),
    "the last row cut inside its last value": (lambda run: _cut(run / "metrics.csv", 2), r"no newline"),
    "the last row cut inside its fields": (lambda run: _cut(run / "metrics.csv", 12), r"line 8: \d+ fields"),
    "the metrics table gone": (lambda run: (run / "metrics.csv").unlink(), r"no metrics\.csv"),
    "a torn summary.json": (lambda run: _cut(run / "summary.json", 5), r"summary\.json"),
    "the summary names another horizon": (lambda run: (run / "summary.json").write_text('{"steps": 4}'),
                                          r"says 4 updates, its config\.json 6"),
    "a packed table cut short": (_packed_and_cut, r"metrics\.csv\.gz: not a readable gzip"),
}


def test_a_whole_finished_run_is_complete(tmp_path):
    sweep, run = _finished_run(tmp_path)
    assert finished_run_problem(run) is None
    assert run_state(run, resolve_config(sweep.cells()[0].overrides).to_dict()) == "complete"
    o = run_sweep(sweep, tmp_path / "sweep", resume=True, progress=False, log=lambda m: None)
    assert o.skipped == [run.name] and o.ran == []


@pytest.mark.parametrize("case", sorted(TORN))
def test_a_torn_finished_run_is_named_never_skipped_nor_overwritten(tmp_path, case):
    tear, why = TORN[case]
    sweep, run = _finished_run(tmp_path)
    tear(run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert run_state(run, resolve_config(sweep.cells()[0].overrides).to_dict()) == "torn"
    with pytest.raises(ValueError, match=why) as e:
        run_sweep(sweep, tmp_path / "sweep", resume=True, progress=False, log=lambda m: None)
    msg = str(e.value)
    assert f"1 finished run(s) of {tmp_path / 'sweep'} are torn" in msg and f"{run.name}: " in msg
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.name != ".lock"} == before  # nothing changed
    assert not (tmp_path / "sweep" / "sweep.json").exists()  # nothing started
    if (run / "metrics.csv").is_file():
        with pytest.raises(ValueError, match="finished but not whole, not packed"):
            pack_metrics(run)
    # the commands the refusal gives move it aside; the same sweep then sees a new run there
    move = msg.split("move them aside (", 1)[1].split(") and run", 1)[0]
    assert move.startswith("mkdir -p ") and " && mv " in move
    subprocess.run(move, shell=True, check=True)
    assert sorted(p.name for p in (tmp_path / "sweep.torn" / run.name).iterdir() if p.name != ".lock") \
        == sorted(before)
    assert run_state(run, {}) == "new"
    assert shlex.quote(str(run)) in move
