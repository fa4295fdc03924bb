"""The committed warm starts (:func:`committed_root`, ``llm_runs/warmstarts/<preset>-<key>/``: the weights, split
into parts of at most :data:`PART_BYTES`, the tokenizer and the record, with the weights' sha256), and the key
every warm start is found by (:func:`warm_start_key`). :func:`llm_runs.warmstart.get_warm_start` takes a
committed warm start before any cache or recomputation (:func:`materialise`), so a machine whose CPU rounds
differently starts from the same weights and says so (``source`` and ``rounding`` in the record); weights whose
hash is not their record's are refused, never used. Committing one and checking them all is
``python -m llm_runs.warmstart`` (:func:`llm_runs.warmstart.main`).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import torch

from schema.io import dumps_json, loads_json

WARM_START_KEYS = ["preset", "model_path", "model_kwargs", "dtype", "task", "digits", "terms", "heldout_size",
                   "train_size", "task_seed", "warm_start_steps", "warm_start_lr", "warm_start_batch",
                   "warm_start_seed", "threads", "max_new_tokens"]
_FORMAT = 1
COMMITTED_ENV = "GMC_WARMSTARTS"
"""Environment variable naming another folder of committed warm starts (tests)."""
PART_BYTES = 4 * 2**20
"""The committed weights are split into parts of at most this many bytes (no tracked file over 5 MB)."""


def warm_start_key(config) -> str:
    import transformers

    return config.hash_of(WARM_START_KEYS, {"torch": torch.__version__, "transformers": transformers.__version__,
                                            "format": _FORMAT})


def weights_digest(path: Path) -> str:
    """sha256 of a warm start's ``*.safetensors`` files, in name order."""
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def committed_root() -> Path:
    """The folder of committed warm starts: ``$GMC_WARMSTARTS`` if set, else ``llm_runs/warmstarts``."""
    env = os.environ.get(COMMITTED_ENV)
    return Path(env) if env else Path(__file__).resolve().parent / "warmstarts"


def committed_path(config) -> Path:
    return committed_root() / f"{config.preset}-{warm_start_key(config)}"


def committed_record(config) -> dict | None:
    """The record of the committed warm start for ``config``'s settings (None: none committed)."""
    path = committed_path(config) / "warmstart.json"
    if not path.is_file():
        return None
    try:
        rec = loads_json(path.read_text())
    except ValueError as exc:
        raise ValueError(f"the committed warm start record {path} is unreadable ({exc})") from exc
    if not isinstance(rec, dict) or not rec.get("weights_sha256") or rec.get("key") != warm_start_key(config):
        raise ValueError(f"the committed warm start record {path} lacks its weights hash or names another key")
    return rec


def _weight_parts(src: Path) -> dict[str, list[Path]]:
    """Weight file name -> its parts in order (``model.safetensors.part-00``, ...) in a committed folder."""
    parts: dict[str, list[Path]] = {}
    for f in sorted(src.glob("*.safetensors.part-*")):
        parts.setdefault(f.name.rsplit(".part-", 1)[0], []).append(f)
    return parts


def committed_digest(config) -> str:
    """sha256 of the committed warm start's weights as the files hold them (the parts reassembled in
    name order, as :func:`weights_digest` hashes the materialised ``*.safetensors``): what its record's
    ``weights_sha256`` must equal."""
    h = hashlib.sha256()
    for _name, parts in sorted(_weight_parts(committed_path(config)).items()):
        for part in parts:
            h.update(part.read_bytes())
    return h.hexdigest()


def check_committed_files(config) -> dict:
    """The committed record of ``config`` after checking it against its weight files as read: a file
    that does not hash to the record (a flipped byte, or an edited record) is a ValueError saying the
    committed warm start is corrupt, which no machine's rounding explains."""
    rec = committed_record(config)
    if rec is None:
        raise ValueError(f"no committed warm start for these settings (key {warm_start_key(config)})")
    src = committed_path(config)
    if not _weight_parts(src):
        raise ValueError(f"the committed warm start {src} has no weight files (*.safetensors.part-*)")
    digest = committed_digest(config)
    if digest != rec["weights_sha256"]:
        raise ValueError(f"the committed warm start {src.name} is corrupt: its weight files hash to {digest[:16]} "
                         f"but its record says {rec['weights_sha256'][:16]} (a damaged weight file or an edited "
                         f"record, not a rounding difference of this machine); restore it with "
                         f"`git checkout -- {src}`")
    return rec


def materialise(config, path: Path, rec: dict, log) -> dict:
    """Write the committed warm start for ``config`` into the cache folder ``path`` (through a
    temporary folder), its weights reassembled and checked against the record's sha256: weights that
    do not hash to it are refused (``ValueError`` naming both hashes), never used."""
    src = committed_path(config)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for f in src.iterdir():
            if f.is_file() and ".part-" not in f.name and f.name != "warmstart.json":
                shutil.copyfile(f, tmp / f.name)
        for name, parts in _weight_parts(src).items():
            with open(tmp / name, "wb") as out:
                out.writelines(part.read_bytes() for part in parts)
        digest = weights_digest(tmp)
        if digest != rec["weights_sha256"]:
            raise ValueError(f"the committed warm start {src} is corrupt or edited: its weights hash to "
                             f"{digest[:16]}, its record says {rec['weights_sha256'][:16]}; refused (restore it "
                             f"with `git checkout -- {src}`)")
        info = {**rec, "source": "committed", "committed": f"{src.parent.name}/{src.name}"}
        (tmp / "warmstart.json").write_text(dumps_json(info))
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if path.is_dir() and (path / "warmstart.json").is_file():  # another run materialised it first
            return loads_json((path / "warmstart.json").read_text())
        raise
    log(f"warm start: the committed one ({src.name}, held-out pc {rec['heldout_pc']:.3f}), weights sha256 checked")
    return info


def recorded_starts(key: str, folders: list[Path] | None = None) -> dict[str, dict]:
    """The warm starts with ``key`` that committed runs record having started from: weights sha256 ->
    ``{"runs": count, "cpu_flags": [the machines that made them], "folder": the first grid folder}``,
    over every run of ``folders`` (default: every folder under ``results/llm``, in name order)."""
    from schema.results import LLM_FOLDER, read_run_doc, results_root, run_dirs

    found: dict[str, dict] = {}
    for folder in folders if folders is not None else sorted((results_root() / LLM_FOLDER).glob("*/")):
        for run in run_dirs(Path(folder)) if Path(folder).is_dir() else []:
            doc = read_run_doc(run)
            ws = doc.get("warm_start") or {}
            if ws.get("key") != key or not ws.get("weights_sha256"):
                continue
            rec = found.setdefault(ws["weights_sha256"], {"runs": 0, "cpu_flags": [], "folder": str(folder)})
            rec["runs"] += 1
            flags = (doc.get("machine") or {}).get("cpu_flags")
            if flags and flags not in rec["cpu_flags"]:
                rec["cpu_flags"].append(flags)
    return found


def committed_configs() -> dict[str, object]:
    """Folder name -> the run configuration each committed warm start was made for, rebuilt from the
    settings its record holds (the grids that use them are :data:`llm_runs.reference.COMMITTED_WARM_STARTS`)."""
    from .config import resolve_config

    out = {}
    root = committed_root()
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and ".tmp-" not in p.name) if root.is_dir() else []:
        try:
            rec = loads_json((folder / "warmstart.json").read_text())
            settings = dict(rec["settings"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{folder}: its warmstart.json is missing, unreadable or holds no settings "
                             f"({type(exc).__name__}: {exc}): a corrupt committed warm start; restore it with "
                             f"`git checkout -- {folder}`") from None
        cfg = resolve_config(settings)
        if committed_path(cfg).name != folder.name:
            raise ValueError(f"{folder}: its recorded settings give the key {warm_start_key(cfg)}, not its name's "
                             "(another torch or transformers version than the one that made it?)")
        out[folder.name] = cfg
    return out
