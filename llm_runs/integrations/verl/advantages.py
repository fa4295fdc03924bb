"""The plugin's verl advantage estimators (``algorithm.adv_estimator=gmc_loo|gmc_grpo|gmc_drgrpo``):
:func:`estimators.advantages` per group of rows sharing a prompt uid, in any row order."""
from __future__ import annotations

from .losses import groups_not_of_size, rows_by_uid

ADVANTAGE_ESTIMATORS = {"gmc_loo": "loo", "gmc_grpo": "grpo", "gmc_drgrpo": "drgrpo"}
"""verl advantage-estimator name -> :func:`estimators.advantages` kind."""


def grouped_advantages(kind: str, token_level_rewards, response_mask, index=None, epsilon: float = 1e-6, **_):
    """:func:`estimators.advantages` of ``kind`` per group, the groups taken from ``index``.

    ``token_level_rewards`` (B, T) are summed per response; ``index`` (B,) holds the prompt
    uid of each row, in any row order (the rows of a uid need not be contiguous: verl's
    ``balance_batch`` reorders them before the advantages). Every uid must have the same
    number G of rows (``ValueError`` naming the uid otherwise). Returns
    ``(advantages, returns)``, both (B, T), the advantage repeated on every response token
    (verl's convention for outcome advantages), row for row as given. A response whose
    ``response_mask`` is empty (rejected by verl's ``rollout_rs``, which verl applies before the
    advantages) is left out of its group: the group's advantages are those of its k kept responses
    (THEORY §1 with G = k; 0 when k < 2), the rejected one's is 0.
    """
    import torch

    import estimators

    where = f"advantage estimator gmc_{kind}"
    if index is None:
        raise ValueError(f"{where} needs `index` (the prompt uid of every row)")
    ids = list(index)
    if len(ids) != token_level_rewards.shape[0]:
        raise ValueError(f"{where}: {len(ids)} prompt uids for {token_level_rewards.shape[0]} responses")
    if not ids:
        raise ValueError(f"{where}: no rows")
    rows = rows_by_uid(ids)
    first = next(iter(rows))
    G = len(rows[first])
    odd = groups_not_of_size(rows, G)
    if odd:
        uid, n = next(iter(odd.items()))
        raise ValueError(
            f"{where}: prompt uid {uid!r} has {n} rows but uid {first!r} has {G}: every group needs the same "
            f"number of responses (rollout.n); {len(odd)} of {len(rows)} groups differ"
        )
    order = torch.tensor([i for r in rows.values() for i in r], device=token_level_rewards.device)
    scores = token_level_rewards.detach().sum(-1).to(torch.float64)
    kept = response_mask.detach().bool().any(-1)[order].reshape(-1, G).cpu()
    with torch.no_grad():
        by_group = scores[order].reshape(-1, G)
        grouped = estimators.advantages(by_group, kind, delta=epsilon)
        for g in torch.nonzero(~kept.all(-1))[:, 0].tolist():  # a group with rejected responses (rollout_rs)
            keep = kept[g]
            grouped[g] = 0.0
            if int(keep.sum()) >= 2:  # over its kept responses only; one kept response has no baseline: 0
                grouped[g, keep] = estimators.advantages(by_group[g, keep][None], kind, delta=epsilon)[0]
        grouped = grouped.reshape(-1)
    adv = torch.empty_like(grouped)
    adv[order] = grouped
    adv = adv.to(token_level_rewards.dtype)[:, None] * response_mask.to(token_level_rewards.dtype)
    return adv, adv


def _gmc_loo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_loo: leave-one-out advantages (THEORY §1, the toolkit's canonical choice)."""
    return grouped_advantages("loo", token_level_rewards, response_mask, index, epsilon)


def _gmc_grpo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_grpo: (r - mean) / (std + epsilon), Bessel std, as verl's grpo."""
    return grouped_advantages("grpo", token_level_rewards, response_mask, index, epsilon)


def _gmc_drgrpo(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_drgrpo: r - mean (Dr. GRPO)."""
    return grouped_advantages("drgrpo", token_level_rewards, response_mask, index, epsilon)


def _gmc_opob(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kw):
    """gmc_opob: VCPO's OPOB, formed by the actor (recipe vcpo_exact): advantages 0 here, the rewards as returns."""
    from .opob import opob_returns

    return opob_returns(token_level_rewards, response_mask, index, epsilon)


_ESTIMATOR_FNS = {"gmc_loo": _gmc_loo, "gmc_grpo": _gmc_grpo, "gmc_drgrpo": _gmc_drgrpo, "gmc_opob": _gmc_opob}
