"""Every setting the plugin cannot honour is refused when verl validates its config, in the driver, before any
rollout: verl's own Hydra compose of ``ppo_trainer`` with the documented overrides, then ``validate_config`` as
``verl/trainer/main_ppo.py`` calls it, in one fresh process that has not imported the plugin (``policy_loss._target_``
imports it inside ``validate_config``). Each refusal names the setting the user set and what to set instead; the
settings the plugin honours pass."""
from __future__ import annotations

import pytest
from test_verl_cli_route import TARGET, validate

GMC = [TARGET, "actor_rollout_ref.actor.policy_loss.loss_mode=gmc", "algorithm.adv_estimator=gmc_loo",
       "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
       "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.train_batch_size=8",
       "actor_rollout_ref.actor.shuffle=False", "trainer.n_gpus_per_node=1", "trainer.use_v1=False",
       "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"]
"""A configuration the plugin honours: ``loss_mode=gmc`` with the README's layout settings, on one GPU."""
PL = "+actor_rollout_ref.actor.policy_loss."


def with_(*overrides: str) -> list[str]:
    """:data:`GMC` with ``overrides`` replacing the settings of the same key (or added)."""
    keys = {o.partition("=")[0].lstrip("+") for o in overrides}
    return [o for o in GMC if o.partition("=")[0].lstrip("+") not in keys] + list(overrides)


REFUSED = {  # case -> (overrides, what the refusal must say: the setting and what to set)
    "shuffle": (with_("actor_rollout_ref.actor.shuffle=True"),
                ["actor_rollout_ref.actor.shuffle = True", "set actor_rollout_ref.actor.shuffle=False"]),
    "dynamic batch size": (with_("actor_rollout_ref.actor.use_dynamic_bsz=True"),
                           ["actor_rollout_ref.actor.use_dynamic_bsz = True",
                            "set actor_rollout_ref.actor.use_dynamic_bsz=False"]),
    "micro-batch not a multiple of n": (with_("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6"),
                                        [("ppo_micro_batch_size_per_gpu = 6 is not a multiple of "
                                          "actor_rollout_ref.rollout.n = 4"), "set it to a multiple of 4"]),
    "n = 1": (with_("actor_rollout_ref.rollout.n=1"),
              ["actor_rollout_ref.rollout.n = 1", "set actor_rollout_ref.rollout.n to 2 or more"]),
    "no rollout log-probs": (with_("actor_rollout_ref.rollout.calculate_log_probs=False"),
                             ["actor_rollout_ref.rollout.calculate_log_probs = False",
                              "set actor_rollout_ref.rollout.calculate_log_probs=True",
                              "policy_loss.behaviour=recomputed"]),
    "another loss's knob": (with_(PL + "kappa=2"),
                            ["actor_rollout_ref.actor.policy_loss sets ['kappa'], which loss_mode 'gmc' does not take",
                             "choose the loss they belong to"]),
    "kappa = -1": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=gmc_cap", PL + "kappa=-1"),
                   ["actor_rollout_ref.actor.policy_loss:", "kappa", "-1"]),
    "kappa = NaN": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=gmc_cap", PL + "kappa=nan"),
                    ["actor_rollout_ref.actor.policy_loss:", "kappa", "nan"]),
    "kappa = 'abc'": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=gmc_cap", PL + "kappa=abc"),
                      ["actor_rollout_ref.actor.policy_loss:", "kappa", "must be a real number, got 'abc'"]),
    "seq_tis_bn with rejection": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=seq_tis_bn",
                                        "algorithm.rollout_correction.rollout_rs=seq_mean_k3",
                                        "algorithm.rollout_correction.rollout_rs_threshold=0.01"),
                                  ["rollout_rs = 'seq_mean_k3' with loss_mode 'seq_tis_bn'",
                                   "drop rollout_rs or choose another loss_mode"]),
    "token-level rejection": (with_("algorithm.rollout_correction.rollout_rs=token_k1",
                                    "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0"),
                              ["algorithm.rollout_correction.rollout_rs = 'token_k1'",
                               "set rollout_rs to a sequence-level option"]),
    "token-level rejection in a chain": (with_("algorithm.rollout_correction.rollout_rs='seq_mean_k3,token_k2'",
                                               "algorithm.rollout_correction.rollout_rs_threshold='0.01,0.5'"),
                                         ["rollout_rs = 'seq_mean_k3,token_k2': token_k2 rejects single tokens"]),
    "v1 trainer": (with_("trainer.use_v1=True"), ["trainer.use_v1 = True", "set trainer.use_v1=False"]),
    "balance_batch over two ranks": (with_("trainer.n_gpus_per_node=2"),
                                     ["trainer.balance_batch = True with 2 data-parallel ranks",
                                      "set trainer.balance_batch=False"]),
    "loss_agg_mode token-sum": (with_("actor_rollout_ref.actor.loss_agg_mode=token-sum"),
                                ["actor_rollout_ref.actor.loss_agg_mode = 'token-sum'",
                                 "set loss_agg_mode=token-mean"]),
    "loss_agg_mode seq-mean-token-sum-norm": (with_("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"),
                                              ["loss_agg_mode = 'seq-mean-token-sum-norm'"]),
    "a bad mask denominator": (with_(PL + "mask_denominator=original"),
                               ["actor_rollout_ref.actor.policy_loss.mask_denominator = 'original'",
                                "valid: kept, sampled"]),
    "a bad step control": (with_(PL + "ess_scaling=cube"),
                           ["actor_rollout_ref.actor.policy_loss:", "unknown ess_scaling 'cube'"]),
    "a recipe for another loss": (with_(PL + "recipe=vcpo_exact"),
                                  ["recipe=vcpo_exact trains loss_mode 'seq_tis', not 'gmc'",
                                   "set actor_rollout_ref.actor.policy_loss.loss_mode=seq_tis"]),
    "verl's own loss with the plugin's knob": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                                     "algorithm.adv_estimator=grpo", PL + "kappa=2"),
                                               ["actor_rollout_ref.actor.policy_loss sets ['kappa']",
                                                "loss_mode 'vanilla' is not one of them and would ignore them",
                                                "drop them, or set actor_rollout_ref.actor.policy_loss.loss_mode"]),
    "verl's own loss with the plugin's settings": (with_("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                                         "algorithm.adv_estimator=grpo", PL + "ess_scaling=sqrt",
                                                         PL + "behaviour=recomputed"),
                                                   ["sets ['behaviour', 'ess_scaling']", "loss_mode 'vanilla'"]),
}

ACCEPTED = {  # the settings the plugin honours, beside them
    "the plugin's own configuration": GMC,
    "seq-mean-token-mean": with_("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"),
    "seq-mean-token-sum": with_("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"),
    "sequence-level rejection, the sampled count": with_("algorithm.rollout_correction.rollout_rs=seq_mean_k3",
                                                         "algorithm.rollout_correction.rollout_rs_threshold=0.01",
                                                         PL + "mask_denominator=sampled"),
    "verl's own loss, nothing of the plugin's": with_("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                                      "algorithm.adv_estimator=grpo"),
    "balance_batch on one rank": with_("trainer.balance_batch=True"),
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    """Each case's outcome, from one fresh process (the accepted cases first: the first has not imported the plugin
    when it composes)."""
    cases = {**{f"ok: {k}": v for k, v in ACCEPTED.items()}, **{k: v[0] for k, v in REFUSED.items()}}
    return dict(zip(cases, validate(list(cases.values()))))


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_what_the_plugin_honours_passes_verls_validation(outcomes, case):
    assert outcomes[f"ok: {case}"].startswith("OK PolicyLossConfig"), outcomes[f"ok: {case}"]


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_setting_the_plugin_cannot_honour_is_refused_by_verls_validation_naming_it(outcomes, case):
    got = outcomes[case]
    # a refusal in the policy-loss config's __post_init__ reaches the user inside Hydra's InstantiationException
    assert got.startswith(("REFUSED ValueError", "REFUSED InstantiationException")) and "ValueError" in \
        got.replace("REFUSED ValueError", "ValueError"), got
    for words in REFUSED[case][1]:
        assert words in got, f"{case}: {words!r} not in {got!r}"


USER = ["data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8"]
"""The user's own settings every documented command says to add (verl requires a log-prob micro-batch size)."""


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``python3 -m verl.trainer.main_ppo`` block of README.md and docs/INTEGRATIONS.md (indented ones too), as
    its ``key=value`` overrides, verbatim."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = []
    for path in (repo / "README.md", repo / "docs" / "INTEGRATIONS.md"):
        for k, block in enumerate(re.findall(r"```bash\n(.*?)```", path.read_text(), re.DOTALL)):
            text = " ".join(line.strip() for line in block.replace("\\\n", " ").splitlines())
            if "verl.trainer.main_ppo" in text:
                out.append((f"{path.name}-{k}", [tok for tok in text.split() if "=" in tok]))
    return out


def test_every_documented_verl_command_passes_verls_validation_as_written():
    """After the user's data settings, each documented command passes verl's compose and validate_config with the
    plugin: no block sets what the plugin refuses, and every block caps at 1 + 0.28 (the cap of the README's)."""
    commands = documented_commands()
    assert len(commands) >= 4, [name for name, _ in commands]
    for (name, overrides), got in zip(commands, validate([USER + o for _, o in commands]), strict=True):
        assert got.startswith("OK PolicyLossConfig"), (name, got)
        assert TARGET in overrides and ("actor_rollout_ref.actor.clip_ratio_high=0.28" in overrides
                                        or "+actor_rollout_ref.actor.policy_loss.recipe=vcpo_exact" in overrides), name
