"""Group layout under verl 0.9.1's batch handling: the ``gmc_*`` advantage estimators group the
rows by prompt uid in any order, and verl's own ``trainer.balance_batch`` (the legacy
trainer's ``RayPPOTrainer._balance_batch``, run here on a one-controller batch) is harmless
with one data-parallel rank and refused, naming the uid, with several.

The rank's share is what verl's dispatcher hands each rank: ``DataProto.chunk(dp_size)``,
consecutive rows (``make_nd_compute_dataproto_dispatch_fn``). What the rank does with it is
the plugin's wrapper of ``TrainingWorker.train_batch`` around a stand-in method that records
the batch it receives.
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_integrations_verl import actor_config, snippet_overrides, verl_config
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu
from verl.workers.utils.losses import ppo_loss

import estimators
from llm_runs.integrations import verl as verl_integration
from llm_runs.integrations import verl_plugin  # noqa: F401 (importing it installs the plugin, as external_lib does)
from llm_runs.integrations._common import check_contiguous_groups

G, GROUPS, T = 4, 6, 9


@pytest.fixture(scope="module")
def actor():
    return actor_config(verl_config(snippet_overrides() + [f"actor_rollout_ref.rollout.n={G}"]))


def rollout(seed: int) -> DataProto:
    """A rollout batch as the legacy trainer holds it before balancing: each prompt repeated G
    times interleaved (``batch.repeat(interleave=True)``), responses of varied lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (GROUPS * G,), generator=g)
    attention = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.zeros(GROUPS * G, T, dtype=torch.float64)
    rewards[:, 0] = torch.rand(GROUPS * G, generator=g, dtype=torch.float64)
    uids = np.repeat(np.array([f"uid-{k}" for k in range(GROUPS)], dtype=object), G)
    return DataProto.from_dict(tensors={"attention_mask": attention, "response_mask": attention,
                                        "token_level_rewards": rewards, "row": torch.arange(GROUPS * G)},
                               non_tensors={"uid": uids})


def balance(batch: DataProto, dp_size: int) -> DataProto:
    """verl 0.9.1's own ``RayPPOTrainer._balance_batch`` (in place, as the trainer calls it)."""
    trainer = SimpleNamespace(_get_dp_size=lambda worker_group, role: dp_size, actor_rollout_wg=None)
    RayPPOTrainer._balance_batch(trainer, batch, metrics={})
    return batch


def advantages(name: str, batch: DataProto) -> torch.Tensor:
    fn = core_algos.get_adv_estimator_fn(name)
    adv, _ = fn(token_level_rewards=batch.batch["token_level_rewards"],
                response_mask=batch.batch["response_mask"].double(), index=batch.non_tensor_batch["uid"])
    return adv


class Rank:
    """A stand-in TrainingWorker: the plugin's loss set, ``train_batch`` wrapped by the plugin."""

    def __init__(self, actor):
        self.loss_fn = verl_integration.EngineLoss(partial(ppo_loss, config=actor), "gmc")
        self.received = None

    @verl_integration.engine._regrouping
    def train_batch(self, data):
        self.received = data
        return data


@pytest.mark.parametrize("name, kind", sorted(verl_integration.ADVANTAGE_ESTIMATORS.items()))
def test_estimators_group_rows_by_uid_in_any_order(name, kind):
    batch = rollout(seed=1)
    want = advantages(name, batch)
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(2))
    scattered = batch.select_idxs(order)
    with pytest.raises(ValueError, match="not contiguous|should be one group"):
        check_contiguous_groups(list(scattered.non_tensor_batch["uid"]))
    got = advantages(name, scattered)
    assert torch.allclose(got, want[order], atol=1e-12, rtol=0)
    scores = batch.batch["token_level_rewards"].sum(-1).reshape(GROUPS, G)
    per_row = estimators.advantages(scores, kind).reshape(-1)  # the core, on the interleaved groups
    assert torch.allclose(want, per_row[:, None] * batch.batch["response_mask"], atol=1e-12, rtol=0)
    if name == "gmc_grpo":  # verl's own grpo, on the scattered rows, agrees
        theirs, _ = core_algos.compute_grpo_outcome_advantage(
            scattered.batch["token_level_rewards"].float(), scattered.batch["response_mask"].float(),
            scattered.non_tensor_batch["uid"], epsilon=1e-6)
        assert torch.allclose(got.float(), theirs, atol=1e-5, rtol=0)


def test_balance_batch_with_one_rank_is_harmless(actor):
    batch = rollout(seed=3)
    want = advantages("gmc_loo", batch)
    balanced = balance(rollout(seed=3), dp_size=1)
    rows = balanced.batch["row"]
    assert sorted(rows.tolist()) == list(range(len(batch))) and rows.tolist() != list(range(len(batch)))
    with pytest.raises(ValueError, match="not contiguous|should be one group"):
        check_contiguous_groups(list(balanced.non_tensor_batch["uid"]))
    assert torch.allclose(advantages("gmc_loo", balanced), want[rows], atol=1e-12, rtol=0)
    (share,) = balanced.chunk(1)
    rank = Rank(actor)
    rank.train_batch(share.to_tensordict())
    received = list(tu.get(rank.received, "uid"))
    assert check_contiguous_groups(received, G) == G  # the rank trains on whole, contiguous groups
    assert sorted(tu.get(rank.received, "row").tolist()) == list(range(len(batch)))


@pytest.mark.parametrize("dp_size", [2, 3])
def test_balance_batch_with_several_ranks_is_refused_and_unbalanced_batches_pass(actor, dp_size):
    balanced = balance(rollout(seed=4), dp_size=dp_size)
    shares = balanced.chunk(dp_size)
    refused = 0
    for share in shares:
        sizes = [len(r) for r in verl_integration.rows_by_uid(list(share.non_tensor_batch["uid"])).values()]
        rank = Rank(actor)
        if all(n == G for n in sizes):
            rank.train_batch(share.to_tensordict())
            continue
        with pytest.raises(ValueError, match="split across data-parallel ranks.*trainer.balance_batch=False"):
            rank.train_batch(share.to_tensordict())
        assert rank.received is None
        refused += 1
    assert refused >= 1, "verl's balancing kept every group on one rank: the test batch does not exercise the split"
    for share in rollout(seed=4).chunk(dp_size):  # balance_batch=False: each rank holds whole groups
        rank = Rank(actor)
        rank.train_batch(share.to_tensordict())
        assert check_contiguous_groups(list(tu.get(rank.received, "uid")), G) == G
