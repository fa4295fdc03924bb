"""Published stale-rollout corrections as peers: the verl plugin and the TRL adapter list every scheme, and
the trainer takes two steps with each peer."""
from __future__ import annotations

import typing
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_peers import PEERS_TOKEN, PEERS_TRAJ

from estimators import SCHEMES, advantages
from estimators.losses import TOKEN_LOSSES, loss_names, policy_loss

# ----------------------------------------------------------------- the adapters list every scheme


def test_verl_plugin_registers_every_trajectory_scheme():
    from llm_runs.integrations import verl as verl_integration

    registry: dict = {}
    T = torch.Tensor
    fake = SimpleNamespace(POLICY_LOSS_REGISTRY=registry,
                           register_policy_loss=lambda name: (lambda fn: registry.setdefault(name, fn)),
                           PolicyLossFn=typing.Callable[[T, T, T, T, str, object], tuple[T, dict]])
    assert verl_integration.register(fake) == list(SCHEMES)
    assert set(PEERS_TRAJ) <= set(registry) == set(SCHEMES)
    g = torch.Generator().manual_seed(0)
    B, Tn, G = 8, 3, 4
    old = -torch.rand(B, Tn, generator=g, dtype=torch.float64)
    new = (old + 0.3 * torch.randn(B, Tn, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = torch.ones(B, Tn, dtype=torch.float64)
    rew = torch.tensor([[1.0, 0, 0, 1], [0, 1, 1, 1]], dtype=torch.float64)
    adv = advantages(rew, "loo").reshape(-1, 1) * mask
    cfg = SimpleNamespace(rollout_n=G, clip_ratio_high=0.2, shuffle=False, use_dynamic_bsz=False,
                          ppo_micro_batch_size_per_gpu=B, global_batch_info={"dp_size": 1, "global_batch_size": B})
    for name in PEERS_TRAJ:
        loss, metrics = registry[name](old, new, adv, mask, "token-mean", cfg, rollout_log_probs=old)
        ref = policy_loss(name, new, old, mask, adv[:, 0], G, 0.2)
        assert float(loss) == pytest.approx(float(ref.loss), rel=1e-12)
        assert "actor/stale/mass_cap_frac" in metrics  # schema.metrics names


def test_trl_adapter_accepts_every_loss_with_its_options():
    trl = pytest.importorskip("trl")  # noqa: F841
    from llm_runs.integrations import trl as adapter

    assert adapter.loss_names() == loss_names()
    assert set(SCHEMES) | set(TOKEN_LOSSES) == set(loss_names()) >= set(PEERS_TRAJ) | set(PEERS_TOKEN)
    import inspect

    assert {"estimator", "knobs"} <= set(inspect.signature(adapter.TrajectoryGRPOTrainer.__init__).parameters)


# ----------------------------------------------------------------- the trainer trains with each peer


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warmstart-cache-peers")


@pytest.mark.parametrize("name", PEERS_TRAJ + PEERS_TOKEN)
def test_trainer_takes_two_steps_with_each_peer(name, cache, tmp_path):
    from conftest import tiny

    from llm_runs.trainer import Trainer

    # 8 prompts x G = 4 over two updates: with the warm start's ~10% success rate some group has a nonzero
    # advantage on any machine (with 4 prompts, one machine's samples held no reward at all)
    cfg = tiny(cache, estimator=name, delay=1, steps=2, prompts_per_step=8, heldout_size=8, eval_train_size=0)
    trainer = Trainer(cfg, tmp_path / "run", progress=False, log=lambda m: None)
    trainer.run()
    import pandas as pd

    df = pd.read_csv(tmp_path / "run" / "metrics.csv")
    rows = df[df.step < cfg.steps]
    assert len(rows) == 2 and np.isfinite(rows["train/loss"]).all() and (rows["train/grad_norm"] > 0).any()
    assert (rows["train/update_skipped"] == 0).all()
    assert rows["stale/staleness_max"].tolist() == [0, 1]
    if name in PEERS_TOKEN:
        assert rows["train/weight_mean"].isna().all()
    else:
        assert rows["train/weight_mean"].notna().all()
