"""Which verl is installed and how its policy losses return: the plugin's version compatibility."""
from __future__ import annotations

import inspect
import typing

METRICS_STYLE = "metrics"  # (loss, {name: value})
TUPLE4_STYLE = "tuple4"  # (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)

INSTALL_HINT = (
    "verl is not installed; install it with its own dependencies, in an environment without TRL: "
    "pip install torch==2.13.0 -e '.[verl]' (verl 0.9.1, uvicorn, fastapi; `make setup-verl` builds .venv-verl)"
)


def _cfg(config, key, default=None):
    getter = getattr(config, "get", None)
    if getter is not None:
        return getter(key, default)
    return getattr(config, key, default)


def core_algos_or_none():
    """``verl.trainer.ppo.core_algos``, or None when verl itself is not installed.

    A verl that is installed but fails to import (a missing dependency) raises: hiding it
    would turn into a confusing "Unsupported loss mode" later.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "verl":
            return None
        raise
    return core_algos


def _style_of_annotation(ret) -> str | None:
    """Classify a return annotation as the metrics-dict or the 4-tensor style (None: unknown)."""
    if ret is None or ret is inspect.Signature.empty:
        return None
    if isinstance(ret, str):  # postponed annotations
        text = ret.replace(" ", "")
        if "dict" in text.lower():
            return METRICS_STYLE
        return TUPLE4_STYLE if text.count("Tensor") == 4 else None
    args = typing.get_args(ret)
    if len(args) == 2 and (args[1] is dict or typing.get_origin(args[1]) is dict):
        return METRICS_STYLE
    if len(args) == 4 and all("Tensor" in getattr(a, "__name__", str(a)) for a in args):
        return TUPLE4_STYLE
    return None


def return_style(core_algos) -> str:
    """Which return convention the installed verl's actor unpacks: ``"metrics"`` or ``"tuple4"``.

    Read from the registry's type ``core_algos.PolicyLossFn`` (``Callable[[...], ret]``) and
    from ``compute_policy_loss_vanilla``'s return annotation. Raises ``RuntimeError`` when
    neither tells, or when they disagree.
    """
    found = {}
    fn_type = getattr(core_algos, "PolicyLossFn", None)
    if fn_type is not None:
        args = typing.get_args(fn_type)
        if len(args) == 2:
            found["PolicyLossFn"] = _style_of_annotation(args[1])
    vanilla = getattr(core_algos, "compute_policy_loss_vanilla", None)
    if vanilla is not None:
        found["compute_policy_loss_vanilla"] = _style_of_annotation(inspect.signature(vanilla).return_annotation)
    styles = {s for s in found.values() if s is not None}
    if len(styles) == 1:
        return styles.pop()
    raise RuntimeError(
        "cannot tell whether this verl's policy losses return (loss, metrics) or a 4-tuple: "
        f"return annotations read {found or 'nothing'} (from core_algos.PolicyLossFn and "
        "compute_policy_loss_vanilla); refusing to guess"
    )
