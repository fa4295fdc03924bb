"""The group-mean, OPOB and OTB baselines on E2 (simulators.baselines), and otb_advantages' input checks.

The exact moments are checked against a brute-force Monte Carlo written here from the definitions (tokens
drawn position by position from pi_b, each baseline's formula in numpy), within 4 computed standard errors;
the leave-one-out gradient against the toolkit's IS surrogate; the on-policy bias against what theory says
of each baseline (the leave-one-out mean: unbiased; OPOB and OTB, computed from a group that holds the
sample itself: biased, by exactly grad J / G where every W of a group is equal)."""
import json
import math

import numpy as np
import pytest
import torch

from estimators.baselines import opob_advantages, otb_advantages
from schema.sources import ROOT
from simulators import baselines
from simulators.delay import static_behaviour
from simulators.delay_sweeps import make_instance
from simulators.peers import CASES, group_estimates, token_view


def _e2(delta):
    c = CASES["E2"]
    env, theta, _, u = make_instance(c["env"], c["instance"])
    return env, theta, static_behaviour(theta, delta, u), c["G"]


def _brute_force(env, theta, theta_b, G, n, seed):
    """``g`` of ``n`` groups drawn token by token from pi_b, each baseline from its formula (numpy only)."""
    rng = np.random.default_rng(seed)
    V, H = env.V, env.H
    pb = np.exp(theta_b) / np.exp(theta_b).sum(-1, keepdims=True)
    p = np.exp(theta) / np.exp(theta).sum(-1, keepdims=True)
    o = np.stack([rng.choice(V, size=(n, G), p=pb[h]) for h in range(H)], -1)  # (n, G, H)
    k = o @ (V ** np.arange(H - 1, -1, -1))  # lexicographic outcome index
    R = env.rewards[k]
    w = np.exp((np.log(p[np.arange(H), o]) - np.log(pb[np.arange(H), o])).sum(-1))
    S = np.zeros((n, G, H, H, V))  # score of token h sits in row h (position-factorised logits)
    S[..., np.arange(H), np.arange(H), :] = np.eye(V)[o] - p  # e_{o_h} - pi(. | h)
    S = S.reshape(n, G, H, H * V)
    s2 = (S**2).sum(-1)  # (n, G, H): ||grad log pi(o_h)||^2
    loo = R - (R.sum(-1, keepdims=True) - R) / (G - 1)
    W = w**2 * (S.sum(2) ** 2).sum(-1)
    opob = R - (W * R).sum(-1, keepdims=True) / (W.sum(-1, keepdims=True) + 1e-8)
    Wt = w[..., None] ** 2 * np.cumsum(s2, -1)
    otb = R[..., None] - (R[..., None] * Wt).sum(1, keepdims=True) / (Wt.sum(1, keepdims=True) + 1e-8)
    adv = {"loo": np.repeat(loo[..., None], H, -1), "opob": np.repeat(opob[..., None], H, -1), "otb": otb}
    return {b: np.einsum("ng,ngh,nghp->np", w, a, S) / G for b, a in adv.items()}


def test_exact_moments_agree_with_a_brute_force_monte_carlo():
    env, theta, theta_b, G = _e2(1.0)
    exact = baselines.exact_baseline_moments(env, theta, theta_b, G)
    grad_J = env.grad_J(theta).ravel()
    n = 40_000
    mc = _brute_force(env, theta, theta_b, G, n, seed=7)
    for b in baselines.BASELINES:
        g = mc[b]
        mean, se = g.mean(0), g.std(0, ddof=1) / math.sqrt(n)
        z = np.abs(mean - (exact[b]["bias_vec"] + grad_J)) / se
        assert z.max() < 4, (b, z)
        sq = (g**2).sum(-1)
        assert abs(sq.mean() - exact[b]["second_moment"]) < 4 * sq.std(ddof=1) / math.sqrt(n), b
    # the check has power: OPOB's and OTB's exact means lie many standard errors from the unbiased one
    se = (mc["loo"].std(0, ddof=1) / math.sqrt(n)).max()
    for b in ("opob", "otb"):
        assert np.abs(exact[b]["bias_vec"] - exact["loo"]["bias_vec"]).max() > 8 * se, b


def test_the_group_mean_gradient_is_the_toolkits_is_estimate():
    env, theta, theta_b, G = _e2(2.0)
    view = token_view(env, theta, theta_b)
    tuples = np.random.default_rng(0).integers(0, env.K, size=(50, G))
    ours = baselines.group_gradients(view, baselines.token_sum_pi_squared(env, theta), tuples)["loo"]
    np.testing.assert_allclose(ours, group_estimates(view, tuples, 0.2, "is"), rtol=0, atol=1e-12)


def test_otb_weights_are_the_token_scores_and_its_last_baseline_is_opob_on_e2():
    """E2's ``1 - 2 pi_t + sum pi^2`` is ``||grad log pi(o_t)||^2``, and with every token's score in its own row
    OTB's baseline at the last token is OPOB's b*."""
    env, theta, theta_b, G = _e2(1.0)
    view = token_view(env, theta, theta_b)
    s2 = baselines.token_sum_pi_squared(env, theta)
    np.testing.assert_allclose(1 - 2 * np.exp(view["lp"]) + s2, (view["tok_scores"] ** 2).sum(-1), atol=1e-14)
    tuples = np.random.default_rng(1).integers(0, env.K, size=(30, G))
    R = torch.from_numpy(view["rewards"][tuples])
    log_w = (view["lp"] - view["lpb"]).sum(-1)[tuples]
    H = env.H
    token_r = torch.zeros(30, G, H, dtype=torch.float64)
    token_r[..., -1] = R
    w = torch.from_numpy(np.exp(log_w))[..., None].expand(30, G, H)
    otb = otb_advantages(token_r, torch.ones_like(token_r), torch.from_numpy(view["lp"][tuples]),
                         torch.from_numpy(s2[tuples]), w)
    opob = opob_advantages(R, torch.from_numpy(log_w), torch.from_numpy((view["scores"][tuples] ** 2).sum(-1)),
                           norm_by_std=False, flat_zero=False)
    torch.testing.assert_close(otb[..., -1], opob, rtol=0, atol=1e-12)
    assert float((otb[..., 0] - opob).abs().max()) > 1e-3  # the earlier tokens' baselines differ


def test_on_policy_only_the_leave_one_out_mean_is_unbiased():
    """Delta = 0 (w = 1): the leave-one-out mean is unbiased (THEORY §1); OPOB and OTB are not (their baseline
    holds the sample's own reward). At the uniform policy every W of a group is equal, both are the group mean
    with the sample in it, and E g = (1 - 1/G) grad J (up to the 1e-8 in the denominator)."""
    env, theta, theta_b, G = _e2(0.0)
    res = baselines.exact_baseline_moments(env, theta, theta_b, G)
    grad_J = env.grad_J(theta).ravel()
    assert res["loo"]["bias_norm"] < 1e-12
    for b in ("opob", "otb"):  # found: 0.068 and 0.072, with ||grad J|| = 0.273
        assert res[b]["bias_norm"] > 0.2 * np.linalg.norm(grad_J), (b, res[b]["bias_norm"])
    zero = np.zeros_like(theta)
    res = baselines.exact_baseline_moments(env, zero, zero, G)
    grad_J = env.grad_J(zero).ravel()
    assert res["loo"]["bias_norm"] < 1e-12
    for b in ("opob", "otb"):
        np.testing.assert_allclose(res[b]["bias_vec"], -grad_J / G, rtol=0, atol=1e-8)


def test_the_committed_table_is_what_the_code_computes():
    path = ROOT / "results" / "sim" / "baselines" / "e2.json"
    committed = json.loads(path.read_text())
    assert committed["deltas"] == list(baselines.DELTAS) and committed["G"] == CASES["E2"]["G"]
    for old, new in zip(committed["rows"], baselines.e2_table(), strict=True):
        assert (old["Delta"], old["baseline"]) == (new["Delta"], new["baseline"])
        for key in ("bias_norm", "second_moment", "variance", "along", "grad_J_norm"):
            assert new[key] == pytest.approx(old[key], rel=1e-5, abs=1e-12), (old, key)


def _otb_inputs():
    x = torch.zeros(2, 3, 4, dtype=torch.float64)
    return [x, torch.ones_like(x), x - 0.5, x + 0.5]


@pytest.mark.parametrize("change,match", [
    (lambda a: a.__setitem__(0, torch.zeros(2, 3)), "token_rewards must have shape"),
    (lambda a: a.__setitem__(1, torch.ones(2, 3, 5)), "mask must have token_rewards' shape"),
    (lambda a: a[0].__setitem__((1, 2, 3), math.nan), r"token_rewards holds NaN \(first at index \(1, 2, 3\)\)"),
    (lambda a: a[2].__setitem__((0, 0, 0), math.nan), "old_log_probs holds NaN"),
    (lambda a: a[2].__setitem__((0, 0, 0), math.inf), "old_log_probs must be finite"),
    (lambda a: a[3].__setitem__((0, 1, 0), -0.5), "sum_pi_squared must be >= 0, got -0.5"),
    (lambda a: a[1].__setitem__((0, 1, 0), 0.5), "mask must hold 0 and 1 only, got 0.5"),
    (lambda a: a.append(torch.full((2, 3, 4), -1.0, dtype=torch.float64)), "is_weights must be >= 0"),
    (lambda a: a.append(torch.full((2, 3, 4), 1e200, dtype=torch.float64)), "overflows float64"),
])
def test_otb_refuses_bad_input(change, match):
    args = _otb_inputs()
    change(args)
    with pytest.raises(ValueError, match=match):
        otb_advantages(*args)


def test_otb_refuses_a_bad_denominator_guard_and_takes_minus_infinite_log_probs():
    args = _otb_inputs()
    for guard in (0.0, -1.0, math.nan, True):
        with pytest.raises(ValueError, match="denominator_guard must be a finite number > 0"):
            otb_advantages(*args, denominator_guard=guard)
    args[2][0, 0, 0] = -math.inf  # a token of probability 0: w_t = 1 + sum pi^2
    assert bool(torch.isfinite(otb_advantages(*args)).all())


def _opob_inputs(shape=(2, 4)):
    return [torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64),
            torch.ones(shape, dtype=torch.float64)]


def _set(i, index, value):
    return lambda a: a[i].__setitem__(index, value)


@pytest.mark.parametrize("fn, inputs, change, match", [
    (opob_advantages, lambda: _opob_inputs((2, 0)), None, r"rewards has shape \(2, 0\) .*G is 0"),
    (opob_advantages, lambda: _opob_inputs((0, 4)), None, r"rewards has shape \(0, 4\) .*prompts_per_step is 0"),
    (opob_advantages, _opob_inputs, _set(0, (1, 2), math.inf), r"rewards must be finite, got inf at index \(1, 2\)"),
    (opob_advantages, _opob_inputs, _set(2, (0, 3), -1.0), r"grad_sq_norms .* got -1.0 at index \(0, 3\)"),
    (otb_advantages, lambda: [torch.zeros(2, 0, 4)] * 4, None, r"shape \(2, 0, 4\) .*G is 0"),
    (otb_advantages, lambda: [torch.zeros(0, 3, 4)] * 4, None, r"shape \(0, 3, 4\) .*prompts_per_step is 0"),
    (otb_advantages, lambda: [torch.zeros(2, 3, 0)] * 4, None, r"shape \(2, 3, 0\) .*T is 0"),
    (otb_advantages, _otb_inputs, _set(2, (1, 2, 3), 0.25), (r"log-probability above 0 \(0.25\) at completion token "
                                                             r"\(1, 2, 3\)")),
    (otb_advantages, _otb_inputs, _set(3, (0, 1, 2), 1.5), r"sum_pi_squared holds 1.5 at completion token \(0, 1, 2\)"),
])
def test_a_baseline_refuses_an_empty_group_and_what_no_distribution_gives(fn, inputs, change, match):
    """OPOB and OTB: a 0 anywhere in the shape is a ValueError naming the shape (an IndexError from torch's max
    before); OTB's sampled-token log-probability above 0 or a sum of squared probabilities above 1 on a
    completion token is a ValueError naming the index (as dppo_tv refuses a log-probability above 0), and a
    non-finite reward or a negative norm of OPOB names its index."""
    args = inputs()
    if change is not None:
        change(args)
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_otb_reads_probabilities_only_on_completion_tokens_and_allows_their_rounding():
    """Padding may hold anything finite (a log-probability of 0.25, a sum of 1.5); a float32 sum of squared
    probabilities within :data:`estimators.baselines.PROBABILITY_ROUNDING` units of its epsilon above 1 is
    rounding, not a bad input; one ulp beyond that is refused. A group of one under OPOB's sample std
    (which has none) divides by nothing, and warns of nothing."""
    import warnings

    from estimators.baselines import PROBABILITY_ROUNDING

    args = _otb_inputs()
    args[1][1, 2, 3] = 0.0
    args[2][1, 2, 3], args[3][1, 2, 3] = 0.25, 1.5
    assert bool(torch.isfinite(otb_advantages(*args)).all())
    eps32 = torch.finfo(torch.float32).eps
    for excess, ok in ((PROBABILITY_ROUNDING * eps32, True), ((PROBABILITY_ROUNDING + 2) * eps32, False)):
        args = _otb_inputs()
        args[3] = args[3].float()
        args[3][0, 0, 0] = 1 + excess
        if ok:
            otb_advantages(*args)
        else:
            with pytest.raises(ValueError, match="at most 1"):
                otb_advantages(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = opob_advantages(torch.tensor([[1.0], [0.0]]), torch.zeros(2, 1), torch.ones(2, 1), flat_zero=False)
    assert torch.equal(one, torch.tensor([[1.0 - 1.0 / (1.0 + 1e-8)], [0.0]], dtype=torch.float64))  # R - b*


@pytest.mark.parametrize("call, match", [
    (lambda: opob_advantages([[0.0, 1.0]], torch.zeros(1, 2), torch.ones(1, 2)), "rewards must be a torch tensor"),
    (lambda: opob_advantages(*_opob_inputs(), norm_by_std="yes"), "norm_by_std must be true or false"),
    (lambda: opob_advantages(*_opob_inputs(), flat_zero=1), "flat_zero must be true or false"),
    (lambda: opob_advantages(*_opob_inputs(), norm_by_std=False, std="bessel"), "unknown opob std 'bessel'"),
    (lambda: otb_advantages([[[0.0]]], *_otb_inputs()[1:]), "token_rewards must be a torch tensor"),
    (lambda: otb_advantages(*_otb_inputs(), handle_zero_tail="x"), "handle_zero_tail must be true or false"),
])
def test_a_baseline_refuses_a_setting_or_an_input_of_the_wrong_kind(call, match):
    """A list where a tensor goes was an AttributeError; a flag that is not a boolean, or an unknown std with
    norm_by_std off, was accepted and read as truthy or ignored."""
    with pytest.raises(ValueError, match=match):
        call()
