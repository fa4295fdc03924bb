"""Where the results live, how to read them, and which command makes each of them: the results
contract, in five modules (:mod:`schema.sources`, :mod:`schema.runs`, :mod:`schema.llm_sources`,
:mod:`schema.horizons`, :mod:`schema.stability`) whose names this module gathers.

The results root is ``results/`` of the repository, or the folder in the environment
variable ``GMC_RESULTS`` (tests use a temporary one); every producer writes and every reader
reads under it. A missing result raises :class:`MissingResults` naming the command that
makes it (the Makefile runs producers before ``make figures``).

Sources:

* ``Sim(NAME)``: ``results/sim/NAME/results.parquet`` (full sweep) or, if that is absent,
  ``results/sim/NAME-quick/results.parquet``; made by ``python -m simulators.sweep NAME``.
* ``TUNED``: ``results/sim/tuned_delay/results.parquet``; made by ``python -m simulators.tuned_sweep``.
* ``LLM``: run folders ``results/llm/sweep/<run>/`` (full) or ``results/llm/sweep_quick/<run>/``,
  each with ``config.json`` and ``metrics.csv``; made by ``python -m grids.sweep``. Every LLM grid's
  runs live under ``results/llm/`` (:func:`llm_relpath`); which grid lives where, and the sources of the
  studies' grids, are :mod:`grids.folders`'.
* ``VERIFY``: ``results/verify/claims.json``; made by ``python -m claims`` (``make verify-bounds``).
* ``ABSTRACT``: ``results/verify/abstract.json``; made by ``python -m claims.abstract``.

A run folder is read by :func:`read_run` only: its ``config.json`` and ``metrics.csv`` are
parsed strictly (a bad line or a truncated file is an error naming the file and line) and
its steps must be 0..T once each (a run with a duplicated or missing step is refused).
A finished run's table may be stored packed as ``metrics.csv.gz``, the same bytes
gzip-compressed (:func:`pack_metrics`); :func:`metrics_path` finds either. A finished grid may be
packed as a whole (:mod:`schema.packed`: ``runs.jsonl.gz``, ``metrics.parquet``, ``logs.jsonl.gz``
in the grid folder, no run folders): :func:`run_folders` lists its runs as ``root/name`` and
:func:`read_run`, :func:`read_run_config`, :func:`read_run_doc`, :func:`run_finished` and
:func:`metrics_text` read them exactly as the folders read. A run folder finished by its ``summary.json`` is whole
only when its table holds every step 0..T and reads whole (:func:`finished_run_problem`): the grid runner, packing
and ``--resume`` count nothing else complete.
A configuration field the run predates reads as the value the run actually used
(:data:`LEGACY_FIELDS`), never as today's default.
"""
from __future__ import annotations

from .finished import finished_run_problem, pack_metrics  # noqa: F401
from .horizons import HORIZON_TASKS, horizon_of, horizon_tokens, scratchpad_horizon, sum_width  # noqa: F401
from .llm_sources import LLM, LLM_FOLDER, LLMSource, llm_relpath, read_llm_runs  # noqa: F401
from .runs import (  # noqa: F401
    LEGACY_FIELDS,
    METRICS_FILE,
    PACKED_METRICS_FILE,
    RENAMED_FIELDS,
    check_steps,
    is_packed_run,
    legacy_fields,
    metrics_path,
    metrics_text,
    read_metrics_csv,
    read_run,
    read_run_config,
    read_run_doc,
    read_run_summary,
    renamed,
    run_dirs,
    run_finished,
    run_folders,
    run_settings,
    run_stamp,
)
from .sources import (  # noqa: F401
    ABSTRACT,
    ROOT,
    TUNED,
    VERIFY,
    MissingResults,
    Sim,
    Source,
    read_abstract,
    read_claims,
    read_claims_doc,
    read_json,
    read_sim,
    results_root,
    source_note,
    verify_was_quick,
    with_estimator_column,
)
from .stability import (  # noqa: F401
    DIAGNOSTICS,
    UNSTABLE_DROP,
    UNSTABLE_RULE,
    UNSTABLE_SE,
    combine_seeds,
    drop_threshold,
    mean_se,
    run_summary,
)
