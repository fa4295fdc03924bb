"""Grids paired with the staleness study (the 2025-2026 corrections' grid): refused on a machine whose warm start
differs from the study's, exploratory rows beside the study that never enter its hypotheses, and a paired run
from another warm start refused by the analysis."""
from __future__ import annotations

import numpy as np
import pytest
from _study_runs import REPO, _copy_committed, _fake_run, _fake_study, _set_warm_start


def test_a_grid_paired_with_another_refuses_a_machine_whose_warm_start_differs_from_that_one(tmp_path, monkeypatch,
                                                                                               capsys):
    """peers_2025 (and the mechanism grid) pair their runs with the committed study's: the check covers
    the study's folder too, even when the grid's own folder is still empty."""
    import grids.runner as study_cli
    from schema.packing import unpack_run
    from schema.results import read_run_doc
    from studies.grids import GRIDS

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    src = REPO / "results" / "llm" / "study" / "long-gmc-d64-s0"
    (tmp_path / "llm" / "study").mkdir(parents=True)
    unpack_run(src, tmp_path / "llm" / "study" / src.name)
    theirs = read_run_doc(src)["warm_start"]
    other = {**theirs, "heldout_pc": 0.010061427227023785}
    monkeypatch.setattr(study_cli, "_warm_starts", lambda study: {"long": other, "short": {"key": "elsewhere"}})
    out = tmp_path / "llm" / "study_2025"
    assert study_cli.main(["--grid", "peers_2025", "--out", str(out)], GRIDS) == 2
    err = capsys.readouterr().err
    assert f"the runs in {tmp_path / 'llm' / 'study'} started from" in err and "nothing was run" in err
    assert not out.exists()
    monkeypatch.setattr(study_cli, "_warm_starts", lambda study: {"long": theirs, "short": {"key": "elsewhere"}})
    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached

    monkeypatch.setattr(study_cli, "run_sweep", reached)
    with pytest.raises(Reached):  # the same warm start: the check lets the grid run
        study_cli.main(["--grid", "peers_2025", "--out", str(out)], GRIDS)


def _fake_newcomers(root, effect, seeds):
    """Runs of a grid paired with the fake study: icepop and sapo at d = 64, both horizons; icepop
    ends ``effect`` below the seed's GMC (the same seed level as :func:`_fake_study`'s), sapo collapses."""
    rng = np.random.default_rng(5)
    levels = []
    for s in range(10):
        levels.append(rng.normal(0, 0.05))
        for _ in range(2):  # _fake_study's two horizons each draw one more normal (its is)
            rng.normal(0, 0.005)
    for s in seeds:
        for h, task in (("long", "scratchpad"), ("short", "arithmetic")):
            base = {"task": task, "steps": 40, "eps": 0.2, "heldout_size": 200, "seed": s, "mode": "controlled",
                    "delay": 64}
            _fake_run(root, f"{h}-icepop-d64-s{s}", {**base, "estimator": "icepop"},
                      [0.2, 0.35, 0.5 + levels[s] - effect])
            _fake_run(root, f"{h}-sapo-d64-s{s}", {**base, "estimator": "sapo"}, [0.2, 0.5, 0.01],
                      # every 4th update fully masked; every 5th without a reward spread (not counted)
                      grad=[None if t % 5 == 0 else 0.0 if t % 4 == 0 else 2.0 for t in range(40)])


def test_a_paired_grid_adds_exploratory_rows_and_never_enters_the_hypotheses(tmp_path, monkeypatch):
    """The 2025-2026 corrections' grid beside the study: its rows in the difference table (marked
    exploratory, paired with the study's GMC over the seeds whole in both), in F10, F11 and the
    plain answer; the verdicts are those of the study alone; a seed not whole there is left out."""
    import studies.staleness.figures.f10_study_differences as f10
    import studies.staleness.figures.f11_study_pc_vs_delay as f11
    from studies.report.build import differences_markdown, plain_answer
    from studies.staleness.analysis import analyse, differences, plain_answer_facts, read_runs

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    _fake_study(tmp_path / "llm" / "study", effect_long=0.1)
    _fake_newcomers(tmp_path / "llm" / "study_2025", effect=0.08, seeds=range(7))
    (tmp_path / "llm" / "study_2025" / "short-sapo-d64-s6" / "metrics.csv").unlink()  # seed 6 is not whole there

    runs = f10.load_runs()
    extra = runs.attrs["exploratory"]
    assert extra.attrs["seeds"] == list(range(6)) and set(extra["estimator"]) == {"icepop", "sapo"}
    assert set(runs["estimator"]) == {"gmc", "is", "tic_mask"}  # the study's own frame is untouched
    assert analyse(runs) == analyse(read_runs(tmp_path / "llm" / "study"))

    tab = differences(runs)
    ice = tab[(tab["baseline"] == "icepop") & (tab["metric"] == "pc_final")]
    assert len(ice) == 2 and ice["exploratory"].all() and (ice["n"] == 6).all()
    assert ice["mean"].to_numpy() == pytest.approx([0.08, 0.08], abs=1e-9)
    assert not tab.loc[tab["baseline"].isin(["is", "tic_mask"]), "exploratory"].any()
    assert not tab.loc[tab["baseline"] == "sapo", "baseline_stable"].any()
    md = "\n".join(differences_markdown(runs))
    assert "| long | 64 | IcePop (exploratory) | 6 | +0.080" in md

    text = plain_answer(runs)
    assert "Exploratory, not pre-registered" in text and "over their 6 whole seeds" in text
    assert "Unstable there: SAPO." in text
    facts = plain_answer_facts(runs)["exploratory"]
    order = [e for e, _, _ in facts["ranked"]]
    assert facts["seeds"] == list(range(6)) and [new for _, _, new in facts["ranked"]].count(True) == 1
    assert order.index("gmc") < order.index("icepop") < order.index("tic_mask") and facts["unstable"] == ["sapo"]
    assert facts["masked_updates"] == {"icepop": 0.0, "sapo": pytest.approx(8 / 32)}  # 8 of the 32 with a signal
    assert "exactly zero" in text and "SAPO 0.25." in text and "IcePop 0.00" not in text

    assert "(expl.)" in f10.caption(f10.summary(runs)) and "(expl.)" in f11.caption(f11.summary(runs))
    t11 = f11.table(runs)
    ice11 = t11[t11["estimator"] == "icepop"]
    assert ice11["exploratory"].all() and list(ice11["delay"]) == [0, 64, 0, 64]
    assert list(ice11["n"]) == [10, 6, 10, 6]  # delay 0: the study's delay-0 runs, the common start of every line
    import matplotlib.pyplot as plt

    for m in (f10, f11):
        plt.close(m.plot(m.summary(runs)))


def test_a_paired_grid_run_from_another_warm_start_is_refused(tmp_path):
    """A run of a grid that pairs with the study, made from another warm start than the study's runs
    with its key (another machine), is refused by the analysis that would pair it."""
    import json
    import shutil

    from grids.check import check_pairing
    from studies.staleness.analysis import read_paired, read_runs, whole_seeds

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    other = tmp_path / "study_2025"
    other.mkdir()
    shutil.copytree(root / "long-gmc-d64-s0", other / "long-icepop-d64-s0")
    cfg = json.loads((other / "long-icepop-d64-s0" / "config.json").read_text())
    cfg["config"]["estimator"] = "icepop"
    (other / "long-icepop-d64-s0" / "config.json").write_text(json.dumps(cfg))
    check_pairing(other, root)
    primary = read_runs(root)
    primary.attrs.update(source=str(root), seeds=whole_seeds(primary))
    from grids.spec import pairing_with
    from studies.grids import GRIDS
    from studies.staleness.analysis import PRIMARY

    assert list(read_paired(other, primary, pairing_with(GRIDS.values(), PRIMARY))["estimator"]) == ["icepop"]
    _set_warm_start(other / "long-icepop-d64-s0", heldout_pc=0.010061427227023785)
    with pytest.raises(ValueError, match=r"1 run\(s\) under .*study_2025 started from another warm start .*"
                                         r"long-icepop-d64-s0: held-out pc 0\.010061427227023785 vs "
                                         r"0\.514326903992187"):
        read_paired(other, primary, pairing_with(GRIDS.values(), PRIMARY))
