"""One step rate across data-parallel ranks: the statistics of the step-size controls
(:func:`llm_runs.stepsize.step_scale`) summed over every rank's share of the update before the factor
is formed, so that every replica steps at the same rate.

VCPO all-gathers ``(sum_i w_i, sum_i w_i^2, N)`` over the data-parallel group and forms
``rho_ess = (sum w)^2 / ((sum w^2 + 1e-8) N)`` from the totals (Huang et al. 2026, arXiv 2602.17616,
Sec. 4; mit-han-lab/vcpo ``recipe/fully_async_policy/staleness_utils.py:compute_ess_info``, whose sums
are taken over the gathered mini-batch). GMC's step form ``s_t = (1/B) sum_g lambda_g`` is a mean over
the update's B groups: every rank contributes ``(sum_g lambda_g, its number of groups)``.

Each rank computes :func:`local_statistics` on its own ratios, the vectors are all-gathered
(:func:`synced_step_scale`) and :func:`scale_from_statistics` forms the factor from their sum, the
same on every rank and the factor of :func:`llm_runs.stepsize.step_scale` on the union batch (to the
rounding of summing by rank): where ``sum w^2`` overflows, the ratio is taken from each rank's
log-sum-exps of the log-ratios themselves, combined by one more log-sum-exp (a log-ratio of 800 gives
the ratio one process gives, not ``inf / inf``), and a weight that is NaN or infinite on any rank gives
every rank the limit ``1/N``. A rank whose input is refused (a non-finite log-ratio under GMC's step
form) sends a flag with its statistics instead of raising before the collective, and every rank raises
the same ValueError naming that rank and value. With one process (or no process group) the factor is
:func:`llm_runs.stepsize.step_scale` itself. A group whose ranks hold duplicated data (tensor or
sequence parallel replicas of one data shard) gives the same factor: duplicating every shard k times
multiplies ``sum w``, ``sum w^2``, ``N`` and both GMC sums by k, which cancels in both ratios.
"""
from __future__ import annotations

import math

import torch

from ..stepsize import ESS_GUARD, check_step_inputs, ess_scale, step_scale

N_STATS = 12
"""sum v, sum v^2, N, logsumexp log v, logsumexp 2 log v, sum_g lambda_g, number of groups, whether a log v is
NaN or +inf (the ESS ratio's limit 1/N), and a refused input: its flag, the value, its row and column."""
STAT_LIMIT, STAT_REFUSED, STAT_VALUE, STAT_ROW, STAT_COL = 7, 8, 9, 10, 11
REFUSED_LOG_RATIO, REFUSED_WEIGHT, REFUSED_OTHER = 1.0, 2.0, 3.0
"""What a rank's refused input was: a non-finite log-ratio, a non-finite weight, or something else (no value)."""


def _log_values(cfg, seq_log_ratio: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The logs of what the ESS is taken of, as :func:`llm_runs.stepsize.step_scale` forms them: the
    log-ratios themselves (a log-ratio of 800 stays 800, never ``log(exp(800)) = inf``), or, with
    ``ess_use_clipped``, the logs of the estimator's weights."""
    if cfg.ess_use_clipped:
        if weights is None:
            raise ValueError(f"ess_use_clipped: estimator {cfg.estimator!r} gave no trajectory weights")
        return torch.log(weights.detach().double().reshape(-1))
    return seq_log_ratio.detach().double().reshape(-1)


def local_statistics(cfg, seq_log_ratio: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
    """This rank's float64 vector of :data:`N_STATS` sums (zeros, logsumexps of -inf, for a rank that
    saw no sequence). ``seq_log_ratio`` has shape (prompts_per_step, G). A bad input raises here, as
    :func:`llm_runs.stepsize.step_scale` does (:func:`synced_step_scale` tells every rank first)."""
    out = torch.zeros(N_STATS, dtype=torch.float64)
    out[3] = out[4] = -math.inf
    if seq_log_ratio is None:
        return out
    check_step_inputs(cfg, seq_log_ratio, weights)
    if seq_log_ratio.numel() == 0:
        return out
    if cfg.ess_scaling != "none":
        lv = _log_values(cfg, seq_log_ratio, weights)
        v = torch.exp(lv) if not cfg.ess_use_clipped else weights.detach().double().reshape(-1)
        out[0], out[1], out[2] = v.sum(), (v * v).sum(), float(v.numel())
        out[STAT_LIMIT] = float(not bool((torch.isfinite(lv) | (lv == -math.inf)).all()))
        if not out[STAT_LIMIT]:
            out[3], out[4] = torch.logsumexp(lv, 0), torch.logsumexp(2 * lv, 0)
    if cfg.gmc_step:
        import estimators

        lam = estimators.gmc_lambda(seq_log_ratio.detach().double(), cfg.eps).reshape(-1)
        out[5], out[6] = lam.sum(), float(lam.numel())
    return out


def refused_statistics(cfg, seq_log_ratio: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
    """The :data:`N_STATS` vector of a rank whose input :func:`local_statistics` refused: the flag, and the
    first negative weight (with ``ess_use_clipped``) or non-finite log-ratio with its row and column where
    there is one, so that every rank can name it."""
    out = torch.zeros(N_STATS, dtype=torch.float64)
    out[STAT_REFUSED], out[STAT_VALUE] = REFUSED_OTHER, math.nan
    named = [(REFUSED_LOG_RATIO, seq_log_ratio, lambda x: ~torch.isfinite(x))]
    if cfg.ess_scaling != "none" and cfg.ess_use_clipped:
        named.insert(0, (REFUSED_WEIGHT, weights, lambda x: x < 0))
    for code, x, is_bad in named:
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            continue
        x = x.detach().double().reshape(x.shape[0] if x.ndim else 1, -1)
        bad = is_bad(x)
        if bool(bad.any()):
            row, col = (int(i) for i in torch.nonzero(bad)[0])
            out[STAT_REFUSED], out[STAT_VALUE], out[STAT_ROW], out[STAT_COL] = code, x[row, col], row, col
            break
    return out


def _refusal(stats: torch.Tensor) -> str | None:
    """The one message every rank raises when a rank's input was refused (None when none was)."""
    parts = []
    for rank, row in enumerate(stats):
        code = float(row[STAT_REFUSED])
        if code == 0:
            continue
        if code in (REFUSED_LOG_RATIO, REFUSED_WEIGHT):
            name = "seq_log_ratio" if code == REFUSED_LOG_RATIO else "weights"
            parts.append(f"rank {rank}'s {name}[{int(row[STAT_ROW])}, {int(row[STAT_COL])}] = "
                         f"{float(row[STAT_VALUE])}")
        else:
            parts.append(f"rank {rank}'s input (its own error says why)")
    if not parts:
        return None
    return (f"step-size control across {len(stats)} ranks: {'; '.join(parts)} refused, so no rank steps (the "
            f"log-ratios must be finite where the control reads them, and the weights of ess_use_clipped >= 0)")


def scale_from_statistics(cfg, stats: torch.Tensor) -> dict[str, float]:
    """The step's factor from per-rank statistics ``stats`` (ranks, :data:`N_STATS`): the same keys and values
    as :func:`llm_runs.stepsize.step_scale` on the union of the ranks' ratios (``{}`` when no control is on),
    the limit ``1/N`` where a value is NaN or +inf and the log-space form where the sums overflow included.
    A rank's refused input (:func:`refused_statistics`) is a ValueError naming that rank and value."""
    stats = stats.reshape(-1, N_STATS).double()
    refused = _refusal(stats)
    if refused is not None:
        raise ValueError(refused)
    out: dict[str, float] = {}
    scale = 1.0
    if cfg.ess_scaling != "none":
        s1, s2, n = (float(stats[:, k].sum()) for k in range(3))
        if n == 0:
            raise ValueError("ESS scaling: no sequence was seen on any rank since the last optimiser step: there is "
                             "no ratio to scale the step by")
        if math.isfinite(s1) and math.isfinite(s2):
            rho = s1 * s1 / (s2 + ESS_GUARD) / n
        elif bool(stats[:, STAT_LIMIT].any()):  # a weight that is infinite or not a number: the limit
            rho = 1.0 / n
        else:  # sum w^2 overflows float64: the same quantity in log space (the 1e-8 is negligible there)
            rho = math.exp(float(2 * torch.logsumexp(stats[:, 3], 0) - torch.logsumexp(stats[:, 4], 0))) / n
            rho = rho if math.isfinite(rho) else 1.0 / n
        out["step/ess_ratio"] = rho
        scale *= ess_scale(cfg.ess_scaling, rho, cfg.ess_base_ratio)
    if cfg.gmc_step:
        groups = float(stats[:, 6].sum())
        if groups == 0:
            raise ValueError("GMC's step form: no group was seen on any rank since the last optimiser step")
        g = float(stats[:, 5].sum()) / groups
        out["step/gmc_scale"] = g
        scale *= g
    if out:
        out["step/lr_scale"] = scale
    return out


def _distributed(group) -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def synced_step_scale(cfg, seq_log_ratio: torch.Tensor | None, weights: torch.Tensor | None,
                      group=None) -> dict[str, float]:
    """:func:`llm_runs.stepsize.step_scale` over the union of every rank's ratios in the process group
    ``group`` (None: the default group). Every rank of the group must call it at the same step (a
    collective). Outside a process group of more than one rank it is ``step_scale`` on this process's
    ratios. A rank whose input is refused (a NaN log-ratio under GMC's step form) does not raise before the
    collective: its flag travels with the statistics, and every rank raises the same ValueError naming it
    (the refusing rank's own error chained), so no peer waits on a rank that left."""
    if not _distributed(group):
        if seq_log_ratio is None:
            raise ValueError("step-size control: no ratios were recorded since the last optimiser step")
        return step_scale(cfg, seq_log_ratio, weights)
    import torch.distributed as dist

    own_error = None
    try:
        mine = local_statistics(cfg, seq_log_ratio, weights)
    except ValueError as exc:
        own_error, mine = exc, refused_statistics(cfg, seq_log_ratio, weights)
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    mine = mine.to(device)
    table = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(table, mine, group=group)
    try:
        return scale_from_statistics(cfg, torch.stack(table).cpu())
    except ValueError as exc:
        raise ValueError(str(exc)) from own_error
