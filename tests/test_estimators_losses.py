"""Estimators' surrogate losses (estimators.losses.policy_loss): the gradient equals the closed form
hat g(c) for every registered scheme, finite and exact at huge log-ratios, the token-level baselines,
bad input."""

import numpy as np
import pytest
import torch
from conftest import _softmax_policy_batch
from test_estimators import ALL

from estimators import SCHEMES, advantages, weights
from estimators.losses import loss_names, policy_loss

# ----------------------------------------------------------------- surrogate gradient = closed form


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("scale", [0.05, 0.8])
def test_surrogate_gradient_equals_closed_form(name, scale):
    prompts_per_step, G, T, V, eps = 3, 4, 5, 3, 0.2
    theta0, theta_b, tokens, mask, rewards = _softmax_policy_batch(7, prompts_per_step, G, T, V, scale)
    theta = theta0.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1).gather(1, tokens.T).T  # (B, T)
    old_logp = torch.log_softmax(theta_b, -1).gather(1, tokens.T).T
    A = advantages(rewards, "loo")
    out = policy_loss(name, logp, old_logp, mask, A.reshape(-1), G, eps)
    (grad,) = torch.autograd.grad(out.loss, theta)
    # closed form: hat g(c) = mean over groups of (1/G) sum_i c_i A_i grad log pi(o_i)
    lr = (((logp - old_logp) * mask).sum(-1)).detach().reshape(prompts_per_step, G)
    c = weights(name, lr, eps, A).reshape(-1)
    pi = torch.softmax(theta0, -1)
    score = torch.nn.functional.one_hot(tokens, V).to(torch.float64) - pi[None]  # (B, T, V)
    score = (score * mask[..., None]).detach()
    g_hat = (c * A.reshape(-1))[:, None, None].mul(score).sum(0) / (prompts_per_step * G)
    torch.testing.assert_close(-grad, g_hat, rtol=1e-10, atol=1e-12)
    if SCHEMES[name].surrogate == "clamp":  # its value is the clamped surrogate min(w, 1+eps) A (TIC-mask)
        w = torch.exp(lr)
        torch.testing.assert_close(out.loss, -(torch.clamp(w, max=1 + eps) * A).mean())
    elif SCHEMES[name].bounded:
        torch.testing.assert_close(out.loss, -(c.reshape(prompts_per_step, G) * A).mean())


def test_surrogate_finite_and_exact_for_huge_log_ratios():
    # one group of G = 2: trajectory log-ratios 900 (token ratios e^900) and -3
    logp = torch.tensor([[0.0, 0.0], [-1.0, -5.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-900.0, 0.0], [-1.0, -2.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    A = torch.tensor([1.0, -1.0], dtype=torch.float64)
    lr = np.array([[900.0, -3.0]])
    for name in ("gmc", "tic_mask", "tic_trunc", "snis", "stale"):
        out = policy_loss(name, logp, old, mask, A, 2, 0.2)
        (g,) = torch.autograd.grad(out.loss, logp)
        assert torch.isfinite(g).all(), name
        c = weights(name, lr, 0.2)[0]  # float64 reference weights
        want = -(np.minimum(np.exp(np.minimum(lr[0], 50.0)), 1.2) * A.numpy()).mean() if name == "tic_mask" \
            else -(c * A.numpy()).mean()
        assert float(out.loss.detach()) == pytest.approx(want, rel=1e-12, abs=1e-12), name
    # TIC-mask drops the trajectory above the cap: no gradient reaches it
    (g,) = torch.autograd.grad(policy_loss("tic_mask", logp, old, mask, A, 2, 0.2).loss, logp)
    assert torch.all(g[0] == 0) and torch.any(g[1] != 0)


def test_token_level_baselines():
    prompts_per_step, G, T, V = 2, 4, 5, 3
    theta0, _theta_b, tokens, mask, rewards = _softmax_policy_batch(3, prompts_per_step, G, T, V, 0.01)
    theta = theta0.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1).gather(1, tokens.T).T
    old = torch.log_softmax(theta0, -1).gather(1, tokens.T).T.detach()  # on-policy: ratio 1, no clipping
    A = advantages(rewards, "grpo").reshape(-1)
    # on-policy, token clip (seq-mean-token-mean) has gradient mean_i A_i (1/|o_i|) grad log pi(o_i)
    (g_tok,) = torch.autograd.grad(policy_loss("token_clip", logp, old, mask, A, G, 0.2).loss, theta,
                                   retain_graph=True)
    pi = torch.softmax(theta0, -1)
    score = ((torch.nn.functional.one_hot(tokens, V).to(torch.float64) - pi[None]) * mask[..., None]).detach()
    expected = (A / mask.sum(-1))[:, None, None].mul(score).sum(0) / (prompts_per_step * G)
    torch.testing.assert_close(-g_tok, expected)
    # GSPO on-policy: gradient of s_i = exp(mean_t log r_t) is (1/|o_i|) grad log pi(o_i): the same
    (g_gspo,) = torch.autograd.grad(policy_loss("gspo", logp, old, mask, A, G, 3e-4).loss, theta)
    torch.testing.assert_close(-g_gspo, expected)
    assert set(loss_names()) >= set(ALL) | {"token_clip", "gspo"}


def test_loss_bad_input():
    logp = torch.zeros(6, 3, requires_grad=True)
    ok = {"old_logp": torch.zeros(6, 3), "mask": torch.ones(6, 3), "advantages": torch.zeros(6)}
    with pytest.raises(ValueError, match="does not split into groups of G = 4"):
        policy_loss("gmc", logp, group_size=4, eps=0.2, **ok)
    with pytest.raises(ValueError, match="unknown loss 'ppo'"):
        policy_loss("ppo", logp, group_size=3, eps=0.2, **ok)
    with pytest.raises(ValueError, match="old_logp must be a tensor of shape"):
        policy_loss("gmc", logp, torch.zeros(6, 2), ok["mask"], ok["advantages"], 3, 0.2)
    bad = torch.zeros(6, 3); bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"old_logp contains a non-finite value at completion token \(2, 1\)"):
        policy_loss("gmc", logp, bad, ok["mask"], ok["advantages"], 3, 0.2)
    m = torch.ones(6, 3); m[4] = 0
    with pytest.raises(ValueError, match="row 4 has an empty completion mask"):
        policy_loss("gmc", logp, ok["old_logp"], m, ok["advantages"], 3, 0.2)
    with pytest.raises(ValueError, match="eps must be > 0"):
        policy_loss("gmc", logp, group_size=3, eps=0.0, **ok)
