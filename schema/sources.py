"""Where the results live, which command makes each of them, and how the non-run results (simulator
tables, claim verdicts) are read. :mod:`schema.results` describes the whole contract."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .io import loads_json, parquet_parts, read_parquet_parts

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


ESTIMATOR_COLUMN, LEGACY_ESTIMATOR_COLUMN = "estimator", "scheme"
"""The estimator's column (docs/GLOSSARY.md) and the name the simulator tables store it under."""


def with_estimator_column(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its estimator names under ``estimator`` and under the stored name ``scheme``, whichever of
    the two the file holds (a table with both must hold the same names in each; else ``ValueError``).
    A table with neither is returned as it is."""
    has = [c for c in (ESTIMATOR_COLUMN, LEGACY_ESTIMATOR_COLUMN) if c in df.columns]
    if len(has) == 2:
        if not df[ESTIMATOR_COLUMN].equals(df[LEGACY_ESTIMATOR_COLUMN]):
            raise ValueError(f"{df.attrs.get('source', 'a table')}: columns {ESTIMATOR_COLUMN!r} and "
                             f"{LEGACY_ESTIMATOR_COLUMN!r} name different estimators")
        return df
    if not has:
        return df
    other = LEGACY_ESTIMATOR_COLUMN if has[0] == ESTIMATOR_COLUMN else ESTIMATOR_COLUMN
    out = df.assign(**{other: df[has[0]]})
    out.attrs = dict(df.attrs)
    return out


def read_sim(source: Source, steps: bool = False) -> pd.DataFrame:
    """The tidy table of a simulator sweep (``steps=True``: its ``steps.parquet``, one file or its
    row-range parts ``steps.partNN.parquet``, read as one table), its estimators under ``estimator``
    and the stored name ``scheme`` alike (:func:`with_estimator_column`)."""
    path = source.require()
    if steps:
        path = path.with_name("steps.parquet")
        files = parquet_parts(path)
        if not files:
            raise MissingResults(f"missing results {path} (per-step records); make them with `{source.command}`")
        df = read_parquet_parts(path)
        df.attrs["source"] = str(files[0]) if len(files) == 1 else [str(f) for f in files]
    else:
        df = pd.read_parquet(path)
        df.attrs["source"] = str(path)
    df.attrs["quick"] = source.is_quick()
    return with_estimator_column(df)


def read_json(path: Path):
    """The JSON in ``path``; a truncated or garbled file is a ``ValueError`` naming it and the line."""
    try:
        return loads_json(Path(path).read_text())
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


def shown_path(p: str | Path) -> str:
    """A path as a generated file names it: relative to the results root's parent (``results/...``) or
    to the repository, never absolute; a path outside both is named from the results root's folder
    name or, failing that, by its last three parts."""
    p = Path(p)
    if not p.is_absolute():
        return str(p)
    root = results_root()
    for base in (root.parent, Path(__file__).resolve().parent.parent):
        try:
            return str(p.relative_to(base))
        except ValueError:
            pass
    return str(Path(*p.parts[-3:]))


def source_note(df: pd.DataFrame) -> str:
    """'Source: `file`' (several files: ``attrs["source"]`` may be a list) and '(quick sweep)', for captions."""
    src = df.attrs.get("source")
    if not src:
        return ""
    rels = [shown_path(p) for p in ([src] if isinstance(src, str) else list(src))]
    return "Source: " + ", ".join(f"`{r}`" for r in rels) + (" (quick sweep)." if df.attrs.get("quick") else ".")
