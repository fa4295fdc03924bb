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
same on every rank. With one process (or no process group) the factor is
:func:`llm_runs.stepsize.step_scale` itself. A group whose ranks hold duplicated data (tensor or
sequence parallel replicas of one data shard) gives the same factor: duplicating every shard k times
multiplies ``sum w``, ``sum w^2``, ``N`` and both GMC sums by k, which cancels in both ratios.
"""
from __future__ import annotations

import math

import torch

from ..stepsize import ESS_GUARD, ess_scale, step_scale

N_STATS = 7
"""sum v, sum v^2, N, logsumexp log v, logsumexp 2 log v, sum_g lambda_g, number of groups."""


def _values(cfg, seq_log_ratio: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """What the ESS is taken of: the raw ratios, or the estimator's weights with ``ess_use_clipped``
    (as :func:`llm_runs.stepsize.step_scale`)."""
    if cfg.ess_use_clipped:
        if weights is None:
            raise ValueError(f"ess_use_clipped: estimator {cfg.estimator!r} gave no trajectory weights")
        return weights.detach().double().reshape(-1)
    return torch.exp(seq_log_ratio.detach().double().reshape(-1))


def local_statistics(cfg, seq_log_ratio: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
    """This rank's float64 vector of :data:`N_STATS` sums (zeros, logsumexps of -inf, for a rank that
    saw no sequence). ``seq_log_ratio`` has shape (prompts_per_step, G)."""
    out = torch.zeros(N_STATS, dtype=torch.float64)
    out[3] = out[4] = -math.inf
    if seq_log_ratio is None or seq_log_ratio.numel() == 0:
        return out
    if cfg.ess_scaling != "none":
        v = _values(cfg, seq_log_ratio, weights)
        out[0], out[1], out[2] = v.sum(), (v * v).sum(), float(v.numel())
        lv = torch.log(v)
        out[3], out[4] = torch.logsumexp(lv, 0), torch.logsumexp(2 * lv, 0)
    if cfg.gmc_step:
        import estimators

        lam = estimators.gmc_lambda(seq_log_ratio.detach().double(), cfg.eps).reshape(-1)
        out[5], out[6] = lam.sum(), float(lam.numel())
    return out


def scale_from_statistics(cfg, stats: torch.Tensor) -> dict[str, float]:
    """The step's factor from per-rank statistics ``stats`` (ranks, :data:`N_STATS`): the same keys as
    :func:`llm_runs.stepsize.step_scale` (``{}`` when no control is on)."""
    stats = stats.reshape(-1, N_STATS).double()
    out: dict[str, float] = {}
    scale = 1.0
    if cfg.ess_scaling != "none":
        s1, s2, n = (float(stats[:, k].sum()) for k in range(3))
        if n == 0:
            rho = 0.0
        elif math.isfinite(s1) and math.isfinite(s2):
            rho = s1 * s1 / (s2 + ESS_GUARD) / n
        else:  # sum w^2 overflows float64: the same quantity in log space (the 1e-8 is negligible there)
            rho = math.exp(float(2 * torch.logsumexp(stats[:, 3], 0) - torch.logsumexp(stats[:, 4], 0))) / n
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
    ratios."""
    if not _distributed(group):
        if seq_log_ratio is None:
            raise ValueError("step-size control: no ratios were recorded since the last optimiser step")
        return step_scale(cfg, seq_log_ratio, weights)
    import torch.distributed as dist

    mine = local_statistics(cfg, seq_log_ratio, weights)
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    mine = mine.to(device)
    table = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(table, mine, group=group)
    return scale_from_statistics(cfg, torch.stack(table).cpu())
