"""Published stale-rollout corrections as peers: hand-derived values, surrogate gradients against
their closed forms, the papers' defaults, bad knobs, the adapters' registries and the trainer."""
from __future__ import annotations

import dataclasses
import math
import typing
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import _softmax_policy_batch

import estimators
from estimators import PARAMS, SCHEMES, advantages, weights
from estimators.losses import TOKEN_LOSSES, check_options, loss_names, m2po_keep_mask, policy_loss
from llm_runs.config import TrainConfig, config_fields

PEERS_TRAJ = ("topr", "seq_tis", "seq_tis_bn", "seq_mis", "seq_geo_mask", "vespo")
PEERS_TOKEN = ("m2po", "cispo", "opsm", "icepop", "sapo", "dppo_tv")


# ----------------------------------------------------------------- hand-derived values


def test_topr_hand_values():
    # w = (3, 0.5, 2, 0.25), A = (+1, 0, -1, -1): A >= 0 -> c = 1 (the ratio is ignored);
    # A < 0 -> c = min(w, 1): min(2, 1) = 1, min(0.25, 1) = 0.25
    lr = np.log([[3.0, 0.5, 2.0, 0.25]])
    A = np.array([[1.0, 0.0, -1.0, -1.0]])
    np.testing.assert_allclose(weights("topr", lr, 0.2, A), [[1.0, 1.0, 1.0, 0.25]], rtol=1e-15)
    with pytest.raises(ValueError, match="needs `advantages`"):
        weights("topr", lr, 0.2)


def test_seq_tis_truncates_without_normalising():
    from estimators import SCHEMES

    lr = np.log([[3.0, 1.0, 0.5, 10.0]])
    np.testing.assert_allclose(weights("seq_tis", lr, 0.2), [[2.0, 1.0, 0.5, 2.0]], rtol=1e-14)
    np.testing.assert_allclose(weights("seq_tis", lr, 0.2, C=8.0), [[3.0, 1.0, 0.5, 8.0]], rtol=1e-14)
    assert SCHEMES["seq_tis"].sup_mass(0.2, 4, C=8.0) == 8.0 and not SCHEMES["seq_tis"].in_class


def test_seq_tis_bn_normalises_over_the_batch_not_the_group():
    # two groups, C = 2: min(w, 2) = (2, 1, .5, .25 | 1, 1, 1, 1); batch mean 7.75/8 = 0.96875,
    # so c = min(w, 2) / 0.96875; the first group's mass is 3.75/4/0.96875 = 0.9677..., the
    # second 1/0.96875 = 1.0322...; the batch mass is exactly 1
    lr = np.log([[3.0, 1.0, 0.5, 0.25], [1.0, 1.0, 1.0, 1.0]])
    c = weights("seq_tis_bn", lr, 0.2)
    t = np.array([[2.0, 1.0, 0.5, 0.25], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(c, t / 0.96875, rtol=1e-14)
    assert c.mean() == pytest.approx(1.0, rel=1e-14)
    # one group alone: SNIS of the truncated ratios (mass exactly 1)
    np.testing.assert_allclose(weights("seq_tis_bn", lr[:1], 0.2), t[:1] / t[0].mean(), rtol=1e-14)
    # C is a knob; torch agrees
    np.testing.assert_allclose(weights("seq_tis_bn", lr, 0.2, C=3.0), np.minimum(np.exp(lr), 3) / (8.75 / 8),
                               rtol=1e-14)
    np.testing.assert_allclose(weights("seq_tis_bn", torch.from_numpy(lr), 0.2).numpy(), c, rtol=1e-14)
    # the per-group mass approaches the number of groups B when the other groups' ratios vanish
    B = 4
    lr_b = np.full((B, 2), math.log(1e-12))
    lr_b[0] = 0.0
    assert weights("seq_tis_bn", lr_b, 0.2)[0].mean() == pytest.approx(B, rel=1e-9)


def test_seq_mis_hand_values():
    # w = (3, 1, 0.5, 0.25, 2): kept iff 0.5 <= w <= 2 -> (0, 1, 0.5, 0, 2)
    lr = np.log([[3.0, 1.0, 0.5, 0.25, 2.0]])
    np.testing.assert_allclose(weights("seq_mis", lr, 0.2), [[0.0, 1.0, 0.5, 0.0, 2.0]], rtol=1e-14)
    np.testing.assert_allclose(weights("seq_mis", lr, 0.2, lo=0.0, hi=1.0), [[0, 1, 0.5, 0.25, 0]], rtol=1e-14)


def _tokens(log_r, A):
    """(B, T) logp leaf with old_logp = logp - log_r; one group of B rows."""
    log_r = torch.tensor(log_r, dtype=torch.float64)
    logp = torch.full_like(log_r, -1.0).requires_grad_(True)
    return logp, (logp - log_r).detach(), torch.ones_like(log_r), torch.tensor(A, dtype=torch.float64)


def test_m2po_mask_and_gradient_hand_values():
    # log r = (0.5, -0.1 | 0.05, 0): (log r)^2 = (.25, .01 | .0025, 0), mean .065625 > tau = .04;
    # masking the largest leaves (.01 + .0025 + 0)/3 = .00417 <= .04: one token masked.
    # J = (1/4) sum_t M_t r_t A: d(-J)/d logp_t = -M_t r_t A / 4
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -2.0])
    keep = m2po_keep_mask(logp - old, m, 0.04)
    np.testing.assert_array_equal(keep.numpy(), [[0, 1], [1, 1]])
    out = policy_loss("m2po", logp, old, m, A, 2, 0.2)
    (g,) = torch.autograd.grad(out.loss, logp)
    r = np.exp([[0.5, -0.1], [0.05, 0.0]])
    expected = -np.array([[0, 1], [1, 1]]) * r * np.array([[1.0], [-2.0]]) / 4
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-14)
    assert out.metrics["token_clip_frac"] == 0.25 and out.metrics["m2po_m2"] == pytest.approx(0.065625)
    # tau above the batch M2: nothing masked; every token above tau: everything masked
    assert m2po_keep_mask(logp - old, m, 0.07).sum() == 4
    logp2, old2, m2, _ = _tokens([[0.5, -0.5], [0.6, 0.7]], [1.0, -2.0])
    assert m2po_keep_mask(logp2 - old2, m2, 0.04).sum() == 0


def test_cispo_gradient_hand_values():
    # r = (e^0.5, e^-0.1 | e^0.05, 1); clip to [1 - 10, 1 + 0.2]: (1.2, e^-0.1 | e^0.05, 1);
    # J = (1/4) sum_t sg(clip r_t) A log pi_t: d(-J)/d logp_t = -clip(r_t) A / 4
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -2.0])
    out = policy_loss("cispo", logp, old, m, A, 2, 0.2)
    (g,) = torch.autograd.grad(out.loss, logp)
    w = np.array([[1.2, math.exp(-0.1)], [math.exp(0.05), 1.0]])
    np.testing.assert_allclose(g.numpy(), -w * np.array([[1.0], [-2.0]]) / 4, rtol=1e-14)
    assert out.metrics["token_clip_frac"] == 0.25
    # a finite lower clip: eps_low = 0.05 lifts e^-0.1 to 0.95
    out = policy_loss("cispo", logp, old, m, A, 2, 0.2, eps_low=0.05)
    (g,) = torch.autograd.grad(out.loss, logp)
    assert float(g[0, 1]) == pytest.approx(-0.95 / 4, rel=1e-14)


def test_opsm_drops_only_negative_and_far_sequences():
    # rows: A = (-1, -1, +1, +1) (one group, zero-sum); mean_t log(pi_b/pi_theta) = -mean log r
    # = (0.6, 0.4, 0.9, 0.0): row 0 dropped (A < 0 and 0.6 > 0.5), row 1 kept (0.4 <= 0.5),
    # row 2 kept (A > 0); with no token clipped, -d loss/d logp_t = keep_i r_t A_i / (|o_i| B)
    log_r = [[-0.6, -0.6], [-0.4, -0.4], [-0.9, -0.9], [0.0, 0.0]]
    logp, old, m, A = _tokens(log_r, [-1.0, -1.0, 1.0, 1.0])
    out = policy_loss("opsm", logp, old, m, A, 4, 10.0)  # eps = 10: the token clip never binds
    (g,) = torch.autograd.grad(out.loss, logp)
    keep = np.array([0.0, 1.0, 1.0, 1.0])[:, None]
    expected = -keep * np.exp(log_r) * np.array([-1.0, -1.0, 1.0, 1.0])[:, None] / (2 * 4)
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-14)
    assert out.metrics["seq_clip_frac"] == 0.25
    out = policy_loss("opsm", logp, old, m, A, 4, 10.0, delta=0.3)  # now row 1 goes too
    assert out.metrics["seq_clip_frac"] == 0.5


def test_gspo_uses_its_own_clip_range_not_eps():
    # s = exp(mean_t log r): e^0.001 > 1 + 4e-4 with A > 0 and e^-0.001 < 1 - 3e-4 with A < 0: both
    # clipped by GSPO's default range whatever eps is (the trainer's eps = 0.2 once leaked in as
    # the lower clip); with eps_high = 0.01 only the second is
    logp, old, m, A = _tokens([[0.001, 0.001], [-0.001, -0.001]], [1.0, -1.0])
    for eps in (0.2, 3e-4):
        assert policy_loss("gspo", logp, old, m, A, 2, eps).metrics["seq_clip_frac"] == 1.0
    assert policy_loss("gspo", logp, old, m, A, 2, 0.2, eps_high=0.01).metrics["seq_clip_frac"] == 0.5


# ----------------------------------------------------------------- surrogate gradient = closed form


def _policy(scale, seed=11, prompts_per_step=3, G=4, T=5, V=3):
    theta0, theta_b, tokens, mask, rewards = _softmax_policy_batch(seed, prompts_per_step, G, T, V, scale)
    theta = theta0.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1).gather(1, tokens.T).T
    old = torch.log_softmax(theta_b, -1).gather(1, tokens.T).T
    score = ((torch.nn.functional.one_hot(tokens, V).to(torch.float64) - torch.softmax(theta0, -1)[None])
             * mask[..., None]).detach()  # (B, T, V): grad of log pi(o_t) in row t
    A = advantages(rewards, "loo").reshape(-1)
    return theta, logp, old, mask, A, score, G


@pytest.mark.parametrize("scale", [0.05, 0.8])
@pytest.mark.parametrize("name", PEERS_TOKEN)
def test_token_peer_gradient_equals_closed_form(name, scale):
    theta, logp, old, mask, A, score, G = _policy(scale)
    log_r = ((logp - old) * mask).detach()
    r = torch.exp(log_r)
    if name == "cispo":  # (1/N) sum_{i,t} clip(r) A_i s_t
        coef = torch.clamp(r, 1 - 10.0, 1.2) * A[:, None] * mask / mask.sum()
    elif name == "m2po":  # (1/N) sum_{i,t} M r A_i s_t, M from the batch second moment
        coef = m2po_keep_mask(log_r, mask, 0.04) * r * A[:, None] * mask / mask.sum()
        assert 0 < float(m2po_keep_mask(log_r, mask, 0.04).sum()) <= float(mask.sum())
    elif name == "icepop":  # (1/B) sum_i (1/|o_i|) sum_t r 1{0.5 <= r <= 5} A_i s_t
        inside = (r >= 0.5) & (r <= 5.0)
        coef = inside * r * A[:, None] * mask / mask.sum(-1, keepdim=True) / len(A)
    elif name == "sapo":  # (1/B) sum_i (1/|o_i|) sum_t 4 sigmoid(x) sigmoid(-x) r A_i s_t, x = tau (r - 1)
        tau = torch.where(A[:, None] > 0, torch.ones_like(r), torch.full_like(r, 1.05))
        x = tau * (r - 1)
        gate_slope = 4 * torch.sigmoid(x) * torch.sigmoid(-x) * r
        coef = gate_slope * A[:, None] * mask / mask.sum(-1, keepdim=True) / len(A)
    elif name == "dppo_tv":  # (1/N) sum_{i,t} 1{TV mask} min(r, 1e4) A_i s_t
        diff = torch.exp(logp.detach()) - torch.exp(old)
        valid = torch.where(A[:, None] > 0, diff <= 0.15, diff >= -0.15)
        coef = valid * torch.clamp(r, max=1e4) * A[:, None] * mask / mask.sum()
        assert 0 < int(valid.sum()) < valid.numel() or scale < 0.1
    else:  # opsm: (1/B) sum_i keep_i (1/|o_i|) sum_t r 1{unclipped} A_i s_t
        kl = -(log_r.sum(-1) / mask.sum(-1))
        keep = ~((A < 0) & (kl > 0.5))
        a = A[:, None]
        unclipped = ~(((r > 1.2) & (a > 0)) | ((r < 0.8) & (a < 0)))
        coef = keep[:, None] * unclipped * r * a * mask / mask.sum(-1, keepdim=True) / len(A)
    expected = (coef[..., None] * score).sum((0,))  # (T, V)
    (grad,) = torch.autograd.grad(policy_loss(name, logp, old, mask, A, G, 0.2).loss, theta)
    torch.testing.assert_close(-grad, expected, rtol=1e-10, atol=1e-12)


def test_trajectory_peer_gradients_equal_their_weights():
    # (also covered for every registered scheme by test_estimators.test_surrogate_gradient_equals_closed_form)
    theta, logp, old, mask, A, score, G = _policy(0.8)
    lr = ((logp - old) * mask).sum(-1).detach().reshape(-1, G)
    for name in PEERS_TRAJ:
        assert SCHEMES[name].surrogate == "detached"
        c = weights(name, lr, 0.2, A.reshape(-1, G)).reshape(-1)
        (grad,) = torch.autograd.grad(policy_loss(name, logp, old, mask, A, G, 0.2).loss, theta, retain_graph=True)
        expected = ((c * A)[:, None, None] * score).sum(0) / len(A)
        torch.testing.assert_close(-grad, expected, rtol=1e-10, atol=1e-12)
    assert SCHEMES["tic_mask"].surrogate == "clamp"  # the only shipped one: test_estimators.test_schemes_registered


# ----------------------------------------------------------------- defaults, knobs, membership


PAPER_DEFAULTS = {"m2po": {"tau": 0.04}, "cispo": {"eps_low": 10.0, "eps_high": 0.2}, "opsm": {"delta": 0.5},
                  "gspo": {"eps_low": 3e-4, "eps_high": 4e-4}, "seq_tis": {"C": 2.0}, "seq_tis_bn": {"C": 2.0},
                  "seq_mis": {"lo": 0.5, "hi": 2.0}, "icepop": {"lo": 0.5, "hi": 5.0},
                  "seq_geo_mask": {"lo": 0.999, "hi": 1.001, "length": 1.0, "C": 0.0},
                  "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
                  "vespo": {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0},
                  "dppo_tv": {"delta": 0.15, "C": 1e4}, "gmc_cap": {"kappa": 1.0},
                  "ctpo": {"delta": 0.2}, "trm_k2": {"delta": 0.05}, "trm_k3": {"delta": 0.05},
                  "dispo": {"pos_low": 0.2, "pos_high": 0.28, "neg_low": 0.2, "neg_high": 0.2}, "oapl": {"beta": 1.0}}
"""The shipped estimators' knobs and their defaults (the sources: :mod:`estimators.params`' table)."""
KNOBLESS = ("is", "stale", "tic_mask", "tic_trunc", "tic_ppo", "gmc", "snis", "topr", "gmc_topr", "topr_gmc",
            "token_clip", "p3o", "minpro")
"""The shipped estimators with no knob."""
EPS_HIGH_TAKERS = ("token_clip", "opsm", "minpro", "trm_k2", "trm_k3")
"""The shipped token losses that take the run's ``eps_high`` (an option beyond their knobs)."""


def test_paper_defaults_and_config_fields():
    d = {name: {p.name: p.default for p in ps} for name, ps in PARAMS.items()}
    assert {n: d.get(n) for n in PAPER_DEFAULTS} == PAPER_DEFAULTS
    assert set(KNOBLESS) <= set(loss_names()) and not set(KNOBLESS) & set(d)
    knobs = {f.metadata["knob"]: f for f in config_fields() if "knob" in f.metadata}
    assert set(knobs) == {(n, p.name) for n, ps in PARAMS.items() for p in ps}  # every knob has a field
    cfg = TrainConfig()
    for (name, param), f in knobs.items():  # every registered knob: its record's default, checked, with a symbol
        spec = next(p for p in PARAMS[name] if p.name == param)
        assert getattr(cfg, f.name) == d[name][param] == spec.check(spec.default, name) and f.metadata["symbol"]
    from llm_runs.train import build_parser, field_flag

    text = build_parser().format_help()
    for f in knobs.values():
        assert field_flag(f) in text and f"[{f.metadata['symbol']}]" in text
    assert dataclasses.replace(cfg, estimator="seq_mis", seq_mis_hi=3.0).loss_options() == {"lo": 0.5, "hi": 3.0}
    assert dataclasses.replace(cfg, estimator="gspo").loss_options() == {"eps_low": 3e-4, "eps_high": 4e-4}
    assert dataclasses.replace(cfg, estimator="opsm", eps_high=0.28).loss_options() == {"delta": 0.5, "eps_high": 0.28}
    assert dataclasses.replace(cfg, estimator="gmc").loss_options() == {}
    takers = []
    for name in loss_names():  # every registered loss: the config hands it only options it takes
        options = dataclasses.replace(cfg, estimator=name, eps_high=0.28).loss_options()
        assert check_options(name, options) == options, name
        assert set(d.get(name, {})) <= set(options) <= set(d.get(name, {})) | {"eps_high"}, name
        if options.get("eps_high") == 0.28:
            takers.append(name)
    shipped = set(PAPER_DEFAULTS) | set(KNOBLESS)
    assert set(takers) & shipped == set(EPS_HIGH_TAKERS)


@pytest.mark.parametrize("call, match", [
    (lambda: weights("seq_mis", np.zeros((1, 2)), 0.2, lo=3.0, hi=2.0), "needs lo < hi"),
    (lambda: weights("seq_mis", np.zeros((1, 2)), 0.2, lo=-0.1), r"lo \(w_lo\) must be a finite number in \[0"),
    (lambda: weights("seq_tis_bn", np.zeros((1, 2)), 0.2, C=0.0), r"C \(C\) must be a finite number in \(0"),
    (lambda: weights("seq_tis_bn", np.zeros((1, 2)), 0.2, C=float("inf")), "C .* got inf"),
    (lambda: weights("gmc", np.zeros((1, 2)), 0.2, C=2.0), r"'gmc' takes no option\(s\) \['C'\]"),
    (lambda: check_options("m2po", {"tau": -1.0}), r"tau \(tau_M2\) must be a finite number in \(0"),
    (lambda: check_options("cispo", {"eps_high": float("nan")}), "eps_high .* got nan"),
    (lambda: check_options("opsm", {"delta": "0.5"}), "must be a real number"),
    (lambda: check_options("gspo", {"eps_low": 1.5}), r"eps_low .* in \(0, 1\)"),
    (lambda: check_options("m2po", {"eps_high": 0.2}), r"'m2po' takes no option\(s\) \['eps_high'\]"),
])
def test_bad_knobs_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_knobs_refused_by_the_config():
    with pytest.raises(ValueError, match=r"tau .* got 0.0 \(config fields m2po_tau\)"):
        TrainConfig(m2po_tau=0.0).validate()
    with pytest.raises(ValueError, match="needs lo < hi"):
        TrainConfig(seq_mis_lo=2.0, seq_mis_hi=2.0).validate()
    with pytest.raises(ValueError, match="micro_batch_groups must be 0"):
        TrainConfig(estimator="m2po", micro_batch_groups=2).validate()
    with pytest.raises(ValueError, match="micro_batch_groups must be 0"):
        TrainConfig(estimator="seq_tis_bn", micro_batch_groups=2).validate()


def test_exact_membership_rule_and_counterexamples():
    eps = 0.2
    member = {n: s.member(eps) for n, s in SCHEMES.items()}
    assert member["topr"] and member["seq_tis_bn"] and not member["seq_mis"]  # one group per batch
    tis_bn = SCHEMES["seq_tis_bn"]
    assert not tis_bn.member(eps, prompts_per_step=2) and tis_bn.member(1.0, prompts_per_step=2)
    assert SCHEMES["seq_mis"].member(eps, hi=1.2) and not SCHEMES["seq_mis"].member(eps, hi=1.2 + 1e-12)
    for n, s in SCHEMES.items():  # the in_class flag is the rule at the defaults for every eps and batch
        assert s.in_class == all(s.member(e, B) for e in (1e-3, 0.2, 5.0) for B in (1, 2, 8)), n
    # the suprema are attained or approached: seq_mis at w = hi, seq_tis_bn as the other groups vanish
    assert weights("seq_mis", np.log([[2.0, 2.0]]), eps).mean() == 2.0 > 1 + eps
    lr = np.array([[0.0, 0.0], [-40.0, -40.0]])
    assert weights("seq_tis_bn", lr, eps)[0].mean() == pytest.approx(2.0, rel=1e-12)


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


# ----------------------------------------------------------------- exact measurement (simulators.peers)


def _view(case, Delta):
    from simulators import peers as P
    from simulators.delay import static_behaviour
    from simulators.delay_sweeps import make_instance

    c = P.CASES[case]
    env, th, _, u = make_instance(c["env"], c["instance"])
    tb = static_behaviour(th, Delta, u)
    return env, th, tb, P.token_view(env, th, tb), c["G"]


def test_surrogate_autograd_enumeration_equals_the_core_enumeration():
    from simulators import peers as P

    env, th, tb, view, G = _view("E1", 1.5)
    names = ["is", "gmc", "tic_mask", "tic_trunc", "snis", "topr", "seq_mis"]
    core = env.exact_all(th, tb, G, 0.2, names)
    for name in names:
        r = P.exact_moments(view, G, 0.2, name)
        assert r["bias_norm"] == pytest.approx(core[name]["bias_norm"], rel=1e-9, abs=1e-14), name
        assert r["second_moment"] == pytest.approx(core[name]["second_moment"], rel=1e-12), name
        assert r["max_norm"] == pytest.approx(core[name]["max_norm"], rel=1e-12), name
        assert r["prob_total"] == pytest.approx(1.0, abs=1e-12)


def test_every_loss_is_unbiased_on_policy_after_the_length_rescaling():
    from simulators import peers as P

    _, _, _, view, G = _view("E2", 0.0)
    for name in [n for n in P.TRAJECTORY if n != "seq_tis_bn"] + P.TOKEN:  # seq_tis_bn: all weights 1 on-policy
        r = P.exact_moments(view, G, 0.2, name)
        assert r["bias_norm"] < 1e-12 and r["bias_b_norm"] < 1e-12, name


def test_monte_carlo_over_batches_of_one_group_matches_the_enumeration():
    from simulators import peers as P

    _, _, _, view, G = _view("E1", 2.0)
    for i, name in enumerate(["seq_tis_bn", "gmc"]):
        ex = P.exact_moments(view, G, 0.2, name)
        mc = P.mc_moments(view, G, 0.2, name, 1, 2000, np.random.default_rng(100 + i))
        assert abs(mc["second_moment"] - ex["second_moment"]) <= 4 * mc["second_moment_se"], name
        assert abs(mc["bias_norm"] - ex["bias_norm"]) <= 4 * mc["bias_norm_se"] + 1e-3 * ex["bias_norm"], name
        assert mc["max_norm"] <= ex["max_norm"] * (1 + 1e-12)


def test_batch_normalisation_breaks_the_per_group_bound_but_not_the_batch_bound():
    # a batch of B = 4 groups: one group of ratio-1 trajectories among groups of tiny ratios gets
    # mass close to B, so its estimate can reach B M; the batch average stays within M
    B, G = 4, 3
    lr = np.full((B, G), -30.0)
    lr[0] = 0.0
    c = weights("seq_tis_bn", lr, 0.2)
    X = np.ones((B, G, 1))  # all X_i equal, ||X|| = M = 1 (Lemma 2's worst case)
    per_group = np.abs((c[..., None] * X).mean(1))[:, 0]
    assert per_group[0] == pytest.approx(B, rel=1e-9) and per_group[0] > 1.2
    assert np.abs((c[..., None] * X).mean((0, 1))) <= 1 + 1e-12


def test_core_enumeration_refuses_a_batch_coupled_scheme():
    from simulators import bandit

    with pytest.raises(ValueError, match="normalises over the whole batch"):
        bandit.exact_moments([0.5, 0.0], [0.0, 0.0], [1.0, 0.0], 4, 0.2, "seq_tis_bn")


def test_losses_leave_the_ratio_diagnostics_to_the_caller():
    # the diagnostics are computed once per update from seq_log_ratio (llm_runs.update), never per loss call
    logp, old, m, A = _tokens([[0.5, -0.1], [0.05, 0.0]], [1.0, -1.0])
    for name in loss_names():
        out = policy_loss(name, logp, old, m, A, 2, 0.2)
        assert not set(out.metrics) & set(estimators.diagnostics(out.seq_log_ratio, 0.2)), name
        torch.testing.assert_close(out.seq_log_ratio, torch.tensor([[0.4, 0.05]], dtype=torch.float64))
