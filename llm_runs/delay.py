"""Controlled delay: the rollouts of update t come from the snapshot theta_{t - d_t} (THEORY §1,
"Asynchrony"), kept in a ring of the last d+1 policy versions.

* ``fixed``: d_t = min(d, t); ``uniform``: d_t ~ U{0, .., d}, then capped at t. Before the
  ring is full (t < d) the oldest policy is theta_0, so staleness is at most t.
* One behaviour policy per update (THEORY's model); staleness t - version is recorded per
  sample all the same, so a source that mixes versions (the asynchronous worker) fits the
  same trainer.

A rollout source has ``batch(step, policy) -> RolloutBatch``, ``step_metrics() -> dict``
(extra metric columns of the last batch), ``state_dict()``, ``load_state_dict()`` and
``close()``; :func:`register_rollout_source` maps a ``mode`` to its class
(``llm_runs.async_rollout`` registers ``async``). A source that cannot deliver (a dead or
hung worker) raises :class:`RolloutSourceError`: the trainer checkpoints and stops.
"""
from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import torch

from .rollout import RolloutBatch, sample_groups, sample_keys
from .sources import RolloutSourceError, register_rollout_source  # noqa: F401  (RolloutSourceError: re-exported)


class SnapshotRing:
    """The last ``capacity`` policy versions, as detached parameter copies."""

    def __init__(self, capacity: int, device: str | torch.device = "cpu"):
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.device = device
        self._ring: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()

    def push(self, version: int, model) -> None:
        if self._ring and version <= next(reversed(self._ring)):
            raise ValueError(f"versions must increase: got {version} after {next(reversed(self._ring))}")
        self._ring[version] = {k: v.detach().to(self.device, copy=True) for k, v in model.state_dict().items()}
        while len(self._ring) > self.capacity:
            self._ring.popitem(last=False)

    def get(self, version: int) -> dict[str, torch.Tensor]:
        if version not in self._ring:
            raise KeyError(f"policy version {version} is not in the ring (holds {list(self._ring)})")
        return self._ring[version]

    def versions(self) -> list[int]:
        return list(self._ring)

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "snapshots": list(self._ring.items())}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = state["capacity"]
        self._ring = OrderedDict((v, {k: t.to(self.device) for k, t in sd.items()}) for v, sd in state["snapshots"])


def delay_at(config, step: int) -> int:
    """d_t for update ``step`` (deterministic in (seed, step))."""
    if config.delay_mode == "fixed":
        d = config.delay
    else:
        d = int(np.random.default_rng([config.seed, step, 0xDE1A]).integers(0, config.delay + 1))
    return min(d, step)


def prompts_at(config, step: int, pool_size: int) -> list[int]:
    """Indices into the training pool of the B prompts of update ``step`` (deterministic)."""
    rng = np.random.default_rng([config.seed, step, 0xB47C])
    B = config.prompts_per_step
    return rng.choice(pool_size, size=B, replace=B > pool_size).tolist()


class ControlledDelay:
    """Rollout source of ``mode = "controlled"``."""

    def __init__(self, config, task, tokenizer, max_new_tokens: int):
        self.config, self.task, self.tokenizer, self.max_new_tokens = config, task, tokenizer, max_new_tokens
        self.ring = SnapshotRing(config.delay + 1, config.device) if config.delay > 0 else None
        self._behaviour = None

    def behaviour_policy(self, policy, version: int, step: int):
        if version == step:
            return policy
        if self._behaviour is None:
            self._behaviour = copy.deepcopy(policy).eval()
            for p in self._behaviour.parameters():
                p.requires_grad_(False)
        self._behaviour.load_state_dict(self.ring.get(version))
        return self._behaviour

    def batch(self, step: int, policy) -> RolloutBatch:
        cfg = self.config
        if self.ring is not None:
            self.ring.push(step, policy)
        version = step - delay_at(cfg, step)
        model = self.behaviour_policy(policy, version, step)
        idx = prompts_at(cfg, step, len(self.task.train))
        keys = sample_keys(cfg.seed, step, len(idx), cfg.group_size)
        return sample_groups(model, self.tokenizer, self.task, [self.task.train[i] for i in idx], idx, cfg.group_size,
                             keys, version, self.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p)

    def step_metrics(self) -> dict:
        return {"stale/dropped": 0, "stale/dropped_total": 0}  # every sample is used

    def state_dict(self) -> dict:
        return {"ring": self.ring.state_dict() if self.ring is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if self.ring is not None:
            self.ring.load_state_dict(state["ring"])

    def close(self) -> None:
        pass


register_rollout_source("controlled", ControlledDelay)
