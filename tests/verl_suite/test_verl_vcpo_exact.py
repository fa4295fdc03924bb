"""``recipe=vcpo_exact`` from verl's command line: accepted by verl's ``validate_config`` with what it needs, the
missing pieces refused by name, and one update through verl's own training path (``TrainingWorker``, FSDP2 on one
CPU rank) equal to the toolkit trainer's ``RECIPES["vcpo_exact"]`` update on the same batch."""
from __future__ import annotations

import copy

import pytest
import torch
from omegaconf import OmegaConf
from test_integrations_verl import snippet_overrides, verl_config
from test_verl_cli_route import TARGET, validate
from test_verl_config_refusals import GMC, PL, with_
from test_verl_training_path import (
    CPU_OVERRIDES,
    PROMPT_LEN,
    balanced_rows,
    build_actor,
    engine_weights,
    rollout_batch,
    tiny_qwen3,
    to_verl,
)
from transformers import Qwen3ForCausalLM

from llm_runs.integrations import verl_plugin  # noqa: F401 (installs the plugin, as external_lib does)

RECIPE = ["actor_rollout_ref.actor.policy_loss.loss_mode=seq_tis", PL + "recipe=vcpo_exact",
          "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "algorithm.adv_estimator=gmc_opob"]
"""What ``vcpo_exact`` needs from verl's command line beside the README's settings (its clip, 1.0, is verl's
``optim.clip_grad`` default; C = 8 and the ESS sqrt scaling come with the recipe)."""


def test_vcpo_exact_passes_verls_validation_and_a_missing_piece_is_refused_naming_it():
    ok, agg, clip, adv, ranks, knob, control = validate([
        with_(*RECIPE), with_(*RECIPE, "actor_rollout_ref.actor.loss_agg_mode=token-mean"),
        with_(*RECIPE, "actor_rollout_ref.actor.optim.clip_grad=0.5"),
        with_(*RECIPE, "algorithm.adv_estimator=gmc_loo"),
        with_(*RECIPE, "trainer.n_gpus_per_node=2", "trainer.balance_batch=False"),
        with_(*RECIPE, PL + "C=2"), with_(*RECIPE, PL + "ess_scaling=linear")])
    assert ok == "OK PolicyLossConfig None None None", ok  # kappa, ess_scaling, behaviour unset: the recipe's apply
    from test_integrations_verl import actor_config

    from llm_runs.integrations.verl.settings import estimator_options_from, step_controls_from

    actor = actor_config(verl_config(snippet_overrides() + RECIPE))
    assert step_controls_from(actor) == {"ess_scaling": "sqrt", "ess_base_ratio": 1.0, "ess_use_clipped": False,
                                         "gmc_step": False}
    assert estimator_options_from(actor, "seq_tis") == {"C": 8.0}
    assert "set actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean" in agg, agg
    assert "actor_rollout_ref.actor.optim.clip_grad = 0.5; set actor_rollout_ref.actor.optim.clip_grad=1.0" in clip
    assert "algorithm.adv_estimator = 'gmc_loo'; set algorithm.adv_estimator=gmc_opob" in adv, adv
    assert "averages over the 2 data-parallel ranks" in ranks, ranks
    assert "policy_loss.C = 2 contradicts recipe 'vcpo_exact', which sets 8.0" in knob, knob
    assert "policy_loss.ess_scaling = 'linear' contradicts recipe 'vcpo_exact', which sets 'sqrt'" in control
    (opob_alone,) = validate([[o for o in GMC if "adv_estimator" not in o] + ["algorithm.adv_estimator=gmc_opob"]])
    assert "'gmc_opob' leaves the advantages to the actor" in opob_alone and TARGET in GMC


def trainer_step(model, batch, recipe: str, monkeypatch) -> torch.Tensor:
    """The toolkit trainer's update of ``model`` (a copy) on ``batch`` under ``RECIPES[recipe]``, SGD at lr 1.

    The trainer scores a group's completions from one KV cache of its prompt (``llm_runs.rollout``'s grouped path),
    the same numbers as a row-by-row forward under the main environment's transformers (5.24; the main suite
    checks it), but not under .venv-verl's (5.10, 0.1 apart), where this test runs: here it scores row by row."""
    from llm_runs import rollout, update
    from llm_runs.config import resolve_config
    from llm_runs.stepsize import RECIPES
    from llm_runs.update import policy_update

    monkeypatch.setattr(update, "completion_logprobs", lambda m, p, pm, c, t, G=1: rollout.completion_logprobs(
        m, p, pm, c, t, 1))

    cfg = resolve_config(**RECIPES[recipe])
    m = copy.deepcopy(model)
    before = torch.cat([p.detach().flatten() for p in m.parameters()])
    row = policy_update(m, torch.optim.SGD(m.parameters(), lr=1.0), batch, estimator=cfg.estimator, eps=cfg.eps,
                        advantage=cfg.advantage, loss_options=cfg.loss_options(), max_grad_norm=cfg.max_grad_norm,
                        control=cfg)
    return torch.cat([p.detach().flatten() for p in m.parameters()]) - before, row


def test_vcpo_exact_through_verls_engine_steps_as_the_trainers_recipe(tmp_path, monkeypatch):
    """One mini-batch of four groups of G = 4 (stale rollout log-probs, rows in the order verl's balance_batch
    leaves them), SGD at lr 1 with weight decay 0: the plugin's step (OPOB from one engine pass per response, seq_tis
    at C = 8, each response's term over its tokens, ESS sqrt scaling, clip 1.0) and the trainer's.

    Tolerance: both run float32 (verl's FSDP2 engine on unpadded rows, the trainer's padded forward with each
    group's prompt run once): every log-prob, gradient norm and gradient element is a float32 sum in another order,
    a relative rounding of a few 2^-24 per operation accumulated over the tiny model's few dozen sequential
    operations; OPOB's baseline divides sums of those norms, and the step factor is the ESS of those ratios, so the
    steps agree to a few dozen float32 ulps of the step's norm at most: 64 2^-24 (the two were 5 2^-24 apart when
    this was written); the toolkit's own ``vcpo`` recipe lies 10^4 times farther."""
    from verl.trainer.ppo import core_algos

    from llm_runs.rollout import RolloutBatch

    vocab = tiny_qwen3(tmp_path)
    overrides = snippet_overrides() + [f"actor_rollout_ref.model.path={tmp_path}"] + CPU_OVERRIDES + RECIPE[:3] + [
        "actor_rollout_ref.actor.optim.optimizer=SGD", "actor_rollout_ref.actor.optim.lr=1.0",
        "actor_rollout_ref.actor.optim.weight_decay=0.0"]
    cfg = verl_config([o for o in overrides if not o.startswith("+actor_rollout_ref.actor.policy_loss.recipe")]
                      + [RECIPE[1]])
    OmegaConf.resolve(cfg)
    worker, actor_config = build_actor(cfg)
    start = engine_weights(worker)
    model = Qwen3ForCausalLM.from_pretrained(tmp_path, local_files_only=True, attn_implementation="sdpa",
                                             dtype=torch.float32)
    model.load_state_dict(start, strict=False)
    tensors, uids, _ = rollout_batch(vocab, seed=1)
    G = actor_config.rollout_n
    g = torch.Generator().manual_seed(2)
    # prompts of one length: the trainer runs each group's prompt once from a KV cache, which under .venv-verl's
    # transformers (5.10) scores completions after a left-padded prompt differently from a row-by-row forward
    prompts = torch.randint(2, vocab, (len(uids) // G, PROMPT_LEN), generator=g).repeat_interleave(G, 0)
    attention = torch.cat([torch.ones_like(prompts), tensors["response_mask"]], 1)
    tensors.update(prompts=prompts, input_ids=torch.cat([prompts, tensors["responses"]], 1), attention_mask=attention,
                   position_ids=(attention.cumsum(1) - 1).clamp(min=0))
    with torch.no_grad():
        from llm_runs.rollout import completion_logprobs

        fresh = completion_logprobs(model, tensors["prompts"], tensors["attention_mask"][:, :PROMPT_LEN],
                                    tensors["responses"], 1.0, 1)
    mask = tensors["response_mask"]
    tensors["rollout_log_probs"] = ((fresh + 0.5 * torch.randn(fresh.shape, generator=g)) * mask).float()
    tensors["old_log_probs"] = (fresh * mask).float()  # verl's recomputed pi_old: not the ratio under the recipe
    scores = torch.tensor([1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0], dtype=torch.float32)  # group 1 flat
    rewards = torch.zeros(mask.shape)
    rewards[torch.arange(len(scores)), mask.sum(-1) - 1] = scores
    adv, returns = core_algos.get_adv_estimator_fn("gmc_opob")(token_level_rewards=rewards, response_mask=mask,
                                                               index=uids)
    assert float(adv.abs().sum()) == 0  # the actor forms them
    tensors["advantages"], tensors["returns"] = adv, returns
    rows = balanced_rows(tensors["attention_mask"], uids)
    worker.train_mini_batch(to_verl(tensors, uids, rows))
    end = engine_weights(worker)
    names = [n for n, _ in model.named_parameters()]
    got = torch.cat([(end[n] - start[n]).flatten() for n in names])

    batch = RolloutBatch(prompt_ids=tensors["prompts"], prompt_mask=tensors["attention_mask"][:, :PROMPT_LEN],
                         completion_ids=tensors["responses"], completion_mask=mask.float(),
                         behaviour_logp=tensors["rollout_log_probs"], rewards=scores,
                         versions=torch.zeros(len(scores), dtype=torch.long), problem_index=torch.arange(16) // G,
                         finished=torch.ones(16, dtype=torch.bool), group_size=G)
    want, row = trainer_step(model, batch, "vcpo_exact", monkeypatch)
    assert worker.engine.step_control_last["step/lr_scale"] == pytest.approx(row["step/lr_scale"], rel=64 * 2.0 ** -24)
    assert row["step/lr_scale"] < 0.99 and float(want.norm()) > 0
    gap = float((got - want).norm() / want.norm())
    other, _ = trainer_step(model, batch, "vcpo", monkeypatch)
    bound = 64 * 2.0 ** -24
    assert gap <= bound, gap
    assert float((other - want).norm() / want.norm()) > 1e4 * bound
