"""Where the results live, how to read them, and which command makes each of them.

The results root is ``results/`` of the repository, or the folder in the environment
variable ``GMC_RESULTS`` (tests use a temporary one); every producer writes and every reader
reads under it. A missing result raises :class:`MissingResults` naming the command that
makes it (the Makefile runs producers before ``make figures``).

Sources:

* ``Sim(NAME)``: ``results/sim/NAME/results.parquet`` (full sweep) or, if that is absent,
  ``results/sim/NAME-quick/results.parquet``; made by ``python -m simulators.sweep NAME``.
* ``TUNED``: ``results/sim/tuned_delay/results.parquet``; made by ``python -m simulators.tuned_sweep``.
* ``LLM``: run folders ``results/llm/sweep/<run>/`` (full) or ``results/llm/sweep_quick/<run>/``,
  each with ``config.json`` and ``metrics.csv``; made by ``python -m llm_runs.sweep``.
* ``STUDY``: the staleness study's run folders ``results/llm/study/<run>/``; made by
  ``python -m llm_runs.study``. ``STUDY_HORIZON``: its horizon grid ``results/llm/horizon/<run>/``;
  made by ``python -m llm_runs.study --grid horizon``. ``GPU_STUDY``: the Qwen3-0.6B study's run folders
  ``results/llm/gpu_study/<run>/``; made by ``python -m llm_runs.gpu_study`` on one GPU. ``VERDICTS``: the pre-registered
  analysis' verdicts ``results/llm/study/verdicts.json``; made by ``python -m claims.study --json``.
* ``VERIFY``: ``results/verify/claims.json``; made by ``python -m claims`` (``make verify-bounds``).
* ``ABSTRACT``: ``results/verify/abstract.json``; made by ``python -m claims.abstract``.

A run folder is read by :func:`read_run` only: its ``config.json`` and ``metrics.csv`` are
parsed strictly (a bad line or a truncated file is an error naming the file and line) and
its steps must be 0..T once each (a run with a duplicated or missing step is refused).
A finished run's table may be stored packed as ``metrics.csv.gz``, the same bytes
gzip-compressed (:func:`pack_metrics`); :func:`metrics_path` finds either.
A configuration field the run predates reads as the value the run actually used
(:data:`LEGACY_FIELDS`), never as today's default.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def results_root() -> Path:
    """``GMC_RESULTS`` when set and not empty, else ``results/`` of the repository."""
    return Path(os.environ.get("GMC_RESULTS") or ROOT / "results")


class MissingResults(FileNotFoundError):
    """A figure's results are not there; the message names them and the command that makes them."""


@dataclass(frozen=True)
class Source:
    name: str
    candidates: tuple[str, ...]  # paths relative to the results root, preferred first
    command: str  # the quick command that makes the last candidate

    def find(self) -> Path | None:
        for rel in self.candidates:
            p = results_root() / rel
            if p.exists():
                return p
        return None

    def require(self) -> Path:
        p = self.find()
        if p is None:
            raise MissingResults(
                f"missing results {self.name}: none of "
                + ", ".join(str(results_root() / c) for c in self.candidates)
                + f" exists; make them with `{self.command}`")
        return p

    def is_quick(self) -> bool:
        p = self.find()
        return p is not None and "quick" in str(p.relative_to(results_root()))


def Sim(name: str) -> Source:
    return Source(f"sim/{name}", (f"sim/{name}/results.parquet", f"sim/{name}-quick/results.parquet"),
                  f"python -m simulators.sweep {name}")


TUNED = Source("sim/tuned_delay", ("sim/tuned_delay/results.parquet",), "python -m simulators.tuned_sweep")
VERIFY = Source("verify/claims.json", ("verify/claims.json",), "python -m claims")
ABSTRACT = Source("verify/abstract.json", ("verify/abstract.json",), "python -m claims.abstract")


class _LLMSource(Source):
    """The LLM sweep: a folder of run folders; the full sweep counts only once it holds a finished run."""

    def find(self) -> Path | None:
        for rel in self.candidates:
            p = results_root() / rel
            if any(r["complete"] for r in _run_index(p)):
                return p
        for rel in self.candidates:  # no finished run anywhere: take any run folder
            p = results_root() / rel
            if _run_index(p):
                return p
        return None


LLM = _LLMSource("llm sweep", ("llm/sweep", "llm/sweep_quick"), "python -m llm_runs.sweep")
STUDY = _LLMSource("llm study", ("llm/study",), "python -m llm_runs.study")
STUDY_HORIZON = _LLMSource("llm horizon grid", ("llm/horizon",), "python -m llm_runs.study --grid horizon")
MECHANISM = _LLMSource("llm mechanism grid", ("llm/mechanism",), "python -m llm_runs.study --grid mechanism")
GPU_STUDY = _LLMSource("llm gpu study", ("llm/gpu_study",), "python -m llm_runs.gpu_study")
VERDICTS = Source("llm/study/verdicts.json", ("llm/study/verdicts.json",),
                  "python -m claims.study --json results/llm/study/verdicts.json")


def read_sim(source: Source, steps: bool = False) -> pd.DataFrame:
    """The tidy table of a simulator sweep (``steps=True``: its ``steps.parquet``)."""
    path = source.require()
    if steps:
        path = path.with_name("steps.parquet")
        if not path.exists():
            raise MissingResults(f"missing results {path} (per-step records); make them with `{source.command}`")
    df = pd.read_parquet(path)
    df.attrs["source"] = str(path)
    df.attrs["quick"] = source.is_quick()
    return df


def read_json(path: Path):
    """The JSON in ``path``; a truncated or garbled file is a ``ValueError`` naming it and the line."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def read_claims_doc() -> dict:
    """``claims.json`` as ``{"complete", "quick", "provenance", "claims": [rows]}`` (a bare list of rows,
    the older format, is read as such a document with unknown provenance)."""
    path = VERIFY.require()
    doc = read_json(path)
    if isinstance(doc, list):
        doc = {"complete": len(doc) == 18, "quick": None, "provenance": None, "claims": doc}
    rows = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"id", "status"} <= set(r) for r in rows):
        raise ValueError(f"{path} is not a claims table (a list of claim objects with 'id' and 'status')")
    return doc


def read_claims() -> list[dict]:
    return read_claims_doc()["claims"]


def verify_was_quick() -> bool | None:
    """Whether claims.json came from ``--quick`` (None if unknown)."""
    return read_claims_doc().get("quick")


def read_abstract() -> dict:
    """``abstract.json``: ``{"claims": [{"text", "claim_ids", "verdict", "evidence"}], ...}``."""
    path = ABSTRACT.require()
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list):
        raise ValueError(f"{path} is not the abstract's verdicts (an object with a 'claims' list)")
    return doc


# ----------------------------------------------------------------------------------- LLM runs


def run_settings(cfg: dict) -> dict:
    """The settings a run is plotted and ranked by, from its ``config.json`` ``config`` block.

    An asynchronous run is placed at its staleness bound: ``delay`` is ``max_staleness``.
    """
    mode = cfg.get("mode") or "controlled"
    delay = cfg.get("delay")
    if mode != "controlled" and cfg.get("max_staleness") is not None:
        delay = cfg["max_staleness"]
    return {"estimator": cfg.get("estimator"), "delay": delay, "seed": cfg.get("seed"), "mode": mode,
            "eps": cfg.get("eps"), "steps": cfg.get("steps"), "group_size": cfg.get("group_size"),
            "heldout_size": cfg.get("heldout_size")}


def _legacy_gspo_eps_high(cfg: dict):
    return 4e-4 if cfg.get("eps_high") is None else cfg["eps_high"]


LEGACY_FIELDS: dict[str, tuple] = {
    "amp": (lambda cfg: "none", "no mixed precision existed: float32 throughout"),
    "gspo_eps_low": (lambda cfg: cfg.get("eps"),
                     "the trainer passed its eps to GSPO as the lower clip: GSPO clipped at 1 - eps"),
    "gspo_eps_high": (_legacy_gspo_eps_high,
                      "GSPO's upper clip was eps_high when set, else gspo_loss's default 4e-4"),
    **{name: (None, "only the estimator it tunes reads it, and that estimator did not exist yet")
       for name in ("cispo_eps_low", "cispo_eps_high", "m2po_tau", "opsm_delta", "tis_cap", "mis_low", "mis_high",
                    "gmc_cap_kappa", "icepop_low", "icepop_high", "geo_low", "geo_high", "geo_length", "geo_cap",
                    "sapo_tau_pos", "sapo_tau_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                    "vespo_lambda_neg", "dppo_delta", "dppo_cap")},
    "optimizer": (lambda cfg: "adam", "every RL update used torch.optim.Adam(params, lr)"),
    "momentum": (lambda cfg: 0.0, "Adam has no heavy-ball momentum knob"),
    "weight_decay": (lambda cfg: 0.0, "Adam without weight decay"),
    "mechanism_diagnostics": (lambda cfg: False, "the mech/ columns did not exist"),
}
"""Config fields added after runs were made: ``{field: (value, why)}`` where ``value(cfg)`` is
what a run whose stored ``config`` lacks the field actually used, computed from that stored
config (``None``: today's default, which cannot have mattered). :func:`read_run_config`
fills these in, so an old GSPO run of ``eps = 0.2`` reads as the clip range
``[1 - 0.2, 1 + 4e-4]`` it was trained with, not today's ``[1 - 3e-4, 1 + 4e-4]``. A field
missing from a stored config and absent here is filled by nobody: it reads as missing
(``llm_runs.config.load_run_config`` then takes today's default). Every field added to the
run configuration must get an entry here (a test checks it against the committed runs)."""


def legacy_fields(cfg: dict) -> dict[str, object]:
    """``{field: value}`` of the :data:`LEGACY_FIELDS` that ``cfg`` (a stored ``config`` block)
    lacks, with the values the run actually used (``None``: today's default applies)."""
    return {name: (value(cfg) if value is not None else None)
            for name, (value, _why) in LEGACY_FIELDS.items() if name not in cfg}


def read_run_config(run: Path, legacy: bool = True) -> dict:
    """The ``config`` block of ``run/config.json`` (``ValueError`` naming the file if it is bad).

    With ``legacy`` (the default) a field the run predates takes the value the run actually
    used (:data:`LEGACY_FIELDS`); ``legacy=False`` gives the stored block as written.
    """
    path = Path(run) / "config.json"
    j = read_json(path)
    cfg = j.get("config", j) if isinstance(j, dict) else None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected an object with a 'config' object")
    cfg = dict(cfg)
    if legacy:
        cfg.update({k: v for k, v in legacy_fields(cfg).items() if v is not None})
    return cfg


METRICS_FILE = "metrics.csv"
"""The per-step metrics table of a run folder (written by ``llm_runs.metrics.MetricsWriter``)."""
PACKED_METRICS_FILE = METRICS_FILE + ".gz"
"""A finished run's table packed: exactly the bytes of ``metrics.csv``, gzip-compressed."""


def metrics_path(run: Path) -> Path | None:
    """The run folder's metrics table, plain or packed (None: neither). Both at once is a
    ``ValueError``: two copies of one table would be free to disagree."""
    run = Path(run)
    plain, packed = run / METRICS_FILE, run / PACKED_METRICS_FILE
    if plain.is_file() and packed.is_file():
        raise ValueError(f"{run}: both {METRICS_FILE} and {PACKED_METRICS_FILE}; keep one (they may disagree)")
    return plain if plain.is_file() else packed if packed.is_file() else None


def metrics_text(path: Path) -> str:
    """The text of a metrics table, plain or packed (``ValueError`` naming an unreadable file)."""
    import gzip

    path = Path(path)
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as fh:
                data = fh.read()
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable gzip file ({exc})") from None
    else:
        data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None


def pack_metrics(run: Path) -> Path:
    """Replace a finished run's ``metrics.csv`` by ``metrics.csv.gz`` holding the same bytes
    (deterministic: no name or time in the gzip header, so packing twice gives one file).

    Only a finished run (its ``summary.json`` written) is packed, and the packed file is
    decompressed and compared with the original before the original is removed. A run that is
    already packed is left as it is. Returns the packed file."""
    import gzip

    from .io import write_bytes

    run = Path(run)
    path = metrics_path(run)
    if path is None:
        raise MissingResults(f"{run}: no {METRICS_FILE} to pack")
    if path.name == PACKED_METRICS_FILE:
        return path
    if not (run / "summary.json").is_file():
        raise ValueError(f"{run}: not finished (no summary.json): only a finished run's {METRICS_FILE} is packed")
    data = path.read_bytes()
    read_metrics_csv(path)  # a corrupt table is refused, not packed
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if gzip.decompress(packed) != data:  # pragma: no cover (zlib round trip)
        raise ValueError(f"{path}: the packed bytes do not decompress to the original")
    out = write_bytes(run / PACKED_METRICS_FILE, packed)
    path.unlink()
    return out


def read_metrics_csv(path: Path) -> pd.DataFrame:
    """``metrics.csv`` (or its packed ``metrics.csv.gz``) parsed strictly: every line has the
    header's fields, ``step`` is an integer and every other field a number or empty; otherwise
    ``ValueError`` naming the file and line."""
    import csv
    import io

    path = Path(path)
    rows = list(csv.reader(io.StringIO(metrics_text(path), newline="")))
    if not rows:
        raise ValueError(f"{path}: empty file (no header)")
    head, body = rows[0], rows[1:]
    if not head or head[0] != "step":
        raise ValueError(f"{path}, line 1: the header must start with 'step', got {head[:3]}")
    data = []
    for i, r in enumerate(body, start=2):
        if not r:
            continue
        if len(r) != len(head):
            raise ValueError(f"{path}, line {i}: {len(r)} fields, the header has {len(head)}")
        try:
            step = int(r[0])
            vals = [float(v) if v != "" else math.nan for v in r[1:]]
        except ValueError:
            raise ValueError(f"{path}, line {i}: not a number in {','.join(r)[:120]!r}") from None
        data.append([step, *vals])
    df = pd.DataFrame(data, columns=head)
    df["step"] = df["step"].astype(int) if len(df) else df["step"]
    return df


def check_steps(m: pd.DataFrame, path: Path, steps=None) -> None:
    """Steps must be 0, 1, ..., k once each (k <= T = ``steps`` when known): ``ValueError`` otherwise."""
    st = m["step"].to_numpy()
    dup = sorted({int(x) for x in st[pd.Series(st).duplicated().to_numpy()]})
    if dup:
        raise ValueError(f"{path}: step(s) {dup[:5]} appear more than once (a corrupted run)")
    if len(st) and (sorted(st) != list(range(len(st)))):
        missing = sorted(set(range(int(max(st)) + 1)) - {int(x) for x in st})
        raise ValueError(f"{path}: steps are not 0..{int(max(st))} once each (missing {missing[:5]})")
    if steps is not None and len(st) and int(max(st)) > int(steps):
        raise ValueError(f"{path}: step {int(max(st))} beyond the run's T = {steps}")


_READ_CACHE: dict = {}
"""read_run's results in this process, keyed by the run's files and their modification times (a
report reads one study folder several times; a file written since is read again)."""


def read_run(run: Path) -> tuple[dict, pd.DataFrame]:
    """A run folder: ``(settings, metrics)``, both checked (see the module docstring). Repeated
    reads of unchanged files in one process come from a cache (copies: callers may modify them)."""
    run = Path(run)
    path = metrics_path(run)
    if path is None:
        read_run_config(run)  # a bad config.json is named first
        raise MissingResults(f"{run}: no {METRICS_FILE}")
    cfg_file = run / "config.json"
    key = (str(run.resolve()), path.name, cfg_file.stat().st_mtime_ns, path.stat().st_mtime_ns, path.stat().st_size)
    hit = _READ_CACHE.get(key)
    if hit is None:
        cfg = read_run_config(run)
        m = read_metrics_csv(path)
        settings = run_settings(cfg)
        check_steps(m, path, settings["steps"])
        hit = _READ_CACHE[key] = (settings, m)
    return dict(hit[0]), hit[1].copy()


def run_folders(root: Path) -> list[Path]:
    """The run folders directly under ``root``, sorted: folders with a ``config.json`` and a
    metrics table, plain or packed (:func:`metrics_path`). None if ``root`` is not a folder."""
    root = Path(root)
    if not root.is_dir():
        return []
    return [p for p in sorted(root.iterdir())
            if p.is_dir() and (p / "config.json").is_file() and metrics_path(p) is not None]


def _run_index(root: Path) -> list[dict]:
    """Run folders under ``root`` (:func:`run_folders`) with their settings, sweep runs only."""
    out = []
    for run in run_folders(root):
        metrics = metrics_path(run)
        cfg = run_settings(read_run_config(run))
        if cfg["estimator"] is None or cfg["delay"] is None:
            continue
        done = (run / "summary.json").exists()
        out.append({"run": run.name, "path": run, "metrics": metrics, "complete": done, **cfg})
    return out


def read_llm_runs() -> pd.DataFrame:
    """Every run's metrics, long: one row per (run, step), the run's settings as columns.

    Columns: run, estimator, mode, delay, seed, eps, steps, complete, step and every metric
    column (``train/...``, ``eval/...``, ``stale/...``, ``perf/...``). A run is complete when
    its metrics reach step = steps (the final evaluation row) or it wrote ``summary.json``.
    A run whose files are corrupt (duplicated steps, a garbage line) raises ``ValueError``.
    """
    root = LLM.require()
    frames = []
    for r in _run_index(root):
        _, m = read_run(r["path"])
        if m.empty:
            continue
        complete = r["complete"] or (r["steps"] is not None and m["step"].max() >= r["steps"])
        meta = {k: r[k] for k in ("run", "estimator", "mode", "delay", "seed", "eps", "steps", "heldout_size")}
        frames.append(m.assign(**meta, complete=bool(complete)))
    if not frames:
        raise MissingResults(f"no run under {root} has a non-empty metrics file; make them with `{LLM.command}`")
    df = pd.concat(frames, ignore_index=True)
    df.attrs["source"] = str(root)
    df.attrs["quick"] = LLM.is_quick()
    return df


UNSTABLE_DROP = 0.10
UNSTABLE_SE = 3.0
"""A run is *unstable* if its loss or gradient norm is ever non-finite, an update was skipped
for a non-finite gradient, or its final held-out accuracy is below its own warm-start accuracy
(the evaluation at step 0) by more than max(UNSTABLE_DROP, UNSTABLE_SE binomial standard errors
of that accuracy on the held-out split), so that evaluation noise alone does not mark a run."""

UNSTABLE_RULE = (f"unstable = a non-finite loss or gradient norm (or a skipped update) at any step, or final "
                 f"held-out accuracy below the run's own step-0 (warm-start) accuracy p0 by more than "
                 f"max({UNSTABLE_DROP:.2f}, {UNSTABLE_SE:g} sqrt(p0 (1 - p0) / n_heldout))")


def drop_threshold(acc0: float, n_heldout) -> float:
    """The accuracy drop beyond which a run counts as collapsed (see :data:`UNSTABLE_RULE`)."""
    n = pd.to_numeric(n_heldout, errors="coerce")
    if not (np.isfinite(acc0) and np.isfinite(n) and n > 0):
        return UNSTABLE_DROP
    return max(UNSTABLE_DROP, UNSTABLE_SE * math.sqrt(max(acc0 * (1 - acc0), 0.0) / float(n)))


DIAGNOSTICS = {
    "stale/ess": r"ESS$/G$",
    "stale/mass_cap_frac": r"groups capped ($\bar W>1+\epsilon$)",
    "stale/clip_frac": r"trajectories clipped ($w>1+\epsilon$)",
    "stale/log_ratio_abs_mean": r"raw $|\log w|$ (mean)",
}
"""F8's diagnostics: metric column -> axis label."""


def _finite_all(s: pd.Series) -> bool:
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    return bool(np.isfinite(x).all())


def run_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: warm-start and final held-out accuracy, stability, mean diagnostics."""
    rows = []
    for run, g in df.groupby("run", sort=True):
        g = g.sort_values("step")
        ev = g.dropna(subset=["eval/heldout_acc"])
        upd = g[g["step"] < g["steps"].iloc[0]] if g["steps"].notna().all() else g.iloc[:-1]
        upd = upd if len(upd) else g
        nonfinite = not (_finite_all(upd.get("train/loss", pd.Series(dtype=float)))
                         and _finite_all(upd.get("train/grad_norm", pd.Series(dtype=float))))
        skipped = float(pd.to_numeric(upd.get("train/update_skipped", pd.Series([0.0])), errors="coerce").fillna(0).sum())
        acc0 = float(ev["eval/heldout_acc"].iloc[0]) if len(ev) else math.nan
        acc_end = float(ev["eval/heldout_acc"].iloc[-1]) if len(ev) else math.nan
        collapsed = bool(acc_end < acc0 - drop_threshold(acc0, g["heldout_size"].iloc[0] if "heldout_size" in g else None)) if len(ev) else False
        row = {k: g[k].iloc[0] for k in ("estimator", "mode", "delay", "seed", "eps", "steps", "complete")}
        row.update(run=run, acc0=acc0, acc_final=acc_end, last_step=int(g["step"].max()),
                   nonfinite=nonfinite or skipped > 0, collapsed=collapsed,
                   stable=not (nonfinite or skipped > 0 or collapsed))
        for col in DIAGNOSTICS:
            row[col] = float(pd.to_numeric(upd[col], errors="coerce").mean()) if col in upd else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def mean_se(x) -> tuple[float, float, int]:
    """Mean, standard error (std / sqrt n, 0 for n = 1) and n of the finite values of ``x``."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0, n


def combine_seeds(df: pd.DataFrame, by: list[str], value: str, se: str) -> pd.DataFrame:
    """Average Monte Carlo estimates over seeds: mean of ``value``, se = sqrt(sum se^2) / n."""
    g = df.groupby(by, sort=True)
    out = g[value].mean().to_frame(value)
    out[se] = g[se].apply(lambda s: float(np.sqrt(np.nansum(np.asarray(s, float) ** 2)) / max(len(s), 1)))
    out["n_seeds"] = g[value].size()
    return out.reset_index()


def source_note(df: pd.DataFrame) -> str:
    """'Source: `file`' (several files: ``attrs["source"]`` may be a list) and '(quick sweep)', for captions."""
    src = df.attrs.get("source")
    if not src:
        return ""
    rels = []
    for p in ([src] if isinstance(src, str) else list(src)):
        try:
            rels.append(str(Path(p).relative_to(results_root().parent)))
        except ValueError:
            rels.append(str(p))
    return "Source: " + ", ".join(f"`{r}`" for r in rels) + (" (quick sweep)." if df.attrs.get("quick") else ".")


HORIZON_TASKS = {"short": "arithmetic", "long": "scratchpad"}
"""The staleness study's horizon labels and the task each names (``llm_runs.study.HORIZONS``
holds the rest of each horizon's settings)."""


def horizon_of(config: dict) -> str:
    """The horizon label of a run's settings (from its task), else the task name itself."""
    label = {task: h for h, task in HORIZON_TASKS.items()}
    return label.get(config.get("task"), str(config.get("task")))


def sum_width(digits: int, terms: int) -> int:
    """Characters of the largest sum of ``terms`` operands of ``digits`` digits: the arithmetic
    task's longest answer and the scratchpad's zero-padded field width (one definition, read by
    :mod:`llm_runs.tasks` and by the figures)."""
    return len(str((10**int(digits) - 1) * int(terms)))


def scratchpad_horizon(digits: int, terms: int) -> int:
    """H, the number of completion tokens (EOS included) of every scratchpad completion:
    ``terms - 1`` partial sums of :func:`sum_width` characters, each followed by a comma or EOS."""
    return (int(terms) - 1) * (sum_width(digits, terms) + 1)


def horizon_tokens(config: dict) -> int:
    """The horizon H of a run from its stored settings: exactly :func:`scratchpad_horizon` for
    the scratchpad tasks, and for the arithmetic task its longest completion (answer and EOS:
    ``sum_width + 1``; shorter sums finish earlier). Another task is a ``ValueError``."""
    task, digits, terms = config.get("task"), config.get("digits"), config.get("terms")
    if task in ("scratchpad", "scratchpad_answer"):
        return scratchpad_horizon(digits, terms)
    if task == "arithmetic":
        return sum_width(digits, terms) + 1
    raise ValueError(f"no fixed horizon for task {task!r} (scratchpad, scratchpad_answer or arithmetic)")
