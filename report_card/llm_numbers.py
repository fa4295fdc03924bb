"""The LLM part's numbers for one cell (:class:`report_card.llm_cells.LLMCell`): a correction's stable seeds and mean
final held-out pc, the drift of its runs and their place on the drift study's map, and its paired difference from
a reference (:func:`report_card.llm.part` reads them for every cell)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .llm_cells import LLMCell


def cell_stats(runs: pd.DataFrame, c: LLMCell, estimator: str) -> dict:
    """Stable seeds, mean final pc (and the seeds) of ``estimator`` in cell ``c``; the delay-0 run of
    a seed stands for every estimator."""
    sel = runs[(runs["arm"] == c.arm) & (runs["horizon"] == c.horizon) & runs["complete"]]
    sel = sel[sel["delay"] == 0] if c.delay == 0 else sel[(sel["delay"] == c.delay) & (sel["estimator"] == estimator)]
    sel = sel.drop_duplicates("seed")
    return {"n": len(sel), "stable": int(sel["stable"].sum()), "pc_final": float(sel["pc_final"].mean())
            if len(sel) else math.nan, "seeds": sorted(int(s) for s in sel["seed"]),
            "source": ", ".join(sorted(set(sel["source"]))) if len(sel) else "",
            "runs": [[str(r.source), str(r.run)] for r in sel.itertuples()]}


def drift(runs: list) -> dict:
    """The drift of a cell's runs (:func:`llm_runs.drift.summary`: the early window's median KL per token
    and trajectory chi^2, each run's, then their median over runs) and, where the drift study's map exists
    (:func:`grids.drift_place.map_path`), the place of that KL on it (:func:`llm_runs.drift.place`)."""
    from grids.drift_place import map_path
    from llm_runs.drift import place, read_export, summary
    from schema.results import results_root

    vals = {"kl": [], "chi2": []}
    for source, run in runs:
        folder = Path(source) if Path(source).is_absolute() else results_root() / Path(source).relative_to("results")
        m, d = read_export(folder / run)
        s = summary(m, d)
        for k, v in vals.items():
            v.append(s[f"{k}_early"])
    out = {}
    for k, v in vals.items():
        out[f"{k}_overflowed"] = sum(x == math.inf for x in v)  # counted, never a number of the median
        v = [x for x in v if math.isfinite(x)]
        out[f"{k}_early"] = float(np.median(v)) if v else math.nan
        out[f"{k}_runs"] = len(v)
    kl = out["kl_early"]
    if not map_path().is_file():
        out["map"] = (f"pending: no drift map at {map_path().relative_to(results_root().parent)} "
                      "yet (python -m studies.drift)")
    elif not math.isfinite(kl):
        out["map"] = ("not placed: " + (f"the early KL of each of its {out['kl_overflowed']} run(s) logging one "
                                        "overflowed (inf), no measured drift" if out["kl_overflowed"] else
                                        "these runs log no KL per token (the map's axis)"))
    elif (table := json.loads(map_path().read_text())).get("provisional"):
        seeds = table.get("seeds")
        out["map"] = (f"pending: the drift study's map is provisional "
                      f"({len(seeds) if isinstance(seeds, list) else seeds} whole seeds); "
                      "the card places a run on it once it is not")
    else:
        try:
            rows = [r for r in place(kl, "kl", table) if r.get("outside") is None]  # measured there only
        except ValueError as exc:  # outside every measured range
            out["map"] = f"not placed: {exc}"
            return out
        out["map"] = "placed"
        out["held_at_nearest_level"] = sorted({f"{r['estimator']} ({r['optimizer']})" for r in rows
                                               if r["stable_share"] >= 0.8})
        out["below_boundary"] = sorted({f"{r['estimator']} ({r['optimizer']})" for r in rows if r["below_boundary"]})
    return out


def paired_difference(runs: pd.DataFrame, c: LLMCell, a: str, b: str) -> dict:
    """``a - b`` in final pc, paired by seed, with the study's bootstrap interval."""
    from grids.run_table import bootstrap, paired

    arm = runs[runs["arm"] == c.arm]
    boot = bootstrap(paired(arm, c.horizon, c.delay, a, b))
    return {k: boot[k] for k in ("n", "mean", "low", "high")}
