"""Pieces both adapters share: the group-layout check and the metric names.

Kept free of torch, verl and TRL imports so that importing an adapter stays cheap.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from estimators.params import params_of
from schema.metrics import stale_metrics

# Diagnostics of :func:`estimators.diagnostics` (always on the raw, uncapped ratios) are
# logged with the trainer's names (:data:`schema.metrics.STALE`): ``stale/mass_cap_frac`` (GMC
# active: group mass > 1+eps), ``stale/clip_frac`` (trajectories with w > 1+eps), ``stale/ess``,
# ``stale/ess_min``, ``stale/mass_mean|max``, ``stale/gmc_lambda_mean``, ``stale/log_ratio_*``.
METRIC_NAMESPACE = "stale/"


def metric_names(diagnostics: dict[str, float], prefix: str = "") -> dict[str, float]:
    """``{prefix + name: value}`` for every diagnostic, named as the trainer names them (verl passes
    ``prefix="actor/"``)."""
    return stale_metrics(diagnostics, prefix)


def check_contiguous_groups(ids: Sequence[Any], group_size: int | None = None, where: str = "batch") -> int:
    """Check that rows form whole groups laid out contiguously; return the group size G.

    ``ids[k]`` is the group (prompt) id of row k. The layout every trajectory-level loss of
    :mod:`estimators.losses` assumes is: rows ``g*G .. g*G+G-1`` are the G completions of one
    prompt, every group has the same G, and no group appears twice. ``group_size=None``
    takes G as the number of rows with the first row's id.

    Raises ``ValueError`` naming the first offending rows and ids.
    """
    n = len(ids)
    if n == 0:
        raise ValueError(f"{where}: no rows")
    if group_size is None:
        group_size = sum(1 for x in ids if x == ids[0])
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{where}: group size G must be an integer >= 1, got {group_size!r}")
    if n % group_size:
        raise ValueError(
            f"{where}: {n} rows do not split into whole groups of G = {group_size}; "
            "a group must stay whole (keep every completion of a prompt in the same batch)"
        )
    seen: dict[Any, int] = {}
    for start in range(0, n, group_size):
        block = ids[start:start + group_size]
        first = block[0]
        for offset, other in enumerate(block):
            if other != first:
                raise ValueError(
                    f"{where}: rows {start}..{start + group_size - 1} should be one group of G = {group_size}, "
                    f"but row {start} has group id {first!r} and row {start + offset} has {other!r}: "
                    "the groups are split or not contiguous (something reordered the rows)"
                )
        if first in seen:
            raise ValueError(
                f"{where}: group id {first!r} occupies rows {seen[first]}.. and rows {start}..: "
                f"a group of more than G = {group_size} rows, or a group split in two"
            )
        seen[first] = start
    return group_size


def batch_options(estimator: str, given: dict | None, mask) -> dict:
    """The knobs ``estimator`` gets on one batch: ``given`` (the user's), and each knob that is a
    completion length (:attr:`estimators.params.Param.batch_length`: ``seq_geo_mask``'s ``L``) the user
    did not give, taken from the batch's completion mask ``mask`` (B, T): the number of completion
    tokens, which every completion of the batch must share (the geometric mean of verl's Geo-RS averages
    each response over its own tokens; one ``L`` is that rule only when every response has ``L`` tokens).
    Completions of several lengths are a ``ValueError`` naming the knob."""
    options = dict(given or {})
    for p in params_of(estimator):
        if p.batch_length and p.name not in options:
            counts = [int(c) for c in mask.sum(-1).tolist()]
            if len(set(counts)) != 1:
                raise ValueError(
                    f"{estimator}: its knob {p.name} ({p.symbol}, the tokens per completion its geometric mean "
                    f"averages over) comes from the batch when not set, but this batch's completions have "
                    f"{min(counts)} to {max(counts)} tokens; one {p.symbol} gives each its own mean only when all "
                    f"have the same length: set {p.name} explicitly (an approximation on completions of varying "
                    f"length)")
            options[p.name] = float(counts[0])
    return options
