"""The TRL adapter as a TRL 1.16 user meets it: the metric names its logs carry (no doubled prefix; the drift
reader's), the behaviour log-probs' shape, TRL's own clip for ``token_clip``, the refusals naming the setting set,
and ``recipe="vcpo_exact"`` stepping as the toolkit trainer's recipe does on a fixed batch."""
from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from test_integrations_trl import char_tokenizer, make_args, reward, tiny_qwen3, trained  # noqa: F401 (a fixture)

from llm_runs.integrations._common import VOCABULARY, trl_name
from llm_runs.integrations.trl import TrajectoryGRPOTrainer, behaviour_logps
from llm_runs.integrations.trl_settings import check_supported

G = 4


def build(tmp_path, **kw):
    """A TrajectoryGRPOTrainer on a tiny Qwen3; ``args`` overrides of GRPOConfig, the rest the adapter's."""
    tok = char_tokenizer()
    args = kw.pop("args", {})
    return TrajectoryGRPOTrainer(model=kw.pop("model", None) or tiny_qwen3(len(tok)), reward_funcs=reward,
                                 args=make_args(tmp_path, **args), processing_class=tok,
                                 train_dataset=Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * 2}), **kw)


# --------------------------------------------------------------------------- metric names


def test_trls_logs_carry_the_toolkit_names_without_a_doubled_prefix_and_the_drift_reader_reads_them(
        trained, tmp_path):  # noqa: F811 (the fixture imported above)
    """transformers' wandb and TensorBoard callbacks put ``train/`` before every training key
    (``integration_utils.rewrite_logs``): the adapter's keys come out as the trainer's names, never
    ``train/train/...``; the step's statistics of :data:`VOCABULARY` are all there; ``python -m llm_runs.drift
    --stack trl`` reads the KL, chi^2 and ESS axes from ``trainer_state.json``."""
    from transformers.integrations.integration_utils import rewrite_logs

    from llm_runs import drift

    trainer = trained[0]
    logged = [h for h in trainer.state.log_history if "stale/ess" in h]
    assert len(logged) == 3
    for row in logged:
        shown = rewrite_logs(row)
        assert not [k for k in shown if k.startswith("train/train/")], sorted(shown)
        assert {f"train/{trl_name(k)}" for k in VOCABULARY if k != "step/lr_scale"} <= set(shown)
        assert "train/weight_max" in shown and "train/stale/ess" in shown
    path = tmp_path / "trainer_state.json"
    trainer.state.save_to_json(str(path))
    m, _ = drift.read_export(path, "trl")
    s = drift.summary(m, 1, "trl")  # steps_per_generation = 2: delay 1, the second update of each generation
    assert (s["kl_column"], s["chi2_column"], s["ess_ratio_column"]) == ("mech/kl", "stale/chi2", "drift/ess_ratio")
    stale = trainer.records[1]["ref"].seq_log_ratio.double().exp().reshape(-1)  # update 2, one step stale
    want = float(stale.sum() ** 2 / ((stale * stale).sum() + 1e-8) / stale.numel())
    # one logged update at staleness 1; the adapter's ratios agree with the float64 reference to float32 precision
    assert s["fixed_delay_updates"] == 1 and s["ess_ratio_all"] == pytest.approx(want, rel=1e-5) and want < 0.999999
    assert json.loads(path.read_text())["log_history"][1]["drift/ess_ratio"] == s["ess_ratio_all"]


# --------------------------------------------------------------------------- shapes, clips, refusals


@pytest.mark.parametrize("shape", [(6, 1), (5,), (6, 4)])
def test_behaviour_log_probs_of_any_shape_but_the_completions_are_refused_naming_both(shape):
    logps = torch.zeros(6, 5)
    for key in ("sampling_per_token_logps", "old_per_token_logps"):
        inputs = {"old_per_token_logps": torch.zeros(6, 5), key: torch.zeros(shape)}
        got = re.escape(str(tuple(shape)))
        with pytest.raises(ValueError, match=rf"{key} has shape {got}; expected \(B, T\) = \(6, 5\)"):
            behaviour_logps(inputs, logps)
    assert behaviour_logps({"old_per_token_logps": torch.zeros(6, 5)}, logps).shape == (6, 5)


def test_token_clip_clips_where_trl_does_unless_eps_is_given(tmp_path):
    """TRL 1.16 clips at 1 - epsilon and 1 + epsilon_high (``GRPOConfig``: epsilon 0.2, epsilon_high None, which
    ``GRPOTrainer.__init__`` takes as epsilon): token_clip at TRL's defaults clips at 1 +- 0.2, not 1 +- 0.28."""
    from trl import GRPOConfig

    defaults = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert (defaults.epsilon, defaults.epsilon_high) == (0.2, None)
    t = build(tmp_path, estimator="token_clip")
    assert (t.eps, t.knobs.get("eps_high")) == (0.2, None)  # eps_high None: token_clip's upper clip is eps
    assert (t.epsilon_low, t.epsilon_high) == (0.2, 0.2)  # TRL's own reading of the same config
    t = build(tmp_path, estimator="token_clip", args={"epsilon_high": 0.28})
    assert (t.eps, t.knobs["eps_high"]) == (0.2, 0.28)
    assert build(tmp_path, estimator="token_clip", eps=0.1).eps == 0.1  # given: the user's
    with pytest.raises(ValueError, match="GRPOConfig.epsilon = 0.3 and eps = 0.1 disagree"):
        build(tmp_path, estimator="token_clip", eps=0.1, args={"epsilon": 0.3})
    assert build(tmp_path).eps == 0.28  # a trajectory scheme's cap: TIC's public 1.28, as before


def test_the_refusals_name_the_setting_the_user_set(tmp_path):
    with pytest.raises(ValueError, match=r"does not support use_adaptive_entropy = True: .*use_adaptive_entropy=False"):
        build(tmp_path, args={"use_adaptive_entropy": True})
    with pytest.raises(ValueError, match=r"does not support entropy_coef = 0.01"):
        build(tmp_path, args={"entropy_coef": 0.01})
    trainer = build(tmp_path)  # vLLM cannot run here: the check itself, on a trainer that says it uses vLLM
    stub = SimpleNamespace(**{k: getattr(trainer, k) for k in (
        "args", "num_generations", "beta", "top_entropy_quantile", "off_policy_mask_threshold", "entropy_coef",
        "use_adaptive_entropy")}, use_vllm=True, vllm_importance_sampling_correction=True)
    stub.args = copy.copy(trainer.args)
    stub.args.vllm_importance_sampling_correction = True
    with pytest.raises(ValueError, match=r"vllm_importance_sampling_correction = True: .*sampling_per_token_logps"):
        check_supported(stub)


@pytest.mark.parametrize("kw, match", [
    ({"recipe": "vcpo_exact", "estimator": "gmc"}, "recipe 'vcpo_exact' sets estimator = 'seq_tis'; estimator = 'gmc'"),
    ({"recipe": "vcpo_exact", "knobs": {"C": 2.0}}, r"recipe 'vcpo_exact' sets knobs\['C'\] = 8.0; 2.0"),
    ({"recipe": "vcpo_exact", "args": {"max_grad_norm": 0.5}},
     "clips the gradient at 1.0, but GRPOConfig.max_grad_norm"),
    ({"recipe": "vcpo_fast"}, "unknown recipe 'vcpo_fast'"),
    ({"opob": {"opob_std": "population"}}, r"act on advantage='opob' only, not 'loo'"),
    ({"estimator": "token_clip", "traj_agg": "token-mean"}, "token-level loss with its own aggregation"),
    ({"advantage": "opob", "opob": {"opob_weight": "vcpo"}, "estimator": "topr"}, "estimator 'topr' has none"),
])
def test_a_recipe_or_a_setting_that_cannot_act_is_refused_naming_it(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        build(tmp_path, **kw)


# --------------------------------------------------------------------------- vcpo_exact


def fixed_batch(model, seed: int = 4, P: int = 3, T: int = 5, prompts: int = 3):
    """A trainer RolloutBatch (prompts of one length, completions of several, stale behaviour log-probs, one
    group with equal rewards) and the same rows as TRL's inputs."""
    from llm_runs.rollout import RolloutBatch, completion_logprobs

    g = torch.Generator().manual_seed(seed)
    N = prompts * G
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (prompts, P), generator=g).repeat_interleave(G, 0)
    lengths = torch.randint(2, T + 1, (N,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    completion_ids = (torch.randint(3, vocab, (N, T), generator=g) * mask).long()
    with torch.no_grad():
        logp = completion_logprobs(model, prompt_ids, torch.ones_like(prompt_ids), completion_ids, 1.0, 1)
    behaviour = (logp + 0.4 * torch.randn(N, T, generator=g, dtype=torch.float64)) * mask
    rewards = (torch.rand(N, generator=g) < 0.5).float()
    rewards[:G] = 1.0  # a group with equal rewards
    batch = RolloutBatch(prompt_ids=prompt_ids, prompt_mask=torch.ones_like(prompt_ids), completion_ids=completion_ids,
                         completion_mask=mask, behaviour_logp=behaviour, rewards=rewards,
                         versions=torch.zeros(N, dtype=torch.long), problem_index=torch.arange(N) // G,
                         finished=torch.ones(N, dtype=torch.bool), group_size=G)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": mask.long(), "old_per_token_logps": behaviour, "advantages": torch.zeros(N),
              "opob_rewards": rewards.double(), "group_ids": torch.arange(N) // G}
    return batch, inputs


def test_vcpo_exact_in_trl_steps_as_the_trainers_recipe_on_a_fixed_batch(tmp_path):
    """``TrajectoryGRPOTrainer(recipe="vcpo_exact")`` (seq_tis at C = 8, OPOB with VCPO's weight and population
    std, each response's term over its tokens, ESS sqrt scaling by the StepSizeCallback it adds, the gradient
    clipped at 1.0 as transformers' Trainer clips it) against the toolkit trainer's update with
    ``RECIPES["vcpo_exact"]`` (``llm_runs.update.policy_update``), SGD at lr 1 from the same float64 weights: the
    same OPOB advantages, step factor and parameter step.

    Tolerance: the model is float64 on both sides, and both cast OPOB's advantages to float32 (the test checks
    they are the same floats, or two float32 ulps apart). TRL scores the completions with its chunked log-prob
    kernel, which computes the
    softmax over the V logits and the logit gradient ``onehot - p`` of every token in float32
    (``trl/kernels/chunked_logprob.py``: ``tile.float()``), so each token's term of the gradient carries a relative
    rounding of at most about V float32 ulps (V 2^-24); the step is linear in those terms, so it may differ from the
    trainer's float64 step by that much of its norm (this batch's terms do not cancel by more than a few times; the
    ``vcpo`` recipe's step lies more than 10^3 times farther)."""
    from conftest import tiny

    from llm_runs.integrations.stepsize_hooks import StepSizeCallback
    from llm_runs.stepsize import RECIPES
    from llm_runs.update import policy_update, update_advantages

    cfg = tiny(tmp_path / "cache", **RECIPES["vcpo_exact"])
    model = tiny_qwen3(len(char_tokenizer()), seed=3).double()
    batch, inputs = fixed_batch(model)
    want_adv, _ = update_advantages(model, batch, cfg.advantage, 1.0, cfg)
    mine = copy.deepcopy(model)
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    row = policy_update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, estimator=cfg.estimator,
                        eps=cfg.eps, advantage=cfg.advantage, loss_options=cfg.loss_options(),
                        max_grad_norm=cfg.max_grad_norm, control=cfg)
    want = torch.cat([p.detach().flatten() for p in model.parameters()]) - before

    trainer = build(tmp_path, model=mine, recipe="vcpo_exact", eps=cfg.eps)
    assert (trainer.estimator, trainer.knobs, trainer.advantage, trainer.traj_agg) == ("seq_tis", {"C": 8.0}, "opob",
                                                                                       "token-mean")
    seen = []
    advantages = trainer._advantages
    trainer._advantages = lambda *a, **k: seen.append(advantages(*a, **k)) or seen[-1]
    mine.train()
    trainer.current_gradient_accumulation_steps = 1
    trainer._compute_loss(mine, inputs).backward()
    torch.nn.utils.clip_grad_norm_(mine.parameters(), trainer.args.max_grad_norm)  # transformers' Trainer, then:
    cb = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepSizeCallback))
    trainer.optimizer = torch.optim.SGD(mine.parameters(), lr=1.0)
    cb.on_pre_optimizer_step(trainer.args, trainer.state, trainer.control)
    trainer.optimizer.step()
    cb.on_optimizer_step(trainer.args, trainer.state, trainer.control)
    got = torch.cat([p.detach().flatten() for p in mine.parameters()]) - before

    # OPOB's advantages over each length: float64 values a few float64 ulps apart, each rounded to float32 (one ulp,
    # 2^-23 relative, as the kernel path's rounding falls) then divided by the length in float32 (one more)
    torch.testing.assert_close(seen[0].view_as(want_adv), want_adv, rtol=2.0 ** -22, atol=0)
    assert cb.last["step/lr_scale"] == pytest.approx(row["step/lr_scale"], rel=1e-12) and row["step/lr_scale"] < 0.99
    assert float(want.abs().max()) > 0
    bound = mine.config.vocab_size * 2.0 ** -24 * float(want.norm())
    assert float((got - want).norm()) <= bound
    vcpo_cfg = tiny(tmp_path / "cache", **RECIPES["vcpo"])  # the toolkit's own reading: a step the bound tells apart
    start = copy.deepcopy(mine)
    for p, b in zip(start.parameters(), torch.split(before, [p.numel() for p in start.parameters()])):
        p.data.copy_(b.view_as(p))
    policy_update(start, torch.optim.SGD(start.parameters(), lr=1.0), batch, estimator=vcpo_cfg.estimator,
                  eps=vcpo_cfg.eps, advantage=vcpo_cfg.advantage, loss_options=vcpo_cfg.loss_options(),
                  max_grad_norm=vcpo_cfg.max_grad_norm, control=vcpo_cfg)
    other = torch.cat([p.detach().flatten() for p in start.parameters()]) - before
    assert float((other - want).norm()) > 1e3 * bound
