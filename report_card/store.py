"""Resumable parts: what a part computed is kept under the card's ``data/`` folder, keyed by a hash
of everything that decides it (the correction file's bytes, the settings, the seeds); a rerun with
the same key reads it back instead of computing it again."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd


class Store:
    def __init__(self, folder: Path):
        self.folder = Path(folder) / "data"

    def _path(self, part: str, key) -> Path:
        h = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return self.folder / f"{part}-{h}.parquet"

    def get(self, part: str, key) -> pd.DataFrame | None:
        p = self._path(part, key)
        return pd.read_parquet(p) if p.is_file() else None

    def put(self, part: str, key, df: pd.DataFrame) -> Path:
        p = self._path(part, key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        df.to_parquet(tmp)
        tmp.replace(p)
        return p
