"""What the staleness study's test modules share (tests/test_study_grid.py, test_study_grid_folders.py,
test_study_analysis.py, test_study_paired.py): the checkout's root, run folders as the trainer writes them
(:func:`_fake_run`), a planted paired study (:func:`_fake_study`), copies of committed study runs
(:func:`_copy_committed`) and a run's warm start edited (:func:`_set_warm_start`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _fake_run(root, name, cfg, pcs, chi2=None, acc=None, grad=None):
    """A run folder as the trainer writes it: config.json + metrics.csv (evaluation every 20 updates);
    ``grad`` the gradient norm of each update (1.0 by default), None for an update whose groups
    have no reward spread (every advantage 0, so a gradient of 0)."""
    import json

    import pandas as pd

    from llm_runs.metrics import COLUMNS

    run = root / name
    run.mkdir(parents=True)
    steps = cfg["steps"]
    (run / "config.json").write_text(json.dumps({"config": cfg}))
    rows = []
    eval_steps = np.linspace(0, steps, len(pcs)).astype(int)
    for t in range(steps + 1):
        row = {c: np.nan for c in COLUMNS}
        row["step"] = t
        if t < steps:
            g = grad[t] if grad is not None else 1.0
            row.update({"train/loss": 0.1, "train/grad_norm": 0.0 if g is None else g, "train/update_skipped": 0,
                        "train/adv_zero_frac": 1.0 if g is None else 0.5,
                        "stale/chi2": chi2[t] if chi2 is not None else 0.1})
        if t in eval_steps:
            i = int(np.nonzero(eval_steps == t)[0][0])
            row.update({"eval/heldout_pc": pcs[i], "eval/heldout_acc": (acc or pcs)[i]})
        rows.append(row)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(run / "metrics.csv", index=False)


def _fake_study(root, effect_long, effect_short=0.0, n_seeds=10):
    rng = np.random.default_rng(5)
    for s in range(n_seeds):
        seed_level = rng.normal(0, 0.05)  # shared by every estimator of the seed (paired)
        for h, task, effect in (("long", "scratchpad", effect_long), ("short", "arithmetic", effect_short)):
            base = {"task": task, "steps": 40, "eps": 0.2, "heldout_size": 200, "seed": s, "mode": "controlled"}
            final = {"gmc": 0.5 + seed_level, "is": 0.5 + seed_level + rng.normal(0, 0.005),
                     "tic_mask": 0.5 + seed_level - effect}
            _fake_run(root, f"{h}-gmc-d0-s{s}", {**base, "estimator": "gmc", "delay": 0}, [0.2, 0.4, 0.6 + seed_level])
            for e, v in final.items():
                _fake_run(root, f"{h}-{e}-d64-s{s}", {**base, "estimator": e, "delay": 64}, [0.2, 0.35, v])


def _copy_committed(tmp_path, names):
    import shutil

    from schema.packing import unpack_run

    src = REPO / "results" / "llm" / "study"
    root = tmp_path / "study"
    root.mkdir()
    shutil.copy(src / "sweep.json", root / "sweep.json")
    for n in names:  # a run folder, whether the grid is packed or not
        unpack_run(src / n, root / n)
    return root


def _set_warm_start(run, **fields):
    import json

    cfg_file = run / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["warm_start"].update(fields)
    cfg_file.write_text(json.dumps(cfg))
    return cfg["warm_start"]
