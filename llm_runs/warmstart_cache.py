"""The warm-start cache (``<cache_dir>/warmstart/<preset>-<key>/``, :func:`cache_root`): where it is, and why a
cached warm start cannot be used (unreadable, non-finite, edited, or not the committed one of its settings)."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from schema.io import loads_json

from .committed_warmstarts import weights_digest


def cache_root(cache_dir: str | os.PathLike) -> Path:
    """The warm-start cache folder a config's ``cache_dir`` names. The default (``results/cache``,
    the value recorded in run configs) is resolved now, under the results root
    (:func:`schema.results.results_root`, ``GMC_RESULTS``); any other value is taken as given."""
    from schema.results import results_root

    from .config import TrainConfig

    if str(cache_dir) == TrainConfig.__dataclass_fields__["cache_dir"].default:
        return results_root() / "cache"
    return Path(cache_dir)


def nonfinite_parameter(model) -> str | None:
    """The name of the first parameter holding a NaN or inf, or None."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


def cached_problem(path: Path) -> str | None:
    """Why the cached warm start in ``path`` cannot be used (None: it can): ``warmstart.json`` and
    every ``*.safetensors`` file must read whole, and every weight must be finite."""
    try:
        info = loads_json((path / "warmstart.json").read_text())
        if not isinstance(info, dict) or "heldout_acc" not in info:
            return "warmstart.json lacks its record"
    except (OSError, ValueError) as exc:
        return f"warmstart.json is unreadable ({type(exc).__name__})"
    files = sorted(path.glob("*.safetensors"))
    if not files:
        return "it holds no *.safetensors weights"
    from safetensors import safe_open

    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                for name in fh.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    if not bool(torch.isfinite(fh.get_tensor(name)).all()):
                        return f"{f.name}: weight {name} holds NaN or inf"
        except Exception as exc:  # noqa: BLE001 (SafetensorError, OSError from a truncated file)
            return f"{f.name} is unreadable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    return None


def cache_mismatch(path: Path, info: dict, committed: dict | None) -> str | None:
    """Why a readable cached warm start cannot be used (None: it can): its weights do not hash to its
    own record (an edited cache), or it is not the committed warm start of its settings."""
    digest = weights_digest(path)
    recorded = info.get("weights_sha256")
    if recorded and recorded != digest:
        return (f"its weights hash to {digest[:16]} but its warmstart.json records {str(recorded)[:16]}: the cache "
                "was edited or corrupted")
    if committed is not None and digest != committed["weights_sha256"]:
        return (f"its weights (sha256 {digest[:16]}, held-out pc {info.get('heldout_pc')!r}) are not the committed "
                f"warm start's ({committed['weights_sha256'][:16]}, pc {committed['heldout_pc']!r}): it was computed "
                "on a machine that rounds differently")
    return None
