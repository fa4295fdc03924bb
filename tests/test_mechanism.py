"""The mechanism study's pieces: the GMC variants (hand-computed weights, membership, numpy =
torch, extremes), the optimiser setting, and the ``mech/`` diagnostics (they leave the update
unchanged, and IS's own direction has cosine 1 with the IS direction)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import estimators
from llm_runs.config import resolve_config
from llm_runs.optim import make_optimizer
from llm_runs.presets import load_pretrained
from llm_runs.rollout import sample_groups, sample_keys
from llm_runs.tasks import build_task
from llm_runs.update import flat_params, policy_update
from llm_runs.warmstart import get_warm_start
from schema.metrics import MECHANISM

L = np.log([[3.0, 1.0, 1.0, 1.0], [0.5, 4.0, 2.0, 0.1]])
A = np.array([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])


@pytest.mark.parametrize("scheme, expected", [
    # row 0: GMC lambda = 1.2 / 1.5 = 0.8; row 1: lambda = 1.2 / 1.65
    ("gmc_cap", [[1.2, 0.8, 0.8, 0.8], [0.5 * 1.2 / 1.65, 1.2, 1.2, 0.1 * 1.2 / 1.65]]),
    # positives {3, 1}: mean 2, lambda_+ = 0.6; negatives min(w, 1). Row 1: positives {0.5, 4}, lambda_+ = 1.2 / 2.25
    ("gmc_topr", [[1.8, 1.0, 0.6, 1.0], [0.5 * 1.2 / 2.25, 4.0 * 1.2 / 2.25, 1.0, 0.1]]),
    # positives 1; negatives {1, 1}: mean 1, uncapped. Row 1: negatives {2, 0.1}, mean 1.05 <= 1.2, uncapped
    ("topr_gmc", [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 2.0, 0.1]]),
])
def test_variant_weights_match_hand_computed_values_in_numpy_and_torch(scheme, expected):
    np.testing.assert_allclose(estimators.weights(scheme, L, 0.2, A), expected, rtol=1e-12)
    t = estimators.weights(scheme, torch.tensor(L), 0.2, torch.tensor(A))
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-12)


def test_gmc_cap_kappa_caps_each_trajectory_at_kappa_times_one_plus_eps():
    c = estimators.weights("gmc_cap", L, 0.2, kappa=2.0)
    gmc = estimators.weights("gmc", L, 0.2)
    np.testing.assert_allclose(c, np.minimum(gmc, 2.4), rtol=1e-12)
    assert c.max() == pytest.approx(2.4) and gmc.max() > 2.4
    with pytest.raises(ValueError, match="kappa"):
        estimators.weights("gmc_cap", L, 0.2, kappa=0.0)


def test_one_sign_scale_is_gmc_over_that_sign_and_idle_without_it():
    # all advantages negative: gmc_topr is TOPR's truncation, topr_gmc is GMC of the whole group
    neg = -np.ones_like(A)
    np.testing.assert_allclose(estimators.weights("gmc_topr", L, 0.2, neg), np.minimum(np.exp(L), 1.0), rtol=1e-12)
    np.testing.assert_allclose(estimators.weights("topr_gmc", L, 0.2, neg), estimators.weights("gmc", L, 0.2),
                               rtol=1e-12)
    np.testing.assert_allclose(estimators.weights("gmc_topr", L, 0.2, -neg), estimators.weights("gmc", L, 0.2),
                               rtol=1e-12)


@pytest.mark.parametrize("scheme", ["gmc_cap", "gmc_topr", "topr_gmc"])
def test_variants_are_members_and_their_mass_never_exceeds_one_plus_eps(scheme):
    rng = np.random.default_rng(0)
    assert estimators.get_scheme(scheme).member(0.2)
    lr = rng.normal(0, 3, size=(2000, 8))
    adv = rng.normal(size=(2000, 8))
    c = estimators.weights(scheme, lr, 0.2, adv)
    assert np.isfinite(c).all() and (c.mean(-1) <= 1.2 * (1 + 1e-12)).all()
    huge = np.array([[1e4, -1e4, 0.0, 5.0]])
    for dtype in (torch.float32, torch.bfloat16):
        w = estimators.weights(scheme, torch.tensor(huge, dtype=dtype), 0.2, torch.tensor([[1.0, -1.0, 1.0, -1.0]]))
        assert torch.isfinite(w.float()).all(), dtype


# --------------------------------------------------------------------------- optimiser


def test_default_optimizer_is_plain_adam_and_sgd_is_a_fixed_step():
    cfg = resolve_config({})
    assert (cfg.optimizer, cfg.momentum, cfg.weight_decay) == ("adam", 0.0, 0.0)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = make_optimizer([p], resolve_config({"optimizer": "sgd", "lr": 0.5}))
    p.grad = torch.tensor([0.25, 0.5])
    opt.step()
    assert p.detach().tolist() == [0.875, -2.25]  # theta - eta g, exact in binary
    assert type(make_optimizer([p], resolve_config({"optimizer": "adamw", "weight_decay": 0.01}))).__name__ == "AdamW"


@pytest.mark.parametrize("bad, message", [({"optimizer": "lion"}, "unknown optimizer 'lion'"),
                                          ({"momentum": 0.9}, "applies to optimizer 'sgd' only"),
                                          ({"optimizer": "sgd", "momentum": 1.0}, "momentum must be < 1"),
                                          ({"weight_decay": -0.1}, "weight_decay must be")])
def test_bad_optimizer_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(bad)


# --------------------------------------------------------------------------- diagnostics


@pytest.fixture(scope="module")
def stale_batch(tmp_path_factory):
    """A warm-started tiny policy, a batch it sampled, and a later policy (three Adam steps away)."""
    from tests.test_llm_core import TINY_MODEL

    cfg = resolve_config({"model_kwargs": TINY_MODEL, "warm_start_steps": 40, "warm_start_lr": 3e-3,
                          "warm_start_batch": 64, "heldout_size": 20, "eval_train_size": 20,
                          "cache_dir": str(tmp_path_factory.mktemp("cache"))})
    task = build_task(cfg)
    model, tok = load_pretrained(get_warm_start(cfg, task, log=lambda m: None).path)
    idx = list(range(8))
    batch = sample_groups(model, tok, task, [task.train[i] for i in idx], idx, 4, sample_keys(3, 0, 8, 4), 0, 3)
    later = copy.deepcopy(model)
    opt = torch.optim.Adam(later.parameters(), lr=3e-3)
    for _ in range(3):
        policy_update(later, opt, batch, estimator="stale", eps=0.2)
    return later, batch


@pytest.mark.parametrize("estimator", ["gmc", "is", "token_clip", "gspo"])
def test_mechanism_diagnostics_leave_the_update_unchanged(stale_batch, estimator):
    model, batch = stale_batch
    steps = {}
    for mech in (False, True):
        m = copy.deepcopy(model)
        row = policy_update(m, torch.optim.Adam(m.parameters(), lr=1e-3), batch, estimator=estimator, eps=0.2,
                            mechanism=mech)
        steps[mech] = (flat_params(m), row)
    (p0, r0), (p1, r1) = steps[False], steps[True]
    assert np.array_equal(p0, p1)
    assert {k: v for k, v in r1.items() if not k.startswith("mech/")} == r0 or all(
        (r0[k] == r1[k]) or (math.isnan(r0[k]) and math.isnan(r1[k])) for k in r0)
    assert set(r1) - set(r0) == {"mech/cos_is", "mech/heavy_share", "mech/lambda_min", "mech/kl"}
    assert -1 <= r1["mech/cos_is"] <= 1 and r1["mech/heavy_share"] > 0 and r1["mech/kl"] > 0
    assert 0 < r1["mech/lambda_min"] <= 1
    assert set(r1) - set(r0) <= set(MECHANISM)


def test_is_direction_has_cosine_one_with_itself_and_gmc_turns_away_from_it(stale_batch):
    model, batch = stale_batch
    cos = {}
    for est in ("is", "gmc", "stale"):
        m = copy.deepcopy(model)
        cos[est] = policy_update(m, torch.optim.SGD(m.parameters(), lr=0.0), batch, estimator=est, eps=0.2,
                                 mechanism=True)["mech/cos_is"]
    assert cos["is"] == pytest.approx(1.0, abs=1e-5)
    assert cos["stale"] < 1 - 1e-4


def test_the_stacks_log_the_trainers_columns_with_the_trainers_values(stale_batch):
    """llm_runs.theory.batch_metrics (what the verl plugin and the TRL adapter log) on the trainer's
    own batch gives the trainer's row, name for name."""
    from estimators.losses import policy_loss
    from llm_runs.rollout import completion_logprobs
    from llm_runs.theory import batch_metrics
    from llm_runs.update import group_advantages

    model, batch = stale_batch
    m = copy.deepcopy(model)
    with torch.no_grad():
        logp = completion_logprobs(m, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, 1.0, batch.group_size)
    out = policy_loss("gmc", logp, batch.behaviour_logp, batch.completion_mask, group_advantages(batch, "loo"),
                      batch.group_size, 0.2)
    logged = batch_metrics(out, logp, batch.behaviour_logp, batch.completion_mask, "gmc", 0.2)
    row = policy_update(m, torch.optim.SGD(m.parameters(), lr=0.0), batch, estimator="gmc", eps=0.2, mechanism=True)
    common = set(logged) & set(row)
    assert {"stale/chi2", "stale/ess", "stale/mass_bias", "stale/mass_bias_bound", "train/weight_max",
            "stale/mass_cap_frac", "mech/lambda_min", "mech/kl"} <= common
    assert not {"mech/cos_is", "mech/heavy_share", "mech/step_norm"} & set(logged)  # they need the gradients
    assert logged["mech/kl"] > 0 and 0 < logged["mech/lambda_min"] <= 1  # a stale batch: it drifted
    for k in common:
        assert logged[k] == pytest.approx(row[k], rel=1e-6, abs=1e-9), k
    assert logged["stale/chi2_seq_verl"] == pytest.approx(logged["stale/chi2"], rel=1e-9)  # no |log w| > 20 here
