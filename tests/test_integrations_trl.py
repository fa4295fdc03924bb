"""TrajectoryGRPOTrainer: three steps of a tiny Qwen3 on CPU, loss checked against the core surrogate."""
from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, TrainerCallback
from trl import GRPOConfig

import estimators
from estimators.losses import policy_loss
from llm_runs.integrations.trl import TrajectoryGRPOTrainer, shuffle_groups

CHARS = "abcdefghij"
G = 4  # num_generations
ESTIMATOR, EPS = "gmc", 0.1


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def tiny_qwen3(vocab_size: int, seed: int = 0) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):  # the initialisation draws from a seeded copy; the global RNG is untouched
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(cfg)


def reward(completions, **kwargs):
    """Continuous, so every group has distinct rewards and non-zero advantages."""
    return [c.count("a") / (1 + len(c)) + 0.1 * len(c) for c in completions]


def make_args(out_dir, **overrides) -> GRPOConfig:
    kw = {"output_dir": str(out_dir), "use_cpu": True, "report_to": "none", "logging_steps": 1, "max_steps": 3,
          "per_device_train_batch_size": 8, "num_generations": G, "steps_per_generation": 2,
          "max_completion_length": 6, "learning_rate": 1e-2, "save_strategy": "no", "seed": 0, "bf16": False,
          "gradient_checkpointing": False, "temperature": 1.0}
    kw.update(overrides)
    return GRPOConfig(**kw)


class RecordingTrainer(TrajectoryGRPOTrainer):
    """Records, for every loss call, the batch, the returned loss and an independently computed reference."""

    records: list

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        with torch.no_grad():
            prompt_len = inputs["prompt_ids"].shape[1]
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            logits = model(input_ids=ids, attention_mask=att).logits[:, prompt_len - 1:-1]
            logp = torch.log_softmax(logits.double(), -1).gather(-1, inputs["completion_ids"][..., None])[..., 0]
            old = inputs.get("old_per_token_logps")
            old = logp if old is None else old.double()
            ref = policy_loss(ESTIMATOR, logp, old, inputs["completion_mask"], inputs["advantages"].double(), G, EPS)
        self.records.append({"inputs": {k: v for k, v in inputs.items()}, "loss": float(loss.detach()),
                             "ref": ref, "accum": self.current_gradient_accumulation_steps})
        return loss


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tok = char_tokenizer()
    model = tiny_qwen3(len(tok))
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh", "ij", "ba", "dc", "fe"]})
    trainer = RecordingTrainer(model=model, reward_funcs=reward, args=make_args(tmp_path_factory.mktemp("trl")),
                               train_dataset=ds, processing_class=tok, estimator=ESTIMATOR, eps=EPS)
    trainer.records = []
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    return trainer, tok, before


def test_three_steps_change_every_parameter(trained):
    trainer, _, before = trained
    assert trainer.state.global_step == 3 and len(trainer.records) == 3
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(p.detach(), before[n])]
    assert unchanged == []


def test_per_step_loss_is_the_core_surrogate(trained):
    trainer, tok, _ = trained
    for rec in trainer.records:
        assert rec["loss"] == pytest.approx(float(rec["ref"].loss) / rec["accum"], abs=1e-6)
        inputs = rec["inputs"]
        # the batch is whole groups of one prompt each, with leave-one-out advantages of the reward
        ids = inputs["group_ids"].tolist()
        assert ids[::G] == ids[G - 1::G] and len(set(ids)) == len(ids) // G
        prompts = tok.batch_decode(inputs["prompt_ids"], skip_special_tokens=True)
        assert all(len(set(prompts[i:i + G])) == 1 for i in range(0, len(prompts), G))
        completions = tok.batch_decode(inputs["completion_ids"], skip_special_tokens=True)
        r = torch.tensor(reward(completions), dtype=torch.float64).reshape(-1, G)
        assert torch.allclose(inputs["advantages"].double().reshape(-1, G), estimators.advantages(r, "loo"), atol=1e-5)
    # steps_per_generation=2: the second slice of a generation batch is one policy version stale
    stale = trainer.records[1]["ref"].seq_log_ratio
    assert float(stale.abs().max()) > 1e-3
    assert float(trainer.records[0]["ref"].seq_log_ratio.abs().max()) < 1e-5
    logged = [h for h in trainer.state.log_history if "stale/mass_cap_frac" in h]
    assert len(logged) == 3
    assert logged[1]["stale/log_ratio_max"] == pytest.approx(float(stale.max()), abs=1e-5)
    # the trainer's theory columns under the trainer's names, checked against estimators
    w = stale.double().exp()
    assert logged[1]["stale/chi2"] == pytest.approx(float((w**2).mean() - 1), rel=1e-6, abs=1e-9)
    assert logged[1]["stale/chi2_seq_verl"] == pytest.approx(logged[1]["stale/chi2"], rel=1e-9, abs=1e-12)
    c = estimators.weights(trainer.estimator, stale.double(), trainer.eps)
    assert logged[1]["weight_max"] == pytest.approx(float(c.max()), rel=1e-5)  # train/weight_max, as TRL logs it
    assert logged[1]["stale/mass_bias"] == pytest.approx(float((w - c).abs().mean()), rel=1e-5, abs=1e-9)
    assert {"stale/ess", "stale/mass_bias_bound", "stale/chi2_token"} <= set(logged[1])
    # the mechanism diagnostics that need only the ratios, with the trainer's names
    assert logged[1]["mech/lambda_min"] == pytest.approx(
        float(estimators.gmc_lambda(stale.double(), trainer.eps).min()), rel=1e-6)
    assert logged[1]["mech/kl"] >= 0 and logged[0]["mech/kl"] == pytest.approx(0.0, abs=1e-6)


def test_split_group_is_refused(trained, tmp_path):
    trainer, tok, _ = trained
    inputs = trainer.records[1]["inputs"]
    n = inputs["completion_ids"].shape[0]
    rows = torch.roll(torch.arange(n), 1)  # every block of G rows now mixes two groups
    broken = {k: (v[rows] if isinstance(v, torch.Tensor) and v.ndim > 0 else v) for k, v in inputs.items()}
    with pytest.raises(ValueError, match="split or not contiguous"):
        TrajectoryGRPOTrainer._compute_loss(trainer, trainer.model, broken)

    # group-preserving shuffle keeps blocks whole
    g = torch.Generator().manual_seed(0)
    shuffled = shuffle_groups(dict(inputs), G, generator=g)
    ids = shuffled["group_ids"].tolist()
    assert all(len(set(ids[i:i + G])) == 1 for i in range(0, n, G))

    # a per-device batch that cannot hold whole groups is refused up front
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef"]})
    with pytest.raises(ValueError, match="per_device_train_batch_size = 6 is not a multiple of num_generations = 4"):
        TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, processing_class=tok,
                              args=make_args(tmp_path, per_device_train_batch_size=6), train_dataset=ds)


def test_every_registered_loss_runs_through_the_adapter(trained):
    """The adapter takes every name of the registry (trajectory schemes and token-level losses)."""
    from estimators.losses import check_options, loss_names

    trainer, _, _ = trained
    inputs = trainer.records[1]["inputs"]
    saved = trainer.estimator, trainer.knobs
    try:
        for name in loss_names():
            trainer.estimator, trainer.knobs = name, check_options(name, None)
            loss = TrajectoryGRPOTrainer._compute_loss(trainer, trainer.model, inputs)
            assert torch.isfinite(loss), name
            assert trainer.last_loss_output.seq_log_ratio.shape == (inputs["completion_ids"].shape[0] // G, G)
    finally:
        trainer.estimator, trainer.knobs = saved
    assert set(estimators.SCHEMES) <= set(loss_names())
    assert "stale/mass_cap_frac" in trainer._metrics["train"]


def test_mask_truncated_completions_is_refused_up_front(tmp_path):
    tok = char_tokenizer()
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"]})
    with pytest.raises(ValueError, match="does not support mask_truncated_completions = True"):
        TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, processing_class=tok,
                              args=make_args(tmp_path, mask_truncated_completions=True), train_dataset=ds)


def test_knobs_reach_the_loss_and_seq_geo_masks_length_comes_from_the_batch(trained):
    """seq_geo_mask ran with L = 1 whatever the completions' length unless L was given: L is now the
    batch's completion length (all completions of one length), refused by name when they differ; the
    knobs given reach the loss, and an unknown knob is refused at construction."""
    trainer, _, _ = trained
    inputs = dict(trainer.records[1]["inputs"])
    T = inputs["completion_ids"].shape[1]
    saved = trainer.estimator, trainer.knobs
    try:
        trainer.estimator, trainer.knobs = "seq_geo_mask", {"lo": 0.5, "hi": 2.0}
        inputs["completion_mask"] = torch.ones_like(inputs["completion_mask"])  # every completion has T tokens
        TrajectoryGRPOTrainer._compute_loss(trainer, trainer.model, inputs)
        out = trainer.last_loss_output
        expected = estimators.weights("seq_geo_mask", out.seq_log_ratio.double(), trainer.eps, lo=0.5, hi=2.0,
                                      length=float(T))
        assert torch.equal(out.weights.double(), expected)
        inputs["completion_mask"][0, -1] = 0  # one completion a token shorter
        with pytest.raises(ValueError, match=r"seq_geo_mask: its knob length .* set length explicitly"):
            TrajectoryGRPOTrainer._compute_loss(trainer, trainer.model, inputs)
        trainer.knobs = {"lo": 0.5, "hi": 2.0, "length": 3.0}  # given: used as it is
        TrajectoryGRPOTrainer._compute_loss(trainer, trainer.model, inputs)
        assert torch.equal(trainer.last_loss_output.weights.double(), estimators.weights(
            "seq_geo_mask", trainer.last_loss_output.seq_log_ratio.double(), trainer.eps, lo=0.5, hi=2.0, length=3.0))
    finally:
        trainer.estimator, trainer.knobs = saved
    with pytest.raises(ValueError, match=r"'gmc_cap' takes no option\(s\) \['kapa'\]"):
        TrajectoryGRPOTrainer(estimator="gmc_cap", knobs={"kapa": 2.0})


def test_the_step_size_callback_scales_the_step_and_restores_the_rate(tmp_path):
    """VCPO's ESS sqrt scaling as a TRL callback: with stale samples (steps_per_generation = 2) the second
    step of each generation has ratios != 1, its factor is logged, the learning rate the optimiser holds
    after each step is the scheduler's own, and a zero-scale control would leave the weights unchanged."""
    from llm_runs.integrations.stepsize_hooks import StepSizeCallback

    tok = char_tokenizer()
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh", "ij", "ba", "dc", "fe"]})
    trainer = TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, args=make_args(tmp_path),
                                    train_dataset=ds, processing_class=tok, estimator="is", eps=EPS)
    cb = StepSizeCallback(trainer, ess_scaling="sqrt")
    trainer.add_callback(cb)
    during, after = [], []

    class Spy(TrainerCallback):  # runs after cb: sees the scaled rate before the step, the restored one after
        def on_pre_optimizer_step(self, args, state, control, **kw):
            during.append((trainer.optimizer.param_groups[0]["lr"], trainer.lr_scheduler.get_last_lr()[0],
                           cb.last["step/lr_scale"]))

        def on_optimizer_step(self, args, state, control, **kw):
            after.append((trainer.optimizer.param_groups[0]["lr"], trainer.lr_scheduler.get_last_lr()[0]))

    trainer.add_callback(Spy())
    trainer.train()
    logged = [h for h in trainer.state.log_history if "step/lr_scale" in h]
    assert len(logged) == 3 and all(0 < h["step/lr_scale"] <= 1 for h in logged)
    assert all(0 < h["step/ess_ratio"] <= 1 + 1e-9 for h in logged)
    assert any(s < 1 for _, _, s in during)  # stale samples: some step was reduced
    assert all(lr == pytest.approx(base * s) for lr, base, s in during)
    assert all(lr == base for lr, base in after) and cb._base is None
    with pytest.raises(ValueError, match="no control on"):
        StepSizeCallback(trainer)
    with pytest.raises(ValueError, match="unknown ess_scaling 'cube'"):
        StepSizeCallback(trainer, ess_scaling="cube")


# --------------------------------------------------------------------------- the rollout's ratio, TRL's settings


class SamplerTrainer(TrajectoryGRPOTrainer):
    """A sampler whose log-probs differ from the trainer's recomputed ones by a per-row shift (as vLLM's
    do): the batch carries ``sampling_per_token_logps``, as trl 1.16 stores them; every loss call is kept."""

    calls: list

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        old = out["old_per_token_logps"]
        shift = torch.linspace(-0.4, 0.5, old.shape[0], dtype=old.dtype)[:, None]
        out["sampling_per_token_logps"] = (old + shift) * out["completion_mask"]
        return out

    def _compute_loss(self, model, inputs):
        with torch.no_grad():  # sum_t log pi_theta of each completion, independently of the adapter
            prompt_len = inputs["prompt_ids"].shape[1]
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            logits = model(input_ids=ids, attention_mask=att).logits[:, prompt_len - 1:-1]
            logp = torch.log_softmax(logits.double(), -1).gather(-1, inputs["completion_ids"][..., None])[..., 0]
            logp = (logp * inputs["completion_mask"]).sum(-1)
        loss = super()._compute_loss(model, inputs)
        self.calls.append((dict(inputs), self.last_loss_output, {k: v[-1] for k, v in self._metrics["train"].items()},
                           logp))
        return loss


@pytest.mark.parametrize("behaviour", ["rollout", "recomputed"])
def test_the_ratio_is_taken_against_the_samplers_log_probs(tmp_path, behaviour):
    """behaviour='rollout' (the default): the trajectory ratio, GMC's weights and the logged ESS are those of
    pi_theta / pi_sampler; 'recomputed' gives TRL's pi_theta / pi_old, and the two differ on this batch."""
    tok = char_tokenizer()
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh", "ij", "ba", "dc", "fe"]})
    trainer = SamplerTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, args=make_args(tmp_path, max_steps=1),
                             train_dataset=ds, processing_class=tok, estimator=ESTIMATOR, eps=EPS, behaviour=behaviour)
    trainer.calls = []
    trainer.train()
    assert trainer.calls
    for inputs, out, logged, logp in trainer.calls:
        mask = inputs["completion_mask"]
        vs_sampler = (logp - (inputs["sampling_per_token_logps"].double() * mask).sum(-1)).reshape(-1, G)
        vs_old = (logp - (inputs["old_per_token_logps"].double() * mask).sum(-1)).reshape(-1, G)
        want = vs_sampler if behaviour == "rollout" else vs_old
        other = vs_old if behaviour == "rollout" else vs_sampler
        got = out.seq_log_ratio.double()
        if behaviour == "rollout":
            assert torch.allclose(got, vs_sampler, atol=1e-5)
        else:
            assert torch.allclose(got, vs_old, atol=1e-5)
        assert (want - other).abs().max() > 0.1  # the two ratios differ on this batch
        w_want = estimators.weights(ESTIMATOR, want, EPS)
        w_other = estimators.weights(ESTIMATOR, other, EPS)
        assert torch.allclose(out.weights.double(), w_want, atol=1e-5)
        assert (w_want - w_other).abs().max() > 1e-2  # GMC's weights move with the behaviour log-probs
        ess = estimators.diagnostics(want, EPS)["ess_frac_mean"]
        assert logged["stale/ess"] == pytest.approx(ess, rel=1e-5)
        assert abs(estimators.diagnostics(other, EPS)["ess_frac_mean"] - ess) > 1e-3


def test_behaviour_falls_back_to_the_recomputed_log_probs_and_takes_them_where_the_sampler_gave_nan():
    from llm_runs.integrations.trl import behaviour_logps

    logps = torch.zeros(2, 3)
    old = torch.full((2, 3), -1.0)
    sampled = torch.tensor([[-2.0, float("nan"), -2.0], [-2.0, -2.0, -2.0]])
    assert torch.equal(behaviour_logps({"old_per_token_logps": old}, logps), old)
    assert torch.equal(behaviour_logps({}, logps), logps)
    got = behaviour_logps({"old_per_token_logps": old, "sampling_per_token_logps": sampled}, logps)
    assert got.tolist() == [[-2.0, -1.0, -2.0], [-2.0, -2.0, -2.0]]
    assert torch.equal(behaviour_logps({"old_per_token_logps": old, "sampling_per_token_logps": sampled}, logps,
                                       "recomputed"), old)


@pytest.mark.parametrize("setting, value, message", [
    ("loss_type", "grpo", r"GRPOConfig.loss_type = 'grpo'.*estimator"),
    ("importance_sampling_level", "sequence", r"importance_sampling_level = 'sequence'.*gspo"),
    ("epsilon", 0.1, r"GRPOConfig.epsilon = 0.1.*lower clip"),
    ("delta", 2.0, r"GRPOConfig.delta = 2.0"),
    ("scale_rewards", "none", r"scale_rewards = 'none'.*drgrpo"),
    ("sapo_temperature_pos", 2.0, r"sapo_temperature_pos = 2.0 belongs to TRL's 'sapo'.*tau_pos"),
])
def test_trls_loss_settings_the_adapter_does_not_implement_are_refused(tmp_path, setting, value, message):
    tok = char_tokenizer()
    with pytest.raises(ValueError, match=message):
        TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward,
                              args=make_args(tmp_path, **{setting: value}), processing_class=tok,
                              train_dataset=Dataset.from_dict({"prompt": ["ab"] * 8}))


def test_trls_settings_with_the_same_meaning_are_mapped(tmp_path):
    tok = char_tokenizer()
    ds = Dataset.from_dict({"prompt": ["ab"] * 8})

    def build(estimator="gmc", **kw):
        eps = kw.pop("eps", None)
        knobs = kw.pop("knobs", None)
        return TrajectoryGRPOTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward, args=make_args(tmp_path, **kw),
                                     processing_class=tok, train_dataset=ds, estimator=estimator, eps=eps, knobs=knobs)

    assert build(epsilon_high=0.35).eps == 0.35  # the cap 1 + eps is TRL's upper clip
    assert build().eps == 0.28
    t = build("token_clip", epsilon=0.1, epsilon_high=0.3)
    assert (t.eps, t.knobs["eps_high"]) == (0.1, 0.3)
    assert build("sapo", sapo_temperature_neg=2.0).knobs == {"tau_neg": 2.0}
    assert build("vespo", vespo_k_pos=1.5).knobs == {"k_pos": 1.5}
    with pytest.raises(ValueError, match="epsilon_high = 0.35 and eps = 0.2 disagree"):
        build(epsilon_high=0.35, eps=0.2)
    with pytest.raises(ValueError, match=r"sapo_temperature_neg = 2.0 and knobs\['tau_neg'\] = 1.5 disagree"):
        build("sapo", sapo_temperature_neg=2.0, knobs={"tau_neg": 1.5})


def test_the_step_size_callback_takes_every_accumulated_micro_batch_and_the_estimator(tmp_path):
    """gradient_accumulation_steps = 2: the factor is step_scale's on the ratios of both loss calls of the step."""
    from llm_runs.integrations.stepsize_hooks import StepSizeCallback
    from llm_runs.stepsize import StepControl, step_scale

    tok = char_tokenizer()
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh", "ij", "ba", "dc", "fe"]})
    trainer = SamplerTrainer(model=tiny_qwen3(len(tok)), reward_funcs=reward,
                             args=make_args(tmp_path, max_steps=2, gradient_accumulation_steps=2,
                                            per_device_train_batch_size=4, steps_per_generation=4),
                             train_dataset=ds, processing_class=tok, estimator="gmc", eps=EPS)
    trainer.calls = []
    cb = StepSizeCallback(trainer, estimator="gmc", ess_scaling="sqrt", gmc_step=True)
    trainer.add_callback(cb)
    seen = []

    class Spy(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):
            seen.append((len(trainer.calls), dict(cb.last)))

    trainer.add_callback(Spy())
    trainer.train()
    assert [n for n, _ in seen] == [2, 4]
    control = StepControl(estimator="gmc", eps=EPS, ess_scaling="sqrt", gmc_step=True)
    for k, (n, last) in enumerate(seen):
        calls = trainer.calls[n - 2:n]
        lr = torch.cat([c[1].seq_log_ratio.double() for c in calls])
        w = torch.cat([c[1].weights.double() for c in calls])
        want = step_scale(control, lr, w)
        assert last == pytest.approx(want, rel=1e-12)
        alone = step_scale(control, calls[-1][1].seq_log_ratio.double(), calls[-1][1].weights.double())
        assert alone["step/lr_scale"] != pytest.approx(want["step/lr_scale"], rel=1e-6)
    with pytest.raises(ValueError, match="StepSizeCallback\\(estimator='is'\\) but the trainer's estimator is 'gmc'"):
        StepSizeCallback(trainer, estimator="is", ess_scaling="sqrt")
