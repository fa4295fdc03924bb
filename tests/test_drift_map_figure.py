"""The drift map's figure draws what the map file holds: one series per (optimiser, correction, fate)
of the runs, one boundary mark per finite boundary, and nothing it does not hold."""
from __future__ import annotations

from figures import style
from studies.drift.figures import f24_drift_map as f24


def _map():
    pts = [{"run": f"r{i}", "estimator": e, "optimizer": o, "seed": i, "drift": d, "chi2": 10 * d,
            "stable": s, "pc_final": 0.6 if s else 0.0}
           for i, (e, o, d, s) in enumerate([("gmc", "sgd", 0.01, True), ("gmc", "sgd", 0.05, False),
                                             ("topr", "sgd", 0.05, True), ("gmc", "adamclip", 0.07, False)])]
    b = [{"estimator": "gmc", "optimizer": "sgd", "boundary": 0.02, "censored": None, "low": 0.015, "high": 0.03},
         {"estimator": "topr", "optimizer": "sgd", "boundary": 0.05, "censored": "right", "low": None, "high": None},
         {"estimator": "gmc", "optimizer": "adamclip", "boundary": None, "censored": None, "low": None, "high": None}]
    chi2 = [dict(x, boundary=10 * x["boundary"]) if x["boundary"] else x for x in b]
    exact = [{"estimator": "gmc", "optimizer": "adam", "boundary": 0.5, "censored": None, "low": None, "high": None}]
    return {"points": pts, "boundaries": b, "boundaries_chi2": chi2, "exact_model": {"boundaries": exact},
            "seeds": [0], "provisional": True, "share": 0.8}


def test_every_run_and_finite_boundary_is_drawn():
    fig = f24.plot(_map())
    gids = [ln.get_gid() for ln in style.series_lines(fig)]
    runs = [g for g in gids if g.startswith("series:run:")]
    assert sorted(runs) == sorted(["series:run:sgd:gmc:stable", "series:run:sgd:gmc:collapsed",
                                   "series:run:sgd:topr:stable", "series:run:adamclip:gmc:collapsed"])
    assert sorted(g for g in gids if g.startswith("series:boundary:")) == [
        "series:boundary:sgd:gmc", "series:boundary:sgd:topr"]  # adamclip gmc has no boundary: not drawn
    assert sorted(g for g in gids if g.startswith("series:chi2-boundary:")) == [
        "series:chi2-boundary:LLM:sgd:gmc", "series:chi2-boundary:LLM:sgd:topr",
        "series:chi2-boundary:exact model:adam:gmc"]
    style.plt.close(fig)


def test_a_map_without_points_draws_no_run():
    m = _map()
    m["points"] = []
    fig = f24.plot(m)
    assert not [ln for ln in style.series_lines(fig) if ln.get_gid().startswith("series:run:")]
    style.plt.close(fig)


def test_the_2026_corrections_runs_are_drawn_on_the_same_axis_with_their_own_tag():
    m = _map()
    m["points_2026"] = [{"run": "n0", "estimator": "ctpo", "optimizer": "adamclip", "seed": 0, "drift": 0.1,
                         "stable": False, "pc_final": 0.0},
                        {"run": "n1", "estimator": "minpro", "optimizer": "sgd", "seed": 0, "drift": 0.02,
                         "stable": True, "pc_final": 0.7}]
    fig = f24.plot(m)
    lines = {ln.get_gid(): ln for ln in style.series_lines(fig)}
    assert {g for g in lines if g.startswith("series:run-2026:")} == {"series:run-2026:adamclip:ctpo:collapsed",
                                                                     "series:run-2026:sgd:minpro:stable"}
    assert list(lines["series:run-2026:sgd:minpro:stable"].get_xdata()) == [0.02]
    style.plt.close(fig)
