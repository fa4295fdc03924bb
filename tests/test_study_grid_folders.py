"""Each analysis reads its own grid: a folder of another grid, a missing, empty or non-folder root, a truncated or
foreign sweep.json is one line naming it, by the analyses and by the grid runner alike."""
from __future__ import annotations

import pytest
from _study_runs import _copy_committed

# --------------------------------------------------------------------------- each analysis reads its own grid


def _grid_folder(tmp_path, grid, name):
    """A copy of two committed study runs under a ``sweep.json`` naming ``grid``."""
    import json

    (tmp_path / name).mkdir()
    root = _copy_committed(tmp_path / name, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    doc = json.loads((root / "sweep.json").read_text())
    doc["settings"]["name"] = grid
    (root / "sweep.json").write_text(json.dumps(doc))
    return root


def _one_line_error(capsys, rc, *needles):
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1, err
    for n in needles:
        assert n in line[0], err
    return line[0]


def test_the_analyses_refuse_a_folder_of_another_grid(tmp_path, capsys):
    """``studies.mechanism --study`` given the 2025-2026 grid flipped M4 and M5, and ``--root`` given the
    study printed verdicts: every analysis checks each folder it is given by its ``sweep.json``."""
    import studies.mechanism.analysis as mech
    from studies.staleness import analysis as study
    from studies.staleness.analysis import read_runs

    peers = _grid_folder(tmp_path, "peers_2025", "a")
    primary = _grid_folder(tmp_path, "primary", "b")
    with pytest.raises(ValueError, match=r"holds grid peers_2025 \(its sweep\.json\), not primary"):
        read_runs(peers, grid="primary")
    _one_line_error(capsys, mech.main(["--study", str(peers), "--root", str(primary)]), str(peers), "peers_2025",
                    "primary")
    _one_line_error(capsys, mech.main(["--study", str(primary), "--root", str(primary)]), "not mechanism")
    _one_line_error(capsys, study.main(["--root", str(peers)]), "peers_2025", "not primary")
    _one_line_error(capsys, mech.main(["--select-warning", "--study", str(peers), "--root", str(tmp_path / "m")]),
                    "peers_2025")


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_a_missing_empty_or_non_folder_root_is_one_line(tmp_path, capsys, kind):
    import studies.mechanism.analysis as mech
    from studies.staleness import analysis as study

    root = tmp_path / "root"
    if kind == "empty":
        root.mkdir()
    elif kind == "file":
        root.write_text("x")
    primary = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    _one_line_error(capsys, study.main(["--root", str(root)]), str(root))
    _one_line_error(capsys, mech.main(["--study", str(root), "--root", str(primary)]), str(root))
    _one_line_error(capsys, mech.main(["--study", str(primary), "--root", str(root)]), str(root))


@pytest.mark.parametrize("text", ['{"settings": {"na', "[]", "{}"])
def test_a_truncated_or_foreign_sweep_json_is_named_by_path(tmp_path, capsys, text):
    from studies.staleness import analysis as study

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    (root / "sweep.json").write_text(text)
    _one_line_error(capsys, study.main(["--root", str(root)]), str(root / "sweep.json"))


@pytest.mark.parametrize("text", ['{"settings": {"na', "[]"])
def test_the_grid_runner_names_a_truncated_or_foreign_sweep_json(tmp_path, text):
    import re

    from grids.sweep import run_sweep
    from studies.grids import GRIDS

    (tmp_path / "sweep.json").write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "sweep.json"))):
        run_sweep(GRIDS["pilot"], tmp_path, resume=True, progress=False, log=lambda m: None)
