"""The staleness study's groundwork: the scratchpad task (horizon knob), theory-in-the-loop metrics, the KV-cache
decode loop and the theory columns the trainer logs."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from llm_runs.tasks import ArithmeticTask, ScratchpadTask, build_task
from llm_runs.theory import (
    SCHEME_BOUNDS,
    DirectionTracker,
    mass_bias_bound,
    ratio_metrics,
)

# --------------------------------------------------------------------------- task


def test_scratchpad_writes_every_partial_sum_with_a_fixed_horizon():
    t = ScratchpadTask(digits=1, terms=7, heldout_size=50, train_size=500, seed=3)
    assert t.horizon == 18 and t.max_answer_tokens == 17
    for p in t.train[:50] + t.heldout:
        ops = [int(x) for x in p.prompt[:-1].split("+")]
        fields = p.answer.split(",")
        assert len(ops) == 7 and len(fields) == 6 and len(p.answer) + 1 == t.horizon
        assert [int(f) for f in fields] == list(np.cumsum(ops)[1:])
        assert all(len(f) == 2 for f in fields)
        assert set(p.prompt + p.answer) <= set(t.alphabet)
    assert {p.prompt for p in t.train}.isdisjoint({p.prompt for p in t.heldout})
    again = ScratchpadTask(digits=1, terms=7, heldout_size=50, train_size=500, seed=3)
    assert again.train == t.train and again.heldout == t.heldout
    # the same problems as the arithmetic task of the same knobs (only the completion differs)
    base = ArithmeticTask(digits=1, terms=7, heldout_size=50, train_size=500, seed=3)
    assert [p.prompt for p in base.heldout] == [p.prompt for p in t.heldout]
    assert ScratchpadTask(digits=2, terms=3, heldout_size=5, seed=0).horizon == 2 * 4  # W = len("297") = 3


def test_scratchpad_rewards_are_terminal_and_checked():
    worked = ScratchpadTask(terms=4, heldout_size=5, train_size=20, seed=0)
    answer = ScratchpadTask(terms=4, heldout_size=5, train_size=20, seed=0, check="answer")
    p = worked.train[0]
    good = p.answer
    last = good.rsplit(",", 1)[1]
    wrong_step = ("99" if good[:2] != "99" else "98") + good[2:]  # a wrong partial sum, right answer
    assert worked.reward(p, good, True) == 1.0 and answer.reward(p, good, True) == 1.0
    assert worked.reward(p, good, False) == 0.0 and answer.reward(p, good, False) == 0.0
    assert worked.reward(p, wrong_step, True) == 0.0 and answer.reward(p, wrong_step, True) == 1.0
    assert answer.reward(p, last, True) == 0.0  # the bare answer is not the worked format
    assert answer.reward(p, good[:-1] + ("0" if good[-1] != "0" else "1"), True) == 0.0
    with pytest.raises(ValueError, match="unknown scratchpad check 'x'"):
        ScratchpadTask(terms=4, check="x")
    with pytest.raises(ValueError, match="terms must be >= 2"):
        ScratchpadTask(terms=1)


def test_scratchpad_is_registered_beside_the_other_tasks():
    from llm_runs.config import resolve_config

    task = build_task(resolve_config(task="scratchpad", terms=4, heldout_size=10, train_size=50))
    assert isinstance(task, ScratchpadTask) and task.name == "scratchpad" and task.horizon == 9
    assert build_task(resolve_config(task="scratchpad_answer", terms=4, heldout_size=10,
                                     train_size=50)).check == "answer"
    p = task.heldout[0]  # the worked solution is the only rewarded completion (so pc is P(r = 1))
    assert [c for c in (p.answer, p.answer[::-1], "00" + p.answer[2:]) if task.reward(p, c, True)] == [p.answer]


# --------------------------------------------------------------------------- theory in the loop


def _groups(seed=0, n=6, G=4, scale=0.8):
    return torch.as_tensor(np.random.default_rng(seed).normal(0.0, scale, (n, G)))


@pytest.mark.parametrize("scheme", ["gmc", "tic_trunc", "tic_mask", "stale", "is"])
def test_ratio_metrics_match_their_definitions(scheme):
    import estimators

    lr, eps = _groups(), 0.2
    G = lr.shape[1]
    w = np.exp(lr.numpy())
    c = estimators.weights(scheme, lr, eps).numpy()
    tok = torch.as_tensor(np.random.default_rng(1).normal(0, 0.3, (lr.numel(), 5)))
    mask = torch.ones_like(tok)
    mask[:, 4] = 0
    row = ratio_metrics(lr, torch.as_tensor(c), tok, mask, scheme, eps)
    chi2 = float(np.mean(w**2) - 1)
    assert row["stale/chi2"] == pytest.approx(chi2, rel=1e-12)
    assert row["stale/mu4"] == pytest.approx(float(np.mean((w - 1) ** 4)), rel=1e-12)
    t = tok.numpy()[:, :4]
    assert row["stale/chi2_token"] == pytest.approx(float(np.mean(np.exp(2 * t)) - 1), rel=1e-12)
    wbar = w.mean(1)
    expected_m = {"gmc": np.mean(np.maximum(wbar - 1 - eps, 0)),
                  "tic_trunc": np.mean(np.maximum(w - 1 - eps, 0)),
                  "tic_mask": np.mean(w * (w > 1 + eps)),
                  "stale": np.mean(np.abs(w - 1)), "is": 0.0}[scheme]
    assert row["stale/mass_bias"] == pytest.approx(expected_m, rel=1e-10, abs=1e-15)
    mu4 = float(np.mean((w - 1) ** 4))
    expected_bound = {"gmc": chi2 / (4 * G * eps), "tic_trunc": chi2 / (4 * eps),
                      "tic_mask": math.sqrt(1 + chi2) * math.sqrt(mu4) / eps**2, "stale": math.sqrt(chi2)}
    if scheme in expected_bound:
        assert row["stale/mass_bias_bound"] == pytest.approx(expected_bound[scheme], rel=1e-10)
    else:
        assert math.isnan(row["stale/mass_bias_bound"])
    assert set(SCHEME_BOUNDS) == set(expected_bound)


def test_ratio_metrics_without_weights_and_on_policy():
    lr = torch.zeros(3, 4, dtype=torch.float64)
    row = ratio_metrics(lr, None, torch.zeros(12, 3), torch.ones(12, 3), "token_clip", 0.2)
    assert row == {"stale/chi2": 0.0, "stale/mu4": 0.0, "stale/chi2_token": 0.0}
    huge = torch.tensor([[800.0, 0.0]], dtype=torch.float64)  # w = e^800 overflows float64: chi2 is inf, not NaN
    assert ratio_metrics(huge, None, torch.zeros(2, 1), torch.ones(2, 1), "is", 0.2)["stale/chi2"] == math.inf
    assert math.isnan(mass_bias_bound("gmc", math.inf, 0.0, 8, 0.2))
    assert mass_bias_bound("gmc", -0.3, 0.0, 8, 0.2) == 0.0 and math.isnan(mass_bias_bound("is", 1.0, 1.0, 8, 0.2))
    with pytest.raises(ValueError, match="eps must be > 0"):
        mass_bias_bound("gmc", 1.0, 1.0, 8, 0.0)


def test_direction_tracker_cosines_and_state_round_trip():
    model = torch.nn.Linear(2, 1, bias=False)
    tr = DirectionTracker()

    def step(grad, delta):
        tr.before(model)
        model.weight.grad = torch.tensor([grad], dtype=torch.float32)
        with torch.no_grad():
            model.weight += torch.tensor([delta])
        return tr.after(model, skipped=False)

    first = step([1.0, 0.0], [0.5, 0.5])
    assert math.isnan(first["train/grad_cos"]) and math.isnan(first["train/update_cos"])
    second = step([1.0, 1.0], [-0.5, -0.5])
    assert second["train/grad_cos"] == pytest.approx(1 / math.sqrt(2))
    assert second["train/update_cos"] == pytest.approx(-1.0)
    clone = DirectionTracker()
    clone.load_state_dict(tr.state_dict())
    tr = clone  # the closure step() now drives the restored tracker
    third = step([0.0, 2.0], [1.0, 1.0])
    assert third["train/grad_cos"] == pytest.approx(1 / math.sqrt(2)) \
        and third["train/update_cos"] == pytest.approx(-1.0)
    tr.before(model)
    assert tr.after(model, skipped=True) == {} and tr.prev_grad is None


# --------------------------------------------------------------------------- decode loop and trainer


TINY_MODEL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("study-cache")


def _tiny(cache_dir, **kw):
    from llm_runs.config import resolve_config

    base = {"task": "scratchpad", "terms": 4, "model_kwargs": TINY_MODEL, "warm_start_steps": 30,
            "warm_start_lr": 3e-3, "warm_start_batch": 64, "heldout_size": 20, "train_size": 400,
            "eval_train_size": 0, "prompts_per_step": 4, "group_size": 4, "steps": 4, "eval_every": 0,
            "checkpoint_every": 0, "cache_dir": str(cache_dir)}
    return resolve_config({**base, **kw})


def test_decode_loop_emits_what_generate_emits(cache):
    from transformers import GenerationConfig, LogitsProcessorList

    from llm_runs.presets import load_pretrained
    from llm_runs.rollout import (
        SeededSampler,
        decode,
        encode_prompts,
        eos_ids,
        key_uniforms,
        sample_keys,
    )
    from llm_runs.warmstart import get_warm_start

    cfg = _tiny(cache)
    task = build_task(cfg)
    model, tok = load_pretrained(get_warm_start(cfg, task, log=lambda m: None).path)
    G, T = 4, task.horizon
    prompts = [p.prompt for p in task.train[:5] for _ in range(G)]
    ids, attn = encode_prompts(tok, prompts, "cpu")
    keys = sample_keys(7, 3, 5, G)
    ref = SeededSampler(ids.shape[1], key_uniforms(keys, T))
    gc = GenerationConfig(max_new_tokens=T, do_sample=False, num_beams=1, use_cache=True,
                          pad_token_id=tok.pad_token_id, eos_token_id=eos_ids(model, tok))
    model.eval()
    want = model.generate(input_ids=ids, attention_mask=attn, generation_config=gc,
                          logits_processor=LogitsProcessorList([ref]))[:, ids.shape[1]:]
    for group in (G, 1):
        ours = SeededSampler(ids.shape[1], key_uniforms(keys, T))
        got = decode(model, tok, ids, attn, T, ours.draw, group)
        assert torch.equal(got, want)
        torch.testing.assert_close(ours.logps, ref.logps, rtol=0, atol=1e-6)
    greedy_want = model.generate(input_ids=ids[::G], attention_mask=attn[::G], generation_config=gc)[:, ids.shape[1]:]
    assert torch.equal(decode(model, tok, ids[::G], attn[::G], T), greedy_want)


def test_trainer_logs_theory_columns_zero_at_delay_zero_and_positive_under_delay(cache, tmp_path):
    from llm_runs.metrics import read_metrics
    from llm_runs.trainer import Trainer

    frames = {}
    for d in (0, 2):
        cfg = _tiny(cache, task="arithmetic", terms=3, train_size=None, warm_start_steps=40, prompts_per_step=16,
                    delay=d, estimator="gmc", lr=3e-3)
        Trainer(cfg, tmp_path / f"d{d}", progress=False,
                log=lambda m: None).run()
        frames[d] = read_metrics(tmp_path / f"d{d}").iloc[:-1]
    d0, d2 = frames[0], frames[2]
    assert np.allclose(d0["stale/chi2"], 0, atol=1e-5) and np.allclose(d0["stale/mass_bias"], 0, atol=1e-6)
    assert np.allclose(d0["stale/chi2_token"], 0, atol=1e-5)
    assert (d2["train/grad_norm"].iloc[:2] > 0).all()  # theta_2 != theta_0: updates 2, 3 are off-policy
    # updates 2, 3 sample from theta_0, theta_1
    assert (d2["stale/chi2"].iloc[2:] > 1e-4).all() and (d2["stale/chi2_token"].iloc[2:] > 0).all()
    assert (d2["stale/mass_bias_bound"].iloc[2:] > 0).all()
    for df in (d0, d2):
        assert math.isnan(df["train/grad_cos"].iloc[0]) and math.isnan(df["train/update_cos"].iloc[0])
        assert df["train/update_cos"].iloc[1:].between(-1, 1).all()
        # the gradient cosine is defined where this and the previous gradient are nonzero (a batch whose groups
        # all have zero advantage has none), NaN elsewhere
        norm = df["train/grad_norm"].to_numpy()
        both = np.r_[False, (norm[1:] > 0) & (norm[:-1] > 0)]
        assert both[1:].any() and df["train/grad_cos"][both].between(-1, 1).all()
        assert df["train/grad_cos"][~both].isna().all()
