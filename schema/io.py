"""Atomic writes: a reader never sees a half-written file, a crash never leaves one.

Every results file is written to a temporary file in the same folder and renamed over the
target (``os.replace`` is atomic on one file system).
"""
from __future__ import annotations

import itertools
import json
import logging
import math
import os
from pathlib import Path

_log = logging.getLogger(__name__)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic(path, write) -> Path:
    """``write(tmp)`` to a temporary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    tmp = _tmp(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic(path, lambda tmp: tmp.write_text(text))


def write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic(path, lambda tmp: tmp.write_bytes(data))


NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
"""How strict JSON holds a non-finite float: as one of these strings (``Infinity`` bare is not
JSON, and strict parsers refuse it); :func:`loads_json` reads them back as the floats."""


def _finite_or_tagged(obj):
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        obj = obj.item()  # a numpy scalar: the Python number
    if isinstance(obj, float) and not math.isfinite(obj):  # numpy's float64 is a float too
        return "NaN" if math.isnan(obj) else "Infinity" if obj > 0 else "-Infinity"
    if isinstance(obj, dict):
        return {k: _finite_or_tagged(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_tagged(v) for v in obj]
    return obj


def dumps_json(obj, indent: int | None = 2, **kw) -> str:
    """Strict JSON text of ``obj``: a non-finite float becomes the string of :data:`NON_FINITE`
    (never the bare ``Infinity``/``NaN`` tokens), other non-JSON values their ``str``."""
    return json.dumps(_finite_or_tagged(obj), indent=indent, default=str, ensure_ascii=False, allow_nan=False, **kw)


def loads_json(text: str):
    """Parse JSON written by :func:`dumps_json`: the strings of :data:`NON_FINITE` are the floats
    again (older files' bare ``Infinity``/``NaN`` tokens are read as the same floats)."""
    return _non_finite_back(json.loads(text))


def _non_finite_back(obj):
    if isinstance(obj, str):
        return NON_FINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _non_finite_back(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_non_finite_back(v) for v in obj]
    return obj


def write_json(path, obj, indent: int = 2) -> Path:
    """:func:`dumps_json` of ``obj`` to ``path`` atomically (strict JSON; read it with :func:`loads_json`)."""
    return write_text(path, dumps_json(obj, indent=indent) + "\n")


def write_parquet(path, df) -> Path:
    """A pandas DataFrame to ``path`` as parquet, atomically."""
    return atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


MAX_FILE_BYTES = 5_000_000
"""No committed file is larger (``tests/test_file_sizes.py``); :func:`write_parquet_parts` keeps
each part under :data:`PART_BYTES`, with room to spare."""
PART_BYTES = 4_000_000


def _parquet_bytes(df, **parquet_kw) -> bytes:
    import io

    buf = io.BytesIO()
    df.to_parquet(buf, index=False, **parquet_kw)
    return buf.getvalue()


def parquet_parts(path) -> list[Path]:
    """The files holding the table ``path``: ``[path]`` when it is one file, else its row-range parts
    ``STEM.partNN.parquet`` in order (written by :func:`write_parquet_parts`); ``[]`` when neither."""
    import re

    path = Path(path)
    if path.exists():
        return [path]
    stem = path.name.removesuffix(".parquet")
    pattern = re.compile(re.escape(stem) + r"\.part(\d+)\.parquet")
    found = [(int(m.group(1)), p) for p in path.parent.glob(f"{stem}.part*.parquet")
             if (m := pattern.fullmatch(p.name))] if path.parent.is_dir() else []
    return [p for _, p in sorted(found)]


def read_parquet_parts(path):
    """The table ``path`` as one DataFrame, whether it is one file or row-range parts (see
    :func:`write_parquet_parts`): the parts concatenated in order, the same rows, columns and dtypes."""
    import pandas as pd

    files = parquet_parts(path)
    if not files:
        raise FileNotFoundError(f"{path}: no such table (neither the file nor its .partNN.parquet parts)")
    if len(files) == 1:
        return pd.read_parquet(files[0])
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def write_parquet_parts(path, df, max_bytes: int = PART_BYTES, **parquet_kw) -> list[Path]:
    """The DataFrame ``df`` as the table ``path``: one file when its parquet is at most ``max_bytes``,
    else consecutive row ranges ``STEM.part00.parquet``, ``STEM.part01.parquet``, ... each at most
    ``max_bytes`` (so that no committed file is large). Each file is written atomically; the other
    form's files (an older single file or older parts) are removed after. The table read back by
    :func:`read_parquet_parts` must equal ``df`` (else ``ValueError``, and nothing is replaced).
    ``parquet_kw`` go to ``DataFrame.to_parquet`` (``compression``, ``schema``)."""
    import io
    import re

    import pandas as pd

    path = Path(path)
    stem = path.name.removesuffix(".parquet")
    whole = _parquet_bytes(df, **parquet_kw)
    if len(whole) <= max_bytes:
        blobs = {path: whole}
    else:
        n = -(-len(whole) // max_bytes)
        while True:
            bounds = [round(i * len(df) / n) for i in range(n + 1)]
            pieces = [df.iloc[a:b] for a, b in itertools.pairwise(bounds)]
            blobs = {path.with_name(f"{stem}.part{i:02d}.parquet"): _parquet_bytes(pc, **parquet_kw)
                     for i, pc in enumerate(pieces)}
            if max(len(b) for b in blobs.values()) <= max_bytes or n >= len(df):
                break
            n += 1
        back = pd.concat([pd.read_parquet(io.BytesIO(b)) for b in blobs.values()], ignore_index=True)
        try:
            pd.testing.assert_frame_equal(back, pd.read_parquet(io.BytesIO(whole)), check_exact=True)
        except AssertionError as exc:
            raise ValueError(f"{path}: the table does not read back the same from row-range parts: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, blob in blobs.items():
        write_bytes(target, blob)
    stale = [path] if path.exists() and path not in blobs else []
    stale += [p for p in path.parent.glob(f"{stem}.part*.parquet")
              if p not in blobs and re.fullmatch(re.escape(stem) + r"\.part\d+\.parquet", p.name)]
    for p in stale:
        p.unlink()
    return list(blobs)


def check_writable(path) -> Path:
    """Raise an ``OSError`` (``PermissionError``, ``IsADirectoryError``, ...) naming ``path`` now if
    it could not be written later.

    ``path`` must not be a folder; its missing parent folders are created now, and a probe file
    is created in the parent and removed again (permission bits alone do not tell: root passes
    every ``os.access`` check, and a read-only or virtual file system refuses writes anyway).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a file")
    parent = path.parent
    nearest = parent
    while not nearest.exists() and nearest.parent != nearest:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise NotADirectoryError(f"cannot write {path}: {nearest} is not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise PermissionError(f"cannot write {path}: permission denied")
    probe = parent / f".{path.name}.probe-{os.getpid()}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe.touch(exist_ok=False)
    except OSError as exc:
        raise type(exc)(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if probe.exists():
            probe.unlink()
    return path


def same_settings_or_move_aside(out, cfg: dict, keys, force: bool = False) -> bool:
    """Guard a results folder ``out`` against mixing settings.

    ``True`` if ``out/config.json`` records the same ``cfg[k]`` for every ``k`` in ``keys``
    (resume or nothing to do), ``False`` if there is no ``config.json``. With other settings:
    ``ValueError`` naming the folder, or, with ``force``, the folder is renamed to
    ``<out>.old-<time>`` (never deleted) and ``False`` is returned.
    """
    import time

    out = Path(out)
    path = out / "config.json"
    if not path.exists():
        return False
    try:
        old = loads_json(path.read_text())  # non-finite settings read back as the floats written
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); move the folder aside or choose another --out") from None

    def canon(v):
        return json.dumps(v, sort_keys=True, default=str)

    if all(canon(old.get(k)) == canon(cfg.get(k)) for k in keys):
        return True
    if not force:
        raise ValueError(f"{out} holds results made with other settings (see its config.json); rerun with --force "
                         "to move it aside, or choose another --out")
    aside = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    out.rename(aside)
    _log.warning("moved the old results to %s", aside)
    return False


TOOLKIT_FORMAT_PREFIX = "gmc-grpo-"
"""The toolkit's own outputs say so: a JSON file's top-level ``"format"`` starts with this
(``gmc-grpo-claims/1``, ``gmc-grpo-abstract/1``), a Markdown file's first line is an HTML comment
``<!-- gmc-grpo-...``."""


def written_by_toolkit(path, legacy=None) -> bool:
    """True when the file ``path`` is one the toolkit wrote (see :data:`TOOLKIT_FORMAT_PREFIX`), or
    one ``legacy(text)`` recognises: an output format without the marker (written before it existed,
    or binary: ``legacy`` is given the bytes of a file that is not UTF-8 text)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return bool(legacy is not None and legacy(data))
    if text.startswith("<!-- " + TOOLKIT_FORMAT_PREFIX):
        return True
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and str(obj.get("format", "")).startswith(TOOLKIT_FORMAT_PREFIX):
        return True
    return bool(legacy is not None and legacy(text))


def check_output(path, legacy=None) -> Path:
    """The one rule for an output file named by a user, applied before any work starts: a file
    the toolkit did not write (:func:`written_by_toolkit`) is never replaced (``ValueError``), and
    the path must be writable now (:func:`check_writable`, an ``OSError`` naming it)."""
    path = Path(path)
    if path.is_file() and not written_by_toolkit(path, legacy):
        raise ValueError(f"{path} exists and was not written by the toolkit; not replacing it "
                         "(name another file or move it away)")
    return check_writable(path)


def check_output_folder(folder) -> Path:
    """A folder the toolkit will write files into: created now if missing, and writable now
    (``OSError`` naming it otherwise); a file of that name is a ``NotADirectoryError``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder")
    check_writable(folder / ".probe")
    return folder
