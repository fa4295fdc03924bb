"""The frozen pairs that the group-size, budget and early-warning studies measure on, and what they share of them.

A pair (pi_b, pi) = (theta_{t-64}, theta_t) at update t = :data:`T_PAIR` of a committed d = 64 run
(docs/PREREGISTRATION-GROUP-SIZE.md): its definition (:data:`PAIRS`), the committed run it retrains
(:func:`committed_run`), the retrained weights (:func:`retrain`, cached), its behaviour and on-policy pools
(:func:`load_pools`, cached) and the early-warning batches drawn from a pool (:func:`warning_batches`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from studies.common.pool import PROMPTS, drift_stats, merge, pool_prompts, sample_pool, token_logp

T_PAIR = 70
DELAY = 64
M_BASE = 1024
M_LOW_ESS = 4096
LOW_ESS = 0.02
REPLICATES = 8
PAIR_G = (2, 4, 8, 16, 32, 64, 128)
PAST_G = 512
ESTIMATORS = ("gmc", "tic_trunc", "tic_mask", "topr", "is", "snis", "vespo", "gspo")
PER_SAMPLE = ("is", "tic_trunc", "tic_mask")
"""Corrections whose coefficient depends on a completion's own ratio and reward only: their expected
coefficient over groups is exact (the leave-one-out baseline over the rest of the replicate), and the
sampled-group average is checked against it (gate b)."""


@dataclass(frozen=True)
class Pair:
    name: str
    grid: str
    run_prefix: str  # the committed runs' name before "-s<seed>"
    overrides: dict
    rank: int  # which qualifying seed (0: the lowest)
    past_boundary: bool
    seeds: tuple[int, ...]  # the seeds its grid plans for run_prefix (each a committed run it chooses among)


DRIFT_SEEDS = tuple(range(5))  # the drift map's seeds 0-4
TEN_SEEDS = tuple(range(10))  # the staleness and mechanism grids' seeds 0-9
PAIRS = (
    Pair("p1", "drift", "long-adamclip1e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-5}, 0, False, DRIFT_SEEDS),
    Pair("p2", "drift", "long-adamclip3e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 3e-5}, 0, False, DRIFT_SEEDS),
    Pair("p3", "drift", "long-adamclip3e-05-gmc-d64", {"max_grad_norm": 1.0, "lr": 3e-5}, 1, False, DRIFT_SEEDS),
    Pair("p4", "mechanism", "long-adamclip-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-4}, 0, True, TEN_SEEDS),
    Pair("p5", "mechanism", "long-adamclip-gmc-d64", {"max_grad_norm": 1.0, "lr": 1e-4}, 1, True, TEN_SEEDS),
    Pair("p6", "primary", "long-gmc-d64", {"lr": 1e-4}, 0, True, TEN_SEEDS),
    Pair("p7", "drift", "long-sgd0.0003-gmc-d64", {"optimizer": "sgd", "lr": 3e-4}, 0, True, DRIFT_SEEDS),
    Pair("p8", "drift", "long-sgd0.0006-gmc-d64", {"optimizer": "sgd", "lr": 6e-4}, 0, True, DRIFT_SEEDS),
)
"""The pre-registered pairs (docs/PREREGISTRATION-GROUP-SIZE.md)."""


def pair_Gs(pair: Pair) -> tuple[int, ...]:
    return PAIR_G + ((PAST_G,) if pair.past_boundary else ())


# --------------------------------------------------------------------------- choosing and retraining


def committed_run(pair: Pair) -> tuple[Path, int, list[dict]]:
    """The committed run the pair retrains: the ``rank``-th lowest seed whose run had not collapsed by
    update :data:`T_PAIR` (seed 0 if none qualifies), with every candidate's collapse update."""
    from studies.common.d5 import d5_run

    runs = pair_runs(pair)
    seeds = sorted(int(n.rsplit("-s", 1)[1]) for n in runs)
    cand, ok = [], []
    for s in seeds:
        rec = d5_run(runs[f"{pair.run_prefix}-s{s}"])
        tc = None if rec is None else rec["t_collapse"]
        cand.append({"seed": s, "t_collapse": tc})
        if tc is None or tc > T_PAIR:
            ok.append(s)
    seed = ok[pair.rank] if len(ok) > pair.rank else seeds[0]
    return runs[f"{pair.run_prefix}-s{seed}"], seed, cand


def pair_runs(pair: Pair) -> dict[str, Path]:
    """Every committed run the pair chooses among (name -> run): each seed its grid plans for
    ``run_prefix`` (:attr:`Pair.seeds`, which ``tests/test_group_size_pairs.py`` holds equal to the grid's plan),
    since which seed is the ``rank``-th qualifying one depends on them all. A planned run that is missing or holds
    no metrics is :class:`schema.results.MissingResults` naming its folder and the command that makes it."""
    from grids import grid_folder
    from schema.results import MissingResults, run_folders

    folder = grid_folder(pair.grid)
    planned = [f"{pair.run_prefix}-s{s}" for s in pair.seeds]
    found = {r.name: r for r in run_folders(folder)}
    missing = [folder / n for n in planned if n not in found]
    if missing or not planned:
        arg = "" if pair.grid == "primary" else f" --grid {pair.grid}"
        what = (f"{len(missing)} of its {len(planned)} committed runs are missing: "
                + ", ".join(str(m) for m in missing[:3]) + (", ..." if len(missing) > 3 else "")
                if planned else f"it names no seed of {pair.run_prefix}-s<seed>")
        raise MissingResults(f"pair {pair.name}: {what} (a run folder with config.json and its metrics, or the "
                             f"grid's packed tables); make them with `python -m studies.run{arg}`")
    return {n: found[n] for n in planned}


def retrain(pair: Pair, run: Path, cache: Path, log=print) -> dict:
    """theta_{t-64} and theta_t of the committed run's settings retrained to update t = :data:`T_PAIR`
    (cached in ``cache/<pair>``), and the retrained rows against the committed ones."""
    from llm_runs.config import resolve_config
    from llm_runs.trainer import Trainer
    from schema.results import read_run, read_run_config

    folder = cache / pair.name
    saved = folder / "pair.pt"
    if saved.is_file():
        return torch.load(saved, weights_only=False)
    cfg = dict(read_run_config(run))
    for k, v in pair.overrides.items():
        if cfg.get(k, v) != v:
            raise ValueError(f"{run}: the committed run has {k} = {cfg.get(k)!r}, the pair {pair.name} {v!r}")
    cfg.update({"steps": T_PAIR, "checkpoint_every": 0, "keep_checkpoints": 1})
    config = resolve_config(cfg)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)  # an unfinished retrain of this pair's own cache (never a result)
    trainer = Trainer(config, folder / "run", progress=False, log=log)
    t0 = time.perf_counter()
    trainer.run()
    behaviour = trainer.source.ring.get(T_PAIR - DELAY)
    current = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    _, mine = read_run(folder / "run")
    _, theirs = read_run(run)
    cmp = {}
    for col in ("train/reward_mean", "train/grad_norm"):
        a = mine.set_index("step")[col].dropna()
        b = theirs.set_index("step")[col].dropna().reindex(a.index)
        cmp[col] = {"max_abs_diff": float((a - b).abs().max()), "identical": bool((a.to_numpy() == b.to_numpy()).all())}
    out = {"behaviour": behaviour, "current": current, "config": config.to_dict(),
           "retrain_s": time.perf_counter() - t0,
           "committed_rows": cmp}
    torch.save(out, saved)
    return out


# --------------------------------------------------------------------------- pools and batches


def load_pools(pair: Pair, cache: Path, quick: bool, log=print) -> dict:
    """The pair's models (retrained or cached), its behaviour pool, on-policy pool and log-probabilities, drawn
    as :func:`studies.group_size.pairs.measure` draws them (cached in ``cache/budget_pairs/<pair>``)."""
    from llm_runs.config import resolve_config
    from llm_runs.presets import load_pretrained
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import default_max_new_tokens, get_warm_start

    t0, c0 = time.perf_counter(), time.process_time()
    run, seed, _ = committed_run(pair)
    cached = (cache / "group_size_pairs" / pair.name / "pair.pt").is_file()
    log(f"{pair.name}: {'cached' if cached else 'retraining'} {run.name} to update {T_PAIR}")
    trained = retrain(pair, run, cache / "group_size_pairs", log)
    config = resolve_config(trained["config"])
    task = build_task(config)
    ws = get_warm_start(config, task, log)
    models = []
    for key in ("current", "behaviour"):
        m, tok = load_pretrained(ws.path, config.dtype, config.device)
        m.load_state_dict(trained[key])
        m.eval()
        models.append(m)
    for p in models[1].parameters():
        p.requires_grad_(False)
    cost = {"retrain": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "cached": cached}}
    max_new = default_max_new_tokens(config, task)
    idx = pool_prompts(task)[: (4 if quick else PROMPTS)]
    m_base, m_low = (64, 128) if quick else (M_BASE, M_LOW_ESS)
    path = cache / "budget_pairs" / pair.name / ("pools-quick.pt" if quick else "pools.pt")
    t1, c1 = time.perf_counter(), time.process_time()
    pools_cached = path.is_file()
    pools = torch.load(path, weights_only=False) if pools_cached else None
    if pools is None:
        pi, pib = models
        with torch.no_grad():
            b = sample_pool(pib, tok, task, idx, m_base, 0, max_new, chunk=min(128, m_base))
            lp_b = token_logp(pi, b)
            first = drift_stats(((lp_b - b["blogp"]) * b["mask"]).sum(-1), (lp_b - b["blogp"]), b["mask"])
            if first["ess"] < LOW_ESS:
                more = sample_pool(pib, tok, task, idx, m_low - m_base, 0, max_new, chunk=min(128, m_base),
                                   start=m_base)
                b = merge(b, more)
                lp_b = torch.cat([lp_b, token_logp(pi, more)], 1)
            on = sample_pool(pi, tok, task, idx, b["ids"].shape[1], 1, max_new, chunk=min(128, m_base))
        pools = {"b": b, "on": on, "lp_b": lp_b, "first": first}
        path.parent.mkdir(parents=True, exist_ok=True)
        from schema.io import atomic

        atomic(path, lambda tmp: torch.save(pools, tmp))
    cost["pools"] = {"wall": time.perf_counter() - t1, "cpu": time.process_time() - c1, "cached": pools_cached}
    return {"pair": pair, "run": run.name, "seed": seed, "config": config, "models": models, "tokenizer": tok,
            "task": task, "idx": idx, "max_new": max_new, "committed_rows": trained["committed_rows"], "cost": cost,
            **pools}


SIM_SEED = 20261208
"""The budget study's simulation seed (its batches of the pools; the early-warning batches are seeded
``[SIM_SEED, pair index]``)."""
WARN_G = (4, 8, 16, 32, 64, 128)
WARN_N = (128, 512)
WARN_BATCHES = 2000
WARN_PERMS = 16


def warning_batches(P: int, M: int, seed, Gs=WARN_G, Ns=WARN_N, nb: int = WARN_BATCHES):
    """Yield ``(N, G, B, p, members)`` per cell of :func:`warning_stats`: the prompts ``p (nb, B)`` and pool indices
    ``members (nb, B, G)`` of its ``nb`` batches, drawn from one generator seeded ``seed`` in this order."""
    rng = np.random.default_rng(seed)
    perms = np.stack([np.stack([rng.permutation(M) for _ in range(P)]) for _ in range(WARN_PERMS)])  # (W, P, M)
    for N in Ns:
        for G in Gs:
            B = N // G
            if B < 1 or G > M or B * G != N:
                continue
            p = rng.integers(0, P, (nb, B))
            w = rng.integers(0, WARN_PERMS, (nb, B))
            j = rng.integers(0, M // G, (nb, B))
            yield N, G, B, p, perms[w[..., None], p[..., None], j[..., None] * G + np.arange(G)]
