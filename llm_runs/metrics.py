"""The per-step metrics table, ``results/llm/<run>/metrics.csv``.

One row per update ``step`` t = 0 .. T-1 (the update theta_t -> theta_{t+1}), plus a final
row ``step = T`` that holds only the evaluation of the final policy. ``eval/`` columns
evaluate theta_t (the policy *before* row t's update) and are empty except every
``eval_every`` steps. Columns are fixed (:data:`COLUMNS`); a value that does not apply to
the run's estimator is empty (NaN). Floats are written with ``repr`` so a resumed run can be
compared to an uninterrupted one byte for byte (``perf/`` columns are wall-clock times).

On resume the file is cut back to the rows before the checkpoint's step and continued, so
no row is lost or duplicated.
"""
from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from schema.io import write_text
from schema.metrics import DRIFT, MECHANISM, STALE, WARN

COLUMNS = [
    "step",
    # train/: the update of this row
    "train/reward_mean",  # mean r over the B*G completions (sampled accuracy of the behaviour policy)
    "train/loss",  # surrogate value
    "train/grad_norm",  # ||grad|| before any clipping
    "train/update_skipped",  # 1 if the gradient was non-finite and the update was not applied
    "train/adv_zero_frac",  # fraction of groups whose rewards are all equal (no signal)
    "train/completion_len_mean",  # completion tokens per sample, EOS included
    "train/finished_frac",  # fraction of completions that emitted EOS
    "train/weight_mean",  # mean weight c_i (trajectory schemes)
    "train/weight_min",
    "train/weight_max",
    "train/grad_cos",  # cosine between this update's gradient estimate and the previous update's (llm_runs.theory)
    "train/update_cos",  # cosine between consecutive parameter steps theta_{t+1} - theta_t
    # stale/: importance-ratio diagnostics on the RAW trajectory ratios w (estimators.diagnostics)
    "stale/ess",  # mean over groups of ESS/G = (sum w)^2 / (G sum w^2)
    "stale/ess_min",
    "stale/mass_mean",  # group mass mean_i w_i, mean over groups
    "stale/mass_max",
    "stale/mass_cap_frac",  # fraction of groups with mass > 1+eps (GMC capping active)
    "stale/gmc_lambda_mean",  # mean GMC scale lambda
    "stale/clip_frac",  # fraction of trajectories with w > 1+eps (TIC clipped / masked)
    "stale/token_clip_frac",  # token_clip: fraction of tokens clipped
    "stale/seq_clip_frac",  # gspo: fraction of sequences clipped
    "stale/log_ratio_mean",  # mean of log w = sum_t (log pi_theta - log mu) over the completion
    "stale/log_ratio_abs_mean",
    "stale/log_ratio_max",
    "stale/log_ratio_min",
    "stale/chi2",  # trajectory chi^2 estimate: mean w^2 - 1 over the batch (llm_runs.theory)
    "stale/mu4",  # mean (w - 1)^4
    "stale/chi2_token",  # per-token chi^2: mean r_t^2 - 1 over completion tokens
    "stale/mass_bias",  # realised mass bias: mean over groups of (1/G) sum_i |w_i - c_i| (trajectory schemes)
    "stale/mass_bias_bound",  # THEORY §3's bound on it at stale/chi2 (and stale/mu4): llm_runs.theory.SCHEME_BOUNDS
    "stale/staleness_mean",  # t - version of the behaviour policy, in policy versions
    "stale/staleness_max",
    "stale/dropped",  # samples dropped as too stale (t - version > max_staleness) while fetching this batch (async)
    "stale/dropped_total",  # the same, cumulative over the run
    # eval/: theta_t before this row's update (every eval_every steps)
    "eval/heldout_acc",  # greedy accuracy on the held-out split
    "eval/heldout_pc",  # mean exact probability of sampling the correct answer (teacher forcing)
    "eval/train_acc",  # the same on the training pool (first eval_train_size problems)
    "eval/train_pc",
    # perf/: wall clock (excluded from resume comparisons)
    "perf/step_s",  # rollout + update (evaluation and checkpoints excluded)
    "perf/rollout_s",
    "perf/update_s",
    "perf/eval_s",
    "perf/tokens_per_s",  # completion tokens per second of step time
    "perf/samples_per_s",
]

MECHANISM_COLUMNS = list(MECHANISM)
"""Appended to :data:`COLUMNS` in runs that set ``mechanism_diagnostics`` (:func:`run_columns`);
absent otherwise, so runs without them keep the table every earlier run has."""


def run_columns(config) -> list[str]:
    """The metrics columns of a run of ``config``: :data:`COLUMNS`, plus :data:`MECHANISM_COLUMNS`
    when it logs the mechanism diagnostics, the ``drift/`` columns with ``drift_diagnostics`` and the
    ``step/`` columns of the step-size controls it uses (absent otherwise: earlier runs' tables)."""
    cols = COLUMNS + (MECHANISM_COLUMNS if getattr(config, "mechanism_diagnostics", False) else [])
    if getattr(config, "drift_diagnostics", False):
        cols = cols + list(DRIFT)
    from .stepsize import is_active

    step = ["step/lr_scale"] if hasattr(config, "gmc_step") and is_active(config) else []
    if getattr(config, "ess_scaling", "none") != "none":
        step += ["step/ess_ratio"]
    if getattr(config, "gmc_step", False):
        step += ["step/gmc_scale"]
    if getattr(config, "skip_zero_grad", False):
        step += ["step/zero_grad_skipped"]
    if getattr(config, "advantage", "") == "opob":
        step += ["perf/opob_s"]
    warn = list(WARN) if getattr(config, "early_warning", "off") != "off" else []
    return cols + step + warn


DIAGNOSTIC_COLUMNS = STALE  # estimators.diagnostics key -> column (schema.metrics)


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    v = float(v)
    return "" if math.isnan(v) else repr(v)


def first_torn_row(path: str | os.PathLike, n_columns: int | None = None) -> int | None:
    """The position (0 = the first row after the header; the rows are updates 0, 1, ... in order, so it is
    the update's step) of the first row of a metrics CSV that is not whole: cut short by a crash mid-write
    (too few fields, or the file's last line without its newline), or whose step is not the next one.
    None when every row is whole."""
    lines = Path(path).read_text().splitlines(keepends=True)
    if not lines:
        return None
    n = n_columns if n_columns is not None else len(next(csv.reader([lines[0]])))
    for i, line in enumerate(lines[1:]):
        try:
            fields = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            return i
        if not line.endswith("\n") or len(fields) != n or fields[0] != str(i):
            return i
    return None


class MetricsWriter:
    """Append-only CSV with the fixed :data:`COLUMNS`; ``truncate_before(step)`` for resume."""

    def __init__(self, path: str | os.PathLike, columns: list[str] = COLUMNS):
        self.path = Path(path)
        self.columns = list(columns)
        if not self.path.exists():
            self.path.write_text(",".join(self.columns) + "\n")
        header = self.path.open().readline().rstrip("\n").split(",")
        if header != self.columns:
            raise ValueError(f"{self.path} has columns {header}, expected {self.columns}")
        self._fh = None

    def truncate_before(self, step: int) -> int:
        """Keep only rows with ``step < step`` that come before the first torn row (:func:`first_torn_row`);
        returns how many rows were kept."""
        lines = self.path.read_text().splitlines(keepends=True)
        torn = first_torn_row(self.path, len(self.columns))
        rows = lines[1:] if torn is None else lines[1:1 + torn]
        kept = [ln for ln in rows if ln.strip() and int(ln.split(",", 1)[0]) < step]
        write_text(self.path, lines[0] + "".join(kept))
        return len(kept)

    def write(self, row: dict) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"unknown metric columns {sorted(unknown)}")
        if self._fh is None:
            self._fh = self.path.open("a", newline="")
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([_fmt(row.get(c)) for c in self.columns])
        self._fh.write(buf.getvalue())
        self._fh.flush()

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_metrics(run_dir: str | os.PathLike):
    """``pandas.DataFrame`` of a run's metrics (one row per step; the final row is eval only), read and
    checked by :func:`schema.results.read_run`."""
    from schema.results import read_run

    return read_run(run_dir)[1]
