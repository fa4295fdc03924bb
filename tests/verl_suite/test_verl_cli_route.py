"""verl's command line reaches the plugin: ``policy_loss._target_`` makes Hydra import it inside
``validate_config``; a rejected response goes through the loss; the rollout's ratio moves the weights."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_integrations_verl import actor_config, random_batch, snippet_overrides, verl_config
from verl.trainer.ppo import core_algos

import estimators
from estimators.losses import trajectory_loss
from llm_runs.integrations import verl_plugin  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
TARGET = "actor_rollout_ref.actor.policy_loss._target_=llm_runs.integrations.verl_plugin.PolicyLossConfig"

VALIDATE = r'''
import json
import sys
from hydra import compose, initialize_config_module
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # as verl/trainer/main_ppo.py calls it
from verl.utils.config import omega_conf_to_dataclass, validate_config
sys.modules.pop("llm_runs.integrations.verl_plugin", None)
for overrides in json.loads(sys.argv[1]):  # the cases without _target_ first: the plugin is not imported yet
    print("CASE", len(overrides))
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=overrides)
        if not any("_target_" in o for o in overrides):
            assert "llm_runs.integrations.verl_plugin" not in sys.modules
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        pl = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor).policy_loss
        print("OK", type(pl).__name__, pl.kappa, pl.ess_scaling, pl.behaviour)
    except Exception as exc:  # the refusal's text, whatever raised it
        print("REFUSED", type(exc).__name__, " ".join(str(exc).split()))
'''

BASE = ["actor_rollout_ref.actor.policy_loss.loss_mode=gmc_cap", "algorithm.adv_estimator=gmc_loo",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.train_batch_size=8",
        "actor_rollout_ref.actor.shuffle=False", "trainer.n_gpus_per_node=1", "trainer.use_v1=False",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "+actor_rollout_ref.actor.policy_loss.kappa=2", "+actor_rollout_ref.actor.policy_loss.ess_scaling=sqrt"]


def validate(cases: list[list[str]]) -> list[str]:
    """Each case's outcome (``OK ...`` or ``REFUSED ...``) from one fresh process that has not imported the
    plugin before its first case."""
    import json

    run = subprocess.run([sys.executable, "-c", VALIDATE, json.dumps(cases)], capture_output=True, text=True,
                         cwd=REPO, timeout=300, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    out = [line for line in run.stdout.splitlines() if line.startswith(("OK", "REFUSED"))]
    assert len(out) == len(cases), run.stdout + run.stderr
    return out


def test_a_knob_and_a_step_control_reach_the_plugin_from_verls_command_line_through_target():
    """In a fresh process that has not imported the plugin, verl's own config and validate_config, with the
    documented _target_ override: the knob and the step control are there; without it verl refuses kappa."""
    bare, ok, token, bypass, bad = validate([
        BASE, [TARGET, *BASE], [TARGET, *BASE, "algorithm.rollout_correction.rollout_is=token"],
        [TARGET, *BASE, "algorithm.rollout_correction.bypass_mode=True"],
        [TARGET, *BASE, "+actor_rollout_ref.actor.policy_loss.behaviour=stale"]])
    assert bare.startswith("REFUSED") and "kappa" in bare
    assert ok == "OK PolicyLossConfig 2 sqrt None", ok  # behaviour unset: the default, rollout
    assert token.startswith("REFUSED") and "rollout_is='token'" in token
    assert bypass.startswith("REFUSED") and "bypass_mode=True replaces loss_mode 'gmc_cap'" in bypass
    assert bad.startswith("REFUSED") and "behaviour = 'stale'" in bad


def _call(actor, batch, adv, **kw):
    return {"old_log_prob": batch.old, "log_prob": batch.new, "advantages": adv, "response_mask": batch.mask,
            "loss_agg_mode": "token-mean", "config": actor, **kw}


def test_the_rollouts_log_probs_move_gmcs_weights_and_ess():
    """behaviour=rollout: the loss, weights and ESS are those of pi_theta / pi_rollout, not of the recomputed
    old_log_prob (equal to log_prob here, as on verl's first mini-batch, where the decoupled ratio is 1)."""
    actor = actor_config(verl_config(snippet_overrides()))
    G = actor.rollout_n
    batch = random_batch(seed=31, prompts_per_step=2, G=G, binary=False, spread=0.5)
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    fn = core_algos.get_policy_loss_fn("gmc")
    recomputed = batch.new.clone()  # verl's old_log_prob at the start of the step: pi_old = pi_theta
    loss, metrics = fn(**{**_call(actor, batch, adv), "old_log_prob": recomputed}, rollout_log_probs=batch.old)
    eps = actor.clip_ratio_high
    want = trajectory_loss("gmc", batch.new, batch.old, batch.mask, adv[:, 0], G, eps)
    assert float(loss) == pytest.approx(float(want.loss), abs=1e-12)
    ess = estimators.diagnostics(want.seq_log_ratio, eps)["ess_frac_mean"]
    assert metrics["actor/stale/ess"] == pytest.approx(ess) and ess < 0.95
    recomputed_route = snippet_overrides() + ["+actor_rollout_ref.actor.policy_loss.behaviour=recomputed"]
    decoupled = actor_config(verl_config(recomputed_route))
    decoupled.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    loss_d, metrics_d = fn(**{**_call(decoupled, batch, adv), "old_log_prob": recomputed}, rollout_log_probs=batch.old)
    assert metrics_d["actor/stale/ess"] == pytest.approx(1.0)  # the recomputed ratio is 1: no staleness seen
    assert abs(float(loss_d) - float(loss)) > 1e-4


def test_a_rejected_response_weighs_zero_and_its_group_is_computed_over_the_kept_ones():
    """verl's rollout_rs empties a rejected response's mask: the plugin's advantages and loss take each group
    over its kept responses (THEORY §1-2 with G = k), equal to the core loss on the kept rows."""
    actor = actor_config(verl_config(snippet_overrides()))
    G = actor.rollout_n
    batch = random_batch(seed=41, prompts_per_step=2, G=G, binary=False, spread=0.6)
    rejected = [1, G + 2, G + 5]
    batch.mask[rejected] = False
    adv, _ = core_algos.get_adv_estimator_fn("gmc_loo")(token_level_rewards=batch.rewards,
                                                        response_mask=batch.mask.double(), index=batch.index)
    assert float(adv[rejected].abs().sum()) == 0
    actor.global_batch_info.update(dp_size=1, global_batch_size=batch.B)
    loss, metrics = core_algos.get_policy_loss_fn("gmc")(**_call(actor, batch, adv), rollout_log_probs=batch.old)
    eps = actor.clip_ratio_high
    scores = batch.rewards.sum(-1)
    want = 0.0
    for g in range(2):
        keep = [i for i in range(g * G, (g + 1) * G) if i not in rejected]
        a = estimators.advantages(scores[keep][None], "loo")[0]
        assert torch.allclose(adv[keep, 0], a.to(adv.dtype), atol=1e-12)
        core = trajectory_loss("gmc", batch.new[keep], batch.old[keep], batch.mask[keep], a, len(keep), eps)
        want += float(core.loss) / 2  # the mean over the micro-batch's two groups
    assert float(loss) == pytest.approx(want, abs=1e-12)
    assert metrics["actor/stale/rejected_frac"] == pytest.approx(3 / (2 * G))
