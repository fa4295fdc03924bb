"""otb_advantages equals verl 0.9.1's compute_optimal_token_baseline_advantage on fixed random batches: with and
without rollout IS weights, with and without handle_zero_tail, on ragged masks (groups with a unique longest
trajectory, so the zero tail applies, and groups whose longest length is tied, so it does not), a group of one
trajectory, and verl's rows in shuffled order (verl groups by index, the toolkit by the first axis)."""
import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_optimal_token_baseline_advantage

from llm_runs.stepsize import otb_advantages

LENGTHS = {  # (prompts_per_step, G) response lengths, T = 7
    "unique_longest": [[7, 3, 5, 2], [4, 4, 6, 1], [2, 2, 2, 2]],
    "tied_longest": [[7, 7, 3, 1], [5, 1, 5, 5], [6, 6, 6, 6]],
    "single": [[4], [7], [1]],
}


def _batch(seed: int, lengths):
    g = torch.Generator().manual_seed(seed)
    L = torch.tensor(lengths)
    n, G = L.shape
    T = 7
    mask = (torch.arange(T)[None, None, :] < L[..., None]).double()
    rewards = torch.randn(n, G, T, generator=g, dtype=torch.float64) * (torch.rand(n, G, T, generator=g) < 0.4)
    rewards[torch.arange(n)[:, None], torch.arange(G)[None, :], L - 1] += torch.rand(n, G, generator=g,
                                                                                     dtype=torch.float64)
    logp = -torch.rand(n, G, T, generator=g, dtype=torch.float64) * 3
    # sum_v pi_v^2 of a distribution holding the sampled token's pi_t: at least pi_t^2, at most 1
    pi = logp.exp()
    s2 = pi**2 + (1 - pi) ** 2 * torch.rand(n, G, T, generator=g, dtype=torch.float64)
    rho = torch.exp(torch.randn(n, G, 1, generator=g, dtype=torch.float64) * 0.7).expand(n, G, T) * mask
    return rewards, mask, logp, s2, rho


def _verl(rewards, mask, logp, s2, rho, zero_tail, seed):
    n, G, T = rewards.shape
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(n * G))
    flat = [None if x is None else x.reshape(n * G, T)[perm] for x in (rewards, mask, logp, s2, rho)]
    index = np.repeat(np.array([f"p{k}" for k in range(n)], dtype=object), G)[perm.numpy()]
    adv, _ = compute_optimal_token_baseline_advantage(flat[0], flat[1], index, flat[2], flat[3],
                                                      rollout_is_weights=flat[4], handle_zero_tail=zero_tail)
    out = torch.empty_like(adv)
    out[perm] = adv
    return out.reshape(n, G, T)


@pytest.mark.parametrize("layout", sorted(LENGTHS))
@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_otb_advantages_equal_verl(layout, with_is, zero_tail, seed):
    rewards, mask, logp, s2, rho = _batch(seed, LENGTHS[layout])
    rho = rho if with_is else None
    ours = otb_advantages(rewards, mask, logp, s2, rho, handle_zero_tail=zero_tail)
    ref = _verl(rewards, mask, logp, s2, rho, zero_tail, seed)
    assert ours.shape == rewards.shape
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)


def test_the_zero_tail_and_the_is_weights_change_the_advantages():
    """The cases above would not tell a missing zero tail or ignored IS weights from verl's rule."""
    rewards, mask, logp, s2, rho = _batch(0, LENGTHS["unique_longest"])
    tail = otb_advantages(rewards, mask, logp, s2, handle_zero_tail=True)
    none = otb_advantages(rewards, mask, logp, s2, handle_zero_tail=False)
    changed = (tail - none).abs() > 1e-6
    assert bool(changed[0, 0, 5:].all()) and bool(changed[1, 2, 4:6].all())  # past the second-longest length
    assert int(changed.sum()) == 2 + 2  # nowhere else (group 2's lengths are tied)
    assert float((otb_advantages(rewards, mask, logp, s2, rho) - tail).abs().max()) > 1e-3
