"""GMC through verl's own training path: ``TrainingWorker`` + the FSDP2 engine on one CPU rank.

The actor is configured from verl's generated PPO config with the README snippet's overrides
(``loss_mode=gmc``, ``external_lib=llm_runs.integrations.verl_plugin``) plus the CPU test's
own (model path, fsdp2, sdpa, float32), built the way verl's ``ActorRolloutRefWorker.init_model``
builds it, and trained for a few updates on a rollout batch whose rows carry real prompt
uids, in the order verl's ``trainer.balance_batch`` leaves them with one data-parallel rank (no
group contiguous), with stale behaviour log-probs. The loss verl
applied is compared with :func:`estimators.losses.trajectory_loss` on the same groups,
computed from the engine's own weights by a separate copy of the model.
"""
from __future__ import annotations

import math
import time
from functools import partial

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_integrations_verl import snippet_overrides, verl_config
from test_verl_group_layout import balance
from transformers import Qwen3Config, Qwen3ForCausalLM

import estimators
from estimators.losses import trajectory_loss
from llm_runs.integrations import verl as verl_integration
from llm_runs.integrations import verl_plugin  # noqa: F401 (importing it installs the plugin, as external_lib does)
from llm_runs.integrations._common import check_contiguous_groups, metric_names
from llm_runs.presets import char_tokenizer

G, PROMPTS, PROMPT_LEN, RESPONSE_LEN, STEPS = 4, 4, 5, 6, 3
B = G * PROMPTS

CPU_OVERRIDES = [  # what the CPU test adds to the README snippet; a GPU cluster keeps verl's defaults here
    "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 refuses CPU parameters
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # no flash-attention on CPU
    "actor_rollout_ref.model.use_remove_padding=False",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",  # exact comparison below
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
    f"actor_rollout_ref.rollout.n={G}",
    f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={2 * G}",  # two micro-batches of two groups
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "actor_rollout_ref.actor.entropy_coeff=0",
]


def tiny_qwen3(path):
    tok = char_tokenizer("0123456789+=")
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=None, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return len(tok)


def build_actor(cfg):
    """verl 0.9.1's ``ActorRolloutRefWorker.init_model`` (actor part), outside Ray: the model
    config (which imports ``external_lib``), the actor config, the ``TrainingWorkerConfig``,
    ``TrainingWorker``, ``reset`` and ``set_loss_fn(partial(ppo_loss, config=actor_config))``."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    ar = cfg.actor_rollout_ref
    model_config = omega_conf_to_dataclass(ar.model)
    actor_config = omega_conf_to_dataclass(ar.actor)
    actor_config.model_config = model_config
    training_config = TrainingWorkerConfig(
        model_type=model_config.get("model_type", "language_model"), model_config=model_config,
        engine_config=actor_config.engine, optimizer_config=actor_config.optim,
        checkpoint_config=actor_config.checkpoint)
    engine = training_config.engine_config
    engine.use_dynamic_bsz = ar.actor.use_dynamic_bsz
    engine.infer_max_token_len_per_gpu = ar.rollout.log_prob_max_token_len_per_gpu
    engine.infer_micro_batch_size_per_gpu = ar.actor.ppo_micro_batch_size_per_gpu
    engine.max_token_len_per_gpu = ar.actor.ppo_max_token_len_per_gpu
    engine.micro_batch_size_per_gpu = ar.actor.ppo_micro_batch_size_per_gpu
    engine.use_remove_padding = model_config.get("use_remove_padding", False)
    verl_integration.init_cpu_process_group()
    worker = TrainingWorker(config=training_config)
    worker.reset()
    worker.set_loss_fn(partial(ppo_loss, config=actor_config))
    return worker, actor_config


def engine_weights(worker) -> dict[str, torch.Tensor]:
    """The engine's current parameters (FSDP2 DTensors gathered), by Hugging Face name."""
    out = {}
    for name, p in worker.engine.module.state_dict().items():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = full.detach().clone().float()
    return out


def response_log_probs(model, input_ids, attention_mask, position_ids):
    """Per-token log-probs of the response tokens (the last RESPONSE_LEN positions)."""
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, 1:, None])[..., 0]
    return logp[:, -RESPONSE_LEN:]


def rollout_batch(vocab: int, seed: int):
    """Padded prompts (left) and responses (right), G responses per prompt, uids, LOO advantages."""
    g = torch.Generator().manual_seed(seed)
    plen = torch.randint(2, PROMPT_LEN + 1, (PROMPTS,), generator=g).repeat_interleave(G)
    pmask = (torch.arange(PROMPT_LEN)[None] >= (PROMPT_LEN - plen)[:, None]).long()
    prompts = torch.randint(2, vocab, (PROMPTS, PROMPT_LEN), generator=g).repeat_interleave(G, 0) * pmask
    rlen = torch.randint(1, RESPONSE_LEN + 1, (B,), generator=g)
    rmask = (torch.arange(RESPONSE_LEN)[None] < rlen[:, None]).long()
    responses = torch.randint(2, vocab, (B, RESPONSE_LEN), generator=g) * rmask
    attention = torch.cat([pmask, rmask], 1)
    scores = torch.tensor([1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0], dtype=torch.float64)
    adv = estimators.advantages(scores.reshape(PROMPTS, G), "loo").reshape(-1).float()
    return {"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention, "position_ids": (attention.cumsum(1) - 1).clamp(min=0),
            "response_mask": rmask, "advantages": adv[:, None] * rmask.float()}, \
        np.array([f"prompt-{i // G}" for i in range(B)], dtype=object), adv


def to_verl(tensors: dict, uids: np.ndarray, rows: torch.Tensor):
    """The batch as verl's trainer hands it to ``update_actor`` (``RayPPOTrainer._update_actor``)."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    proto = DataProto.from_dict(tensors={k: v[rows] for k, v in tensors.items()},
                                non_tensors={"uid": uids[rows.numpy()]}, meta_info={"temperature": 1.0})
    td = left_right_2_no_padding(proto.to_tensordict())
    tu.assign_non_tensor(td, calculate_entropy=False, global_batch_size=B, mini_batch_size=B, epochs=1, seed=0,
                         dataloader_kwargs={"shuffle": False}, compute_loss=True)
    return td


def balanced_rows(attention_mask: torch.Tensor, uids: np.ndarray) -> torch.Tensor:
    """The row order verl 0.9.1's ``RayPPOTrainer._balance_batch`` gives the batch with one rank."""
    from verl import DataProto

    proto = DataProto.from_dict(tensors={"attention_mask": attention_mask, "row": torch.arange(len(uids))},
                                non_tensors={"uid": uids})
    return balance(proto, dp_size=1).batch["row"].clone()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from verl.utils import tensordict_utils as tu

    t0 = time.perf_counter()
    path = tmp_path_factory.mktemp("tiny-qwen3")
    vocab = tiny_qwen3(path)
    overrides = snippet_overrides() + [f"actor_rollout_ref.model.path={path}"] + CPU_OVERRIDES
    cfg = verl_config(overrides)
    OmegaConf.resolve(cfg)
    worker, actor_config = build_actor(cfg)
    reference = Qwen3ForCausalLM.from_pretrained(path, local_files_only=True, attn_implementation="sdpa",
                                                 dtype=torch.float32).eval()
    tensors, uids, adv = rollout_batch(vocab, seed=1)
    g = torch.Generator().manual_seed(2)
    start = engine_weights(worker)
    missing, unexpected = reference.load_state_dict(start, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    fresh = response_log_probs(reference, tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"])
    # stale behaviour log-probs: the policy that sampled was a few versions older
    tensors["old_log_probs"] = (fresh + 0.25 * torch.randn(fresh.shape, generator=g)) * tensors["response_mask"]
    tensors["rollout_log_probs"] = tensors["old_log_probs"]  # the rollout's own (the default ratio's behaviour)
    rows = balanced_rows(tensors["attention_mask"], uids)  # trainer.balance_batch=True, one rank: groups scattered
    steps = []
    for _ in range(STEPS):
        weights = engine_weights(worker)
        reference.load_state_dict(weights, strict=False)
        logp = response_log_probs(reference, tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"])
        expected = trajectory_loss("gmc", logp.double(), tensors["old_log_probs"].double(),
                                   tensors["response_mask"].bool(), adv.double(), G, actor_config.clip_ratio_high)
        out = worker.train_mini_batch(to_verl(tensors, uids, rows))
        steps.append((expected, tu.get(out, "metrics")))
    return {"worker": worker, "start": start, "end": engine_weights(worker), "steps": steps, "uids": uids,
            "rows": rows, "actor_config": actor_config, "seconds": time.perf_counter() - t0}


def test_batch_is_shuffled_and_loss_is_selected_through_config_and_external_lib(trained):
    with pytest.raises(ValueError, match="not contiguous|should be one group"):
        check_contiguous_groups(list(trained["uids"][trained["rows"].numpy()]))
    config = trained["actor_config"]
    assert config.policy_loss.loss_mode == "gmc" and config.rollout_n == G
    loss_fn = trained["worker"].loss_fn
    assert isinstance(loss_fn, verl_integration.EngineLoss) and loss_fn.estimator == "gmc"
    from verl.trainer.ppo import core_algos

    assert core_algos.get_policy_loss_fn("gmc") is verl_integration.make_policy_loss("gmc")


def test_loss_verl_applied_equals_trajectory_loss_on_the_same_groups(trained):
    capped = []
    for step, (expected, metrics) in enumerate(trained["steps"]):
        applied = float(np.sum(metrics["loss"]))  # verl's sum of the micro-batch losses of the mini-batch
        assert applied == pytest.approx(float(expected.loss), abs=1e-6, rel=0), step
        assert float(np.sum(metrics["actor/pg_loss"])) == pytest.approx(float(expected.loss), abs=1e-6, rel=0)
        w = expected.seq_log_ratio.exp()
        capped.append(bool((expected.weights < w - 1e-9).any()))  # some group's mass was over 1 + eps
    assert any(capped), "no group was capped in any step: GMC was not exercised"


def _micro_batches(trained) -> list[list[int]]:
    """The groups of each micro-batch: after regroup_by_uid the groups are in order of first appearance
    in the shuffled batch, two to a micro-batch."""
    shuffled = list(trained["uids"][trained["rows"].numpy()])
    groups = [int(u.split("-")[1]) for u in dict.fromkeys(shuffled)]
    return [groups[k:k + 2] for k in (0, 2)]


def test_stale_metrics_equal_the_diagnostics_of_each_micro_batch(trained):
    """verl averages a policy loss's metrics over micro-batches; after the regrouping the
    micro-batches are the groups in order of first appearance, two groups each."""
    micro = _micro_batches(trained)
    eps = trained["actor_config"].clip_ratio_high
    for expected, metrics in trained["steps"]:
        per_micro = [estimators.diagnostics(expected.seq_log_ratio[g], eps) for g in micro]
        names = metric_names(per_micro[0], prefix="actor/")
        assert names and set(names) <= set(metrics), sorted(set(names) - set(metrics))
        for key in per_micro[0]:
            name = next(iter(metric_names({key: 0.0}, prefix="actor/")))
            want = np.mean([d[key] for d in per_micro])
            # float32 forward passes of two copies of the model: ratios agree to ~1e-6 relative
            assert float(np.mean(metrics[name])) == pytest.approx(want, rel=1e-5, abs=1e-6), name


def test_every_parameter_changed(trained):
    start, end = trained["start"], trained["end"]
    assert set(start) == set(end) and len(start) > 5
    unchanged = [name for name in start if torch.equal(start[name], end[name])]
    assert not unchanged, f"parameters verl did not update: {unchanged}"


def test_the_trainers_ratio_diagnostics_are_logged_under_its_names(trained):
    """The verl run logs stale/chi2, stale/ess, stale/mass_bias and train/weight_max (under verl's
    ``actor/`` prefix), the trainer's names, with values from estimators on the same micro-batches."""
    micro = _micro_batches(trained)
    for expected, metrics in trained["steps"]:
        for name in ("stale/chi2", "stale/ess", "stale/mass_bias", "train/weight_max", "stale/chi2_seq_verl"):
            assert f"actor/{name}" in metrics, name
        w = [expected.seq_log_ratio[g].exp() for g in micro]
        chi2 = np.mean([float((x.double() ** 2).mean() - 1) for x in w])
        cmax = np.mean([float(expected.weights[g].max()) for g in micro])
        assert float(np.mean(metrics["actor/stale/chi2"])) == pytest.approx(chi2, rel=1e-4, abs=1e-6)
        assert float(np.mean(metrics["actor/train/weight_max"])) == pytest.approx(cmax, rel=1e-4)
        assert float(np.mean(metrics["actor/stale/chi2_seq_verl"])) == pytest.approx(chi2, rel=1e-4, abs=1e-6)


def test_every_update_was_a_real_gmc_step(trained):
    """Every step moved the weights with a finite, nonzero gradient, and GMC capped some group."""
    assert any(k.startswith("actor/stale/") for k in trained["steps"][0][1])
    capped = 0
    for exp, m in trained["steps"]:
        c, w = exp.weights, exp.seq_log_ratio.exp()
        capped += int((c < w - 1e-9).any(-1).sum())
        grad = float(np.mean(m["grad_norm"]))
        assert np.isfinite(grad) and grad > 0
    assert capped > 0


def test_a_step_size_control_scales_verl_s_step_and_restores_the_rate(tmp_path):
    """VCPO's ESS scaling (linear rule) installed on verl's engine: the first step of an actor with it
    equals the first step of one without, times the factor it logged (AdamW's step is linear in lr,
    clipping acts before), and the rate is the configured one again after the step. Installed by hand
    (``install_step_control``) and from verl's command line (``+...policy_loss.ess_scaling=linear``, which the
    plugin's ``set_loss_fn`` wrapper installs), the factor and the step are the same."""
    from verl.utils import tensordict_utils as tu

    from llm_runs.integrations.verl.stepsize import install_step_control

    vocab = tiny_qwen3(tmp_path)
    base = snippet_overrides() + [f"actor_rollout_ref.model.path={tmp_path}"] + CPU_OVERRIDES
    cfg = verl_config(base)
    OmegaConf.resolve(cfg)
    from_cli = verl_config(base + ["+actor_rollout_ref.actor.policy_loss.ess_scaling=linear"])
    OmegaConf.resolve(from_cli)
    tensors, uids, _ = rollout_batch(vocab, seed=1)
    g = torch.Generator().manual_seed(2)
    tensors["old_log_probs"] = (torch.log_softmax(torch.randn(B, RESPONSE_LEN, vocab, generator=g), -1)[..., 0]
                                * tensors["response_mask"])  # far from the policy: ratios far from 1
    tensors["rollout_log_probs"] = tensors["old_log_probs"]
    rows = balanced_rows(tensors["attention_mask"], uids)
    deltas, scales = [], []
    for control in ("none", "by hand", "from the command line"):
        worker, actor_config = build_actor(from_cli if control == "from the command line" else cfg)
        installed = getattr(worker.engine, "gmc_step_control", None)
        assert (installed is not None) == (control == "from the command line"), control
        before = engine_weights(worker)
        if control == "by hand":
            install_step_control(worker.engine, estimator="gmc", eps=actor_config.clip_ratio_high, ess_scaling="linear")
        out = worker.train_mini_batch(to_verl(tensors, uids, rows))
        after = engine_weights(worker)
        deltas.append(torch.cat([(after[k] - before[k]).flatten() for k in sorted(before)]))
        metrics = tu.get(out, "metrics")
        if control != "none":
            scales.append(worker.engine.step_control_last["step/lr_scale"])
            assert worker.engine.optimizer.param_groups[0]["lr"] == pytest.approx(actor_config.optim.lr)
            # the factor reaches verl's metrics once per mini-batch, where verl logs grad_norm
            assert metrics["actor/step/lr_scale"] == [worker.engine.step_control_last["step/lr_scale"]]
            assert metrics["actor/step/ess_ratio"] == [worker.engine.step_control_last["step/ess_ratio"]]
        else:
            assert not [k for k in metrics if "step/" in k]
    s = scales[0]
    assert 0 < s < 0.99 and scales[1] == s
    torch.testing.assert_close(deltas[1], s * deltas[0], rtol=1e-3, atol=1e-7)
    torch.testing.assert_close(deltas[2], deltas[1], rtol=0, atol=0)


def test_the_drift_reader_reads_the_plugins_metrics_from_verls_own_log(trained, tmp_path, monkeypatch):
    """The three updates' metrics reduced and named as verl's trainer does (``reduce_metrics`` of the worker's
    lists, ``rename_dict(..., "actor/")``, ``RayPPOTrainer._update_actor``) and written by verl's own file logger
    (steps from 1, as ``RayPPOTrainer.fit`` counts them): ``python -m llm_runs.drift --stack verl`` reads the KL,
    chi^2 and ESS axes from the plugin's names, each the mean over the micro-batches of the batch statistics."""
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict
    from verl.utils.tracking import FileLogger

    from llm_runs import drift
    from llm_runs.integrations._common import VOCABULARY

    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    log = FileLogger("project", "run")
    for step, (_, metrics) in enumerate(trained["steps"], 1):
        log.log(data=reduce_metrics(rename_dict(dict(metrics), "actor/")), step=step)
    log.finish()
    m, _ = drift.read_export(path, "verl")
    s = drift.summary(m, 0, "verl")
    assert (s["kl_column"], s["chi2_column"], s["ess_ratio_column"]) == (
        "actor/mech/kl", "actor/stale/chi2", "actor/drift/ess_ratio")
    micro = _micro_batches(trained)
    ess, kl = [], []
    for expected, metrics in trained["steps"]:
        w = [expected.seq_log_ratio[g].double().exp().reshape(-1) for g in micro]
        ess.append(np.mean([float(x.sum() ** 2 / ((x * x).sum() + 1e-8) / x.numel()) for x in w]))
        kl.append(float(np.mean(metrics["actor/mech/kl"])))
        assert {f"actor/{k}" for k in VOCABULARY if k != "step/lr_scale"} <= set(metrics)
    # float32 forward passes of two copies of the model: the ratios agree to ~1e-6 relative
    assert s["ess_ratio_all"] == pytest.approx(float(np.median(ess)), rel=1e-5)
    assert s["kl_all"] == pytest.approx(float(np.median(kl)), rel=1e-12) and s["kl_all"] > 0
    assert 0 < s["ess_ratio_all"] < 1 and math.isfinite(s["chi2_all"])
    # verl's steps count from 1: at delay 1 the early window is updates 1 and 2 (steps 2 and 3), not all three
    late = drift.summary(m, 1, "verl")
    assert late["kl_early_rows"] == 2 and late["kl_early"] == pytest.approx(float(np.median(kl[1:])), rel=1e-12)
