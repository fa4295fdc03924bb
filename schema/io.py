"""Atomic writes: a reader never sees a half-written file, a crash never leaves one.

Every results file is written to a temporary file in the same folder and renamed over the
target (``os.replace`` is atomic on one file system).
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path


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
    print(f"moved the old results to {aside}", file=sys.stderr)
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
