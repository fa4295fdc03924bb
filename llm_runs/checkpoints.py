"""A run's checkpoints: ``<out>/checkpoints/step-NNNNNN/`` folders (``from_pretrained`` weights and
``trainer_state.pt``), written under ``step-NNNNNN.tmp`` and renamed into place once they are on
disk, so a folder with the final name is always complete.

``trainer_state.pt`` holds ``{"format", "step", "complete", "elapsed_s", "config"}`` and, for a
checkpoint a run continues from (not the final one), the optimiser, the rollout source, the
direction tracker and the three random generators.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError

from schema.results import legacy_fields

from .config import config_diff
from .presets import load_pretrained

CHECKPOINT_FORMAT = 1


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk): the message names the file and the free space."""


class CheckpointError(ValueError):
    """A checkpoint file that does not load (truncated, corrupt, wrong format)."""


def checkpoint_dirs(out: Path) -> list[Path]:
    """Completed checkpoints of a run, oldest first."""
    root = Path(out) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()
                  and (p / "trainer_state.pt").is_file())


def latest_checkpoint(out: Path) -> Path | None:
    dirs = checkpoint_dirs(out)
    return dirs[-1] if dirs else None


def load_checkpoint(ckpt: Path, dtype: str = "float32", device: str = "cpu"):
    """``(trainer state, (policy, tokenizer))`` of one checkpoint folder; :class:`CheckpointError`
    naming the file that does not load."""
    path = ckpt / "trainer_state.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 (EOFError, UnpicklingError, RuntimeError ... from a truncated file)
        raise CheckpointError(f"checkpoint file {path} is unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint file {path}: format {found!r} is not {CHECKPOINT_FORMAT}")
    try:
        loaded = load_pretrained(ckpt, dtype, device)
    except Exception as exc:  # noqa: BLE001 (SafetensorError, OSError, ValueError from a truncated model file)
        names = ", ".join(sorted(p.name for p in ckpt.glob("*.safetensors"))) or "model weights"
        raise CheckpointError(f"checkpoint {ckpt} ({names}) is unreadable ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]})") from None
    return state, loaded


def intact_checkpoint(out: Path, dtype: str, device: str, log: Callable[[str], None], at_most: int | None = None):
    """``(folder, trainer state, (policy, tokenizer))`` of the newest checkpoint of ``out`` that loads,
    or ``(None, None, None)`` if the run has none. A checkpoint that does not load (a truncated
    ``model.safetensors`` or ``trainer_state.pt``) is moved aside to ``<name>.corrupt-<time>`` (never
    deleted), saying so, and the next older one is tried; if none loads, ValueError naming the files.
    A ``step-N.tmp`` left by a write cut short was never a checkpoint and is removed. ``at_most``: only a
    checkpoint of update ``<= at_most`` is used (a metrics row after it must be rewritten); the newer ones
    are moved aside to ``<name>.superseded-<time>`` (never deleted), saying so."""
    bad = []
    root = Path(out) / "checkpoints"
    for unfinished in sorted(root.glob("step-*.tmp")) if root.is_dir() else []:
        shutil.rmtree(unfinished, ignore_errors=True)
        log(f"removed {unfinished.name}, a checkpoint whose writing was cut short (it was never complete)")
    for ckpt in reversed(checkpoint_dirs(out)):
        if at_most is not None and int(ckpt.name[5:]) > at_most:
            aside = ckpt.with_name(f"{ckpt.name}.superseded-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(ckpt, aside)
            log(f"moved {ckpt.name} aside to {aside.name}: the metrics rows before it must be rewritten")
            continue
        try:
            state, loaded = load_checkpoint(ckpt, dtype, device)
        except CheckpointError as exc:
            bad.append(exc)
            aside = ckpt.with_name(f"{ckpt.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(ckpt, aside)
            log(f"warning: {exc}; moved it to {aside.name} and trying the previous checkpoint")
            continue
        if bad:
            log(f"resuming from {ckpt.name}, the newest intact checkpoint (updates after it are redone)")
        return ckpt, state, loaded
    if bad:
        raise ValueError(f"--resume: no intact checkpoint in {root}: " + "; ".join(str(e) for e in bad)
                         + " (the unreadable ones were moved aside, not deleted)")
    return None, None, None


def check_checkpoint_config(out: Path, ckpt: Path, state: dict, config: dict) -> None:
    """The settings a checkpoint was trained with (``trainer_state.pt`` stores them) are the truth:
    a ``config.json`` edited since, or other flags, are refused, naming the fields."""
    saved = state.get("config")
    if not isinstance(saved, dict):
        return
    saved = {**saved, **{k: v for k, v in legacy_fields(saved).items() if v is not None}}
    diff = config_diff(saved, config)
    if diff:
        raise ValueError(f"--resume: the settings of {Path(out) / 'config.json'} differ from those checkpoint "
                         f"{ckpt.name} was trained with: "
                         + ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
                         + " (restore them; a run continues with the settings it was made with)")


def _fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` and the folder itself to disk (before it is renamed into place)."""
    for p in [*folder.rglob("*"), folder]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_checkpoint(out: Path, step: int, keep: int, write_files: Callable[[Path], None]) -> Path:
    """Write the checkpoint of update ``step``: ``write_files(tmp)`` fills ``step-N.tmp``, which is
    flushed to disk and renamed to ``step-N``; then all but the newest ``keep`` checkpoints are
    removed. A write that fails (a full disk) removes its unfinished folder and raises
    :class:`CheckpointWriteError` naming the file and the free space; earlier checkpoints stay."""
    root = Path(out) / "checkpoints"
    final = root / f"step-{step:06d}"
    tmp = root / f"step-{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        write_files(tmp)
        _fsync_tree(tmp)  # complete on disk before it gets the name that says "complete"
    except (OSError, RuntimeError, SafetensorError) as exc:  # how a full disk surfaces, by writer
        shutil.rmtree(tmp, ignore_errors=True)
        free = shutil.disk_usage(out).free
        raise CheckpointWriteError(
            f"could not write the checkpoint of update {step} to {tmp}: {exc}; {free / 2**20:.0f} MiB free "
            f"there. The earlier checkpoints are intact: free space, then --resume") from None
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_dirs(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final
