"""The staleness study's groundwork: the scratchpad task (horizon knob), the KV-cache decode
loop, theory-in-the-loop metrics, the study grid and its pre-registered analysis."""
from __future__ import annotations

import math
from pathlib import Path

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

REPO = Path(__file__).resolve().parents[1]


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


# --------------------------------------------------------------------------- the study grid


def test_primary_grid_is_seed_major_paired_and_runs_delay_zero_once():
    from grids.sweep import plan
    from studies.grids import GRIDS
    from studies.staleness.grids import ESTIMATORS

    study = GRIDS["primary"]
    cells = plan(study)
    per_seed = 2 * (1 + len(ESTIMATORS) * 2 + 1)
    assert len(cells) == 10 * per_seed == 480
    assert [c.seed for c in cells] == sorted(c.seed for c in cells)  # seed-major
    d0 = [c for c in cells if c.delay == 0]
    assert len(d0) == 20 and {c.estimator for c in d0} == {"gmc"}
    stale = [c for c in cells if c.estimator == "stale"]
    assert {c.delay for c in stale} == {64} and len(stale) == 20
    for c in cells:  # common random numbers: everything but the estimator and delay is shared within a seed
        o = c.overrides
        assert o["seed"] == c.seed and o["estimator"] == c.estimator and o["delay"] == c.delay
        assert o["warm_start_seed"] == 0
    same_seed = [c.overrides for c in cells if c.seed == 3 and c.horizon == "long"]
    shared = {k for k in same_seed[0] if k not in ("estimator", "delay")}
    assert all({k: o[k] for k in shared} == {k: same_seed[0][k] for k in shared} for o in same_seed)


def test_study_folders_honour_the_results_root(tmp_path, monkeypatch):
    from studies.grids import GRIDS

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    assert GRIDS["primary"].default_out() == tmp_path / "llm" / "study"
    assert GRIDS["pilot"].default_out() == tmp_path / "llm" / "pilot"


def test_dry_run_prices_the_plan_and_names_missing_estimators(capsys):
    from grids.runner import estimate_seconds, missing_estimators
    from studies.grids import GRIDS
    from studies.run import main

    assert main(["--dry-run", "--grid", "pilot", "--out", "/nonexistent/pilot"]) == 0
    out = capsys.readouterr().out
    assert "long-gmc-d0-s0" in out and "3 runs (3 long)" in out and "estimated" in out
    cells = GRIDS["primary"].cells()
    one = estimate_seconds(cells, 1, {"short": 0.1, "long": 0.2}, {"short": 0.0, "long": 0.0})
    two = estimate_seconds(cells, 2, {"short": 0.1, "long": 0.2}, {"short": 0.0, "long": 0.0})
    from grids.runner import RUN_OVERHEAD_S

    assert one == pytest.approx(240 * 200 * 0.1 + 240 * 200 * 0.2 + 480 * RUN_OVERHEAD_S) \
        and two == pytest.approx(one / 2)
    with pytest.raises(ValueError, match="no measured step cost for horizon 'long'"):
        estimate_seconds(cells, 1, {"short": 0.1})
    from estimators.losses import loss_names

    assert set(missing_estimators(GRIDS["primary"])) == set(GRIDS["primary"].estimators) - set(loss_names())


# --------------------------------------------------------------------------- the pre-registered analysis


def _fake_run(root, name, cfg, pcs, chi2=None, acc=None, grad=None):
    """A run folder as the trainer writes it: config.json + metrics.csv (evaluation every 20 updates);
    ``grad`` the gradient norm of each update (1.0 by default), None for an update whose groups
    have no reward spread (every advantage 0, so a gradient of 0)."""
    import json

    import pandas as pd

    from llm_runs.metrics import COLUMNS

    run = root / name
    run.mkdir(parents=True)
    steps = cfg["steps"]
    (run / "config.json").write_text(json.dumps({"config": cfg}))
    rows = []
    eval_steps = np.linspace(0, steps, len(pcs)).astype(int)
    for t in range(steps + 1):
        row = {c: np.nan for c in COLUMNS}
        row["step"] = t
        if t < steps:
            g = grad[t] if grad is not None else 1.0
            row.update({"train/loss": 0.1, "train/grad_norm": 0.0 if g is None else g, "train/update_skipped": 0,
                        "train/adv_zero_frac": 1.0 if g is None else 0.5,
                        "stale/chi2": chi2[t] if chi2 is not None else 0.1})
        if t in eval_steps:
            i = int(np.nonzero(eval_steps == t)[0][0])
            row.update({"eval/heldout_pc": pcs[i], "eval/heldout_acc": (acc or pcs)[i]})
        rows.append(row)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(run / "metrics.csv", index=False)


def _fake_study(root, effect_long, effect_short=0.0, n_seeds=10):
    rng = np.random.default_rng(5)
    for s in range(n_seeds):
        seed_level = rng.normal(0, 0.05)  # shared by every estimator of the seed (paired)
        for h, task, effect in (("long", "scratchpad", effect_long), ("short", "arithmetic", effect_short)):
            base = {"task": task, "steps": 40, "eps": 0.2, "heldout_size": 200, "seed": s, "mode": "controlled"}
            final = {"gmc": 0.5 + seed_level, "is": 0.5 + seed_level + rng.normal(0, 0.005),
                     "tic_mask": 0.5 + seed_level - effect}
            _fake_run(root, f"{h}-gmc-d0-s{s}", {**base, "estimator": "gmc", "delay": 0}, [0.2, 0.4, 0.6 + seed_level])
            for e, v in final.items():
                _fake_run(root, f"{h}-{e}-d64-s{s}", {**base, "estimator": e, "delay": 64}, [0.2, 0.35, v])


def test_analysis_confirms_a_planted_effect_and_refutes_a_reversed_one(tmp_path):
    from studies.staleness.analysis import analyse, differences_table, read_runs

    _fake_study(tmp_path / "up", effect_long=0.1)
    runs = read_runs(tmp_path / "up")
    assert len(runs) == 10 * 2 * 4 and runs["complete"].all() and runs["stable"].all()
    res = analyse(runs)
    assert res["H1"]["verdict"] == "CONFIRMED" and res["H1"]["gmc_minus_tic_mask"]["n"] == 10
    assert res["H1"]["gmc_minus_tic_mask"]["mean"] == pytest.approx(0.1, abs=0.01)
    assert res["H2"]["verdict"] == "CONFIRMED" and set(res["H2"]["baselines"]) == {"is", "tic_mask"}
    assert res["H3"]["verdict"] == "CONFIRMED"
    assert res["H4"]["verdict"] == "INCONCLUSIVE" and res["H4"]["collapsed_runs"] == 0
    table = differences_table(runs)
    assert set(table["horizon"]) == {"long", "short"} and (table["n"] == 10).all()

    _fake_study(tmp_path / "down", effect_long=-0.1, effect_short=-0.1)
    res = analyse(read_runs(tmp_path / "down"))
    assert res["H1"]["verdict"] == "REFUTED" and res["H2"]["verdict"] == "REFUTED"
    assert res["H2"]["baselines"]["tic_mask"]["worse"] and not res["H2"]["baselines"]["is"]["worse"]
    assert res["H3"]["verdict"] == "INCONCLUSIVE"  # the same gap at both horizons


def test_h4_counts_warnings_that_precede_collapse(tmp_path):
    from studies.staleness.analysis import analyse, read_runs

    base = {"task": "scratchpad", "steps": 40, "eps": 0.2, "heldout_size": 200, "mode": "controlled", "delay": 64}
    for s in range(6):  # chi^2 crosses 1 at update 10; pc collapses at step 20
        chi2 = np.where(np.arange(40) >= 10, 5.0, 0.1)
        _fake_run(tmp_path, f"long-tic_mask-d64-s{s}", {**base, "estimator": "tic_mask", "seed": s},
                  [0.3, 0.05, 0.01], chi2=chi2, acc=[0.5, 0.5, 0.5])
        _fake_run(tmp_path, f"long-gmc-d64-s{s}", {**base, "estimator": "gmc", "seed": s}, [0.3, 0.4, 0.5])
    res = analyse(read_runs(tmp_path))["H4"]
    assert res["collapsed_runs"] == 6 and res["warned_before_collapse"] == 6 and res["false_alarms"] == 0
    assert res["verdict"] == "CONFIRMED" and res["ci"][0] > 0.5


def test_statistics_helpers():
    from studies.staleness.analysis import bootstrap, holm, p_below, seeds_for_power

    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == {"a": True, "c": False, "b": False}
    assert holm({"a": 0.01, "b": 0.02}) == {"a": True, "b": True}
    assert seeds_for_power(0.03, 0.03) == 10  # effect size 1, two-sided 5%, 80% power: the textbook n
    assert seeds_for_power(0.06, 0.03) > 30
    with pytest.raises(ValueError, match="sd_diff must be a finite number > 0, got 0"):
        seeds_for_power(0)
    b = bootstrap(np.array([0.1, 0.12, 0.08, 0.11, 0.09]))
    assert b["low"] < 0.1 < b["high"] and p_below(b, 0.0) == 0.0 and p_below(b, 0.2) == 1.0


def test_verdicts_wait_for_the_pre_registered_number_of_whole_seeds(tmp_path):
    """Fewer than MIN_SEEDS whole seeds: every verdict is NOT DECIDED (the rule's outcome so far
    kept as interim); a seed missing one run is not a whole seed and is left out of every comparison."""
    from studies.staleness.analysis import MIN_SEEDS, analyse, read_runs

    _fake_study(tmp_path / "few", effect_long=0.1, n_seeds=MIN_SEEDS - 1)
    res = analyse(read_runs(tmp_path / "few"))
    assert {r["verdict"] for r in res.values()} == {"NOT DECIDED"}
    assert res["H1"]["interim_verdict"] == "CONFIRMED" and res["H1"]["seeds"] == list(range(MIN_SEEDS - 1))

    _fake_study(tmp_path / "cut", effect_long=0.1, n_seeds=MIN_SEEDS + 1)
    (tmp_path / "cut" / f"short-is-d64-s{MIN_SEEDS}" / "metrics.csv").unlink()  # seed MIN_SEEDS is not whole
    res = analyse(read_runs(tmp_path / "cut"))
    assert res["H1"]["verdict"] == "CONFIRMED" and res["H1"]["gmc_minus_tic_mask"]["n"] == MIN_SEEDS
    assert res["H1"]["seeds"] == list(range(MIN_SEEDS))



def test_stopping_points_are_the_rule_on_the_first_k_whole_seeds(tmp_path):
    """The verdicts on the first MIN_SEEDS, MIN_SEEDS + 2, ... whole seeds and on all of them, each
    equal to the analysis of exactly those seeds; an effect that flips after seed 6 shows in them."""
    from studies.staleness.analysis import MIN_SEEDS, analyse, read_runs, stopping_points

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=9)
    runs = read_runs(tmp_path / "s")
    points = stopping_points(runs)
    assert [p["seeds"] for p in points] == [MIN_SEEDS, MIN_SEEDS + 2, 9]
    for p in points:
        res = analyse(runs[runs["seed"] < p["seeds"]])
        assert p["H1"] == res["H1"]["verdict"] and p["H1_interval"] == res["H1"]["gmc_minus_tic_mask"]
        assert p["H1_interval"]["n"] == p["seeds"] and p["H2_stable"] == ["is", "tic_mask"]
    # seeds 6-8 reverse the effect: the 6-seed point confirms H1, the 9-seed point does not
    late = runs["seed"] >= 6
    swap = late & (runs["horizon"] == "long") & (runs["estimator"] == "tic_mask")
    runs.loc[swap, "pc_final"] += 0.6
    points = stopping_points(runs)
    assert points[0]["H1"] == "CONFIRMED" and points[-1]["H1"] != "CONFIRMED"
    _fake_study(tmp_path / "few", effect_long=0.1, n_seeds=MIN_SEEDS - 1)
    assert stopping_points(read_runs(tmp_path / "few")) == []


def test_report_tabulates_the_stopping_points(tmp_path):
    from studies.report.build import stopping_markdown
    from studies.staleness.analysis import read_runs, stopping_points

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=8)
    runs = read_runs(tmp_path / "s")
    md = stopping_markdown(runs)
    rows = [ln for ln in md if ln.startswith(("| 6 |", "| 8 |"))]
    assert md[0] == "### Verdicts had the grid stopped earlier" and len(rows) == 2
    last = stopping_points(runs)[-1]
    assert rows[1].startswith(f"| 8 | {last['H1']} | {last['H1_interval']['mean']:+.3f} [")
    assert "| IS, TIC-mask |" in rows[1]
    _fake_study(tmp_path / "six", effect_long=0.1, n_seeds=6)
    assert stopping_markdown(read_runs(tmp_path / "six")) == []  # one stopping point: nothing to compare


def test_the_names_the_preregistration_quotes_are_the_analysis_that_runs():
    """docs/PREREGISTRATION.md quotes ``figures.study.<name>`` and ``python -m figures.study``, which are
    now :mod:`studies.staleness` (``python -m studies.staleness``): every quoted name resolves there,
    and to the very object of the analysis (one rule, not two copies)."""
    import re

    import studies.staleness as quoted
    from studies.staleness import analysis

    text = (Path(__file__).resolve().parents[1] / "docs" / "PREREGISTRATION.md").read_text()
    names = set(re.findall(r"figures\.study\.([A-Za-z_]+)", text))
    assert names >= {"seeds_for_power", "differences_table"}
    for name in names | {"ALPHA", "MARGIN", "N_RESAMPLES", "BOOT_SEED", "STABLE_FRACTION", "MIN_SEEDS", "analyse"}:
        assert getattr(quoted, name) is getattr(analysis, name), name
    assert quoted.main is analysis.main


@pytest.mark.parametrize("effect, n_seeds, word", [(0.1, 10, "confirmed in this setting"),
                                                   (-0.1, 10, "refuted in this setting"),
                                                   (0.1, 3, "not decided")])
def test_the_abstracts_llm_claim_is_the_studys_h2(tmp_path, monkeypatch, effect, n_seeds, word):
    """claims.abstract's verdict on the LLM claim is H2 of the pre-registered study, read from the
    verdicts file ``python -m studies.staleness --json`` writes, with its numbers; the earlier sweep
    only adds a sentence."""
    from claims.abstract import ABSTRACT, verdicts
    from schema.results import read_json
    from studies.staleness.analysis import main

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    _fake_study(tmp_path / "llm" / "study", effect_long=effect, n_seeds=n_seeds)
    assert main(["--json", str(tmp_path / "llm" / "study" / "verdicts.json")]) == 0
    h2 = read_json(tmp_path / "llm" / "study" / "verdicts.json")["H2"]
    llm = [v for v in verdicts() if not v["claim_ids"]]
    assert len(llm) == 1 and llm[0]["text"] == ABSTRACT[-1].text
    assert llm[0]["verdict"] == word
    ev = llm[0]["evidence"]
    assert f"{n_seeds} whole paired seeds" in ev and "H2 (GMC at least as good" in ev
    tm = h2["baselines"]["tic_mask"]
    assert f"TIC-mask {tm['mean']:+.3f} [{tm['low']:+.3f}, {tm['high']:+.3f}], n = {n_seeds}" in ev


def test_the_abstracts_llm_claim_without_the_study_is_not_checked(tmp_path, monkeypatch):
    from claims.abstract import verdicts

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    llm = next(v for v in verdicts() if not v["claim_ids"])
    assert llm["verdict"] == "not checked" and "python -m studies.run" in llm["evidence"]


# --------------------------------------------------------------------------- the grid check


def _copy_committed(tmp_path, names):
    import shutil

    from schema.packing import unpack_run

    src = REPO / "results" / "llm" / "study"
    root = tmp_path / "study"
    root.mkdir()
    shutil.copy(src / "sweep.json", root / "sweep.json")
    for n in names:  # a run folder, whether the grid is packed or not
        unpack_run(src / n, root / n)
    return root


def test_analysis_refuses_a_foreign_run_placed_under_a_grid_name(tmp_path, capsys):
    import json

    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    assert len(read_runs(root)) == 2
    cfg_file = root / "long-gmc-d0-s0" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["config"]["steps"] = 800  # a longer pilot run dropped in as seed 0's delay-0 run
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"long-gmc-d0-s0: run with other settings \(steps: 800, planned 200\)"):
        read_runs(root)
    (root / "long-gmc-d0-s0").rename(root / "long-gmc-d0-s0-pilot")
    with pytest.raises(ValueError, match="long-gmc-d0-s0-pilot: no cell of grid primary"):
        read_runs(root)


def test_a_run_folder_without_metrics_is_named_not_dropped(tmp_path, caplog):
    import logging

    from schema.results import metrics_path
    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    metrics_path(root / "long-gmc-d64-s0").unlink()
    with caplog.at_level(logging.WARNING, logger="llm_runs"):
        assert len(read_runs(root)) == 1
    warned = [r for r in caplog.records if r.name == "grids.run_table" and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "no metrics table and are not analysed: long-gmc-d64-s0" in warned[0].getMessage()


def test_a_hand_assembled_folder_must_agree_on_shared_settings_and_hold_each_cell_once(tmp_path):
    from studies.staleness.analysis import read_runs

    _fake_study(tmp_path / "s", effect_long=0.1, n_seeds=2)
    assert len(read_runs(tmp_path / "s")) == 2 * 2 * 4
    base = {"task": "scratchpad", "eps": 0.2, "heldout_size": 200, "seed": 0, "mode": "controlled",
            "estimator": "gmc", "delay": 64}
    _fake_run(tmp_path / "s", "long-gmc-d64-s0-long", {**base, "steps": 80}, [0.2, 0.4, 0.6])
    with pytest.raises(ValueError, match=r"long-gmc-d64-s0-long: settings differ .*steps: 80 vs 40"):
        read_runs(tmp_path / "s")
    import shutil

    shutil.rmtree(tmp_path / "s" / "long-gmc-d64-s0-long")
    _fake_run(tmp_path / "s", "long-gmc-d64-s0-copy", {**base, "steps": 40}, [0.2, 0.4, 0.6])
    with pytest.raises(ValueError, match="long-gmc-d64-s0-copy: the same cell as long-gmc-d64-s0"):
        read_runs(tmp_path / "s")


def _set_warm_start(run, **fields):
    import json

    cfg_file = run / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["warm_start"].update(fields)
    cfg_file.write_text(json.dumps(cfg))
    return cfg["warm_start"]


def test_analysis_refuses_a_run_that_started_from_another_machines_warm_start(tmp_path):
    """Same settings and warm-start key, another warm start (a CPU that rounds differently): foreign."""
    from studies.staleness.analysis import read_runs

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0", "long-topr-d64-s0"])
    assert len(read_runs(root)) == 3
    _set_warm_start(root / "long-topr-d64-s0", heldout_pc=0.010061427227023785)
    with pytest.raises(ValueError, match=r"long-topr-d64-s0: started from another warm start .*held-out pc "
                                         r"0\.010061427227023785 vs 0\.514326903992187"):
        read_runs(root)


def test_the_grid_refuses_to_add_runs_from_a_machine_whose_warm_start_differs(tmp_path):
    import json

    from grids.runner import check_warm_starts

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    theirs = json.loads((root / "long-gmc-d64-s0" / "config.json").read_text())["warm_start"]
    check_warm_starts(root, {"long": dict(theirs)})  # the same warm start: nothing to refuse
    check_warm_starts(tmp_path / "absent", {"long": dict(theirs)})
    here = {**theirs, "heldout_pc": 0.010061427227023785, "weights_sha256": "ab" * 32}
    with pytest.raises(ValueError, match=r"not the one the runs in .* started from \(horizon long \(held-out pc "
                                         r"0\.514326903992187 vs 0\.010061427227023785\): 2 run\(s\), e\.g\. "
                                         r"long-gmc-d0-s0\).*nothing was run"):
        check_warm_starts(root, {"long": here})
    check_warm_starts(root, {"long": {**here, "key": "another"}})  # another key: not this grid's warm start


def test_every_committed_grid_records_the_settings_its_definition_gives(tmp_path):
    """One grid protocol (cells, settings, default_out) for the sweep and the study: each committed
    grid's sweep.json holds exactly what its definition's record() gives (settings renamed since read as today's),
    so it can be continued."""
    import json

    from grids.spec import record_as_today
    from studies.grids import GRIDS

    found = 0
    for settings_file in sorted((REPO / "results" / "llm").glob("*/sweep.json")):
        stored = json.loads(settings_file.read_text())["settings"]
        if stored.get("name") in GRIDS:
            assert record_as_today(stored) == GRIDS[stored["name"]].record(), settings_file
            found += 1
    assert found >= 5


def test_the_study_runs_through_either_executor(tmp_path, capsys):
    from studies.run import main

    out = tmp_path / "scale"
    assert main(["--grid", "scale", "--executor", "ray", "--dry-run", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "30 runs (30 long), 5 seeds, 2 at a time (ray)" in said and not out.exists()
    with pytest.raises(SystemExit):
        main(["--grid", "scale", "--executor", "nowhere", "--dry-run", "--out", str(out)])
    assert main(["--grid", "scale", "--cpus-per-run", "2", "--dry-run", "--out", str(out)]) == 2
    assert "--cpus-per-run / --gpus-per-run need --executor ray" in capsys.readouterr().err


def test_a_grid_paired_with_another_refuses_a_machine_whose_warm_start_differs_from_that_one(tmp_path, monkeypatch,
                                                                                               capsys):
    """peers_2025 (and the mechanism grid) pair their runs with the committed study's: the check covers
    the study's folder too, even when the grid's own folder is still empty."""
    import grids.runner as study_cli
    from schema.packing import unpack_run
    from schema.results import read_run_doc
    from studies.grids import GRIDS

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    src = REPO / "results" / "llm" / "study" / "long-gmc-d64-s0"
    (tmp_path / "llm" / "study").mkdir(parents=True)
    unpack_run(src, tmp_path / "llm" / "study" / src.name)
    theirs = read_run_doc(src)["warm_start"]
    other = {**theirs, "heldout_pc": 0.010061427227023785}
    monkeypatch.setattr(study_cli, "_warm_starts", lambda study: {"long": other, "short": {"key": "elsewhere"}})
    out = tmp_path / "llm" / "study_2025"
    assert study_cli.main(["--grid", "peers_2025", "--out", str(out)], GRIDS) == 2
    err = capsys.readouterr().err
    assert f"the runs in {tmp_path / 'llm' / 'study'} started from" in err and "nothing was run" in err
    assert not out.exists()
    monkeypatch.setattr(study_cli, "_warm_starts", lambda study: {"long": theirs, "short": {"key": "elsewhere"}})
    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached

    monkeypatch.setattr(study_cli, "run_sweep", reached)
    with pytest.raises(Reached):  # the same warm start: the check lets the grid run
        study_cli.main(["--grid", "peers_2025", "--out", str(out)], GRIDS)


def _fake_newcomers(root, effect, seeds):
    """Runs of a grid paired with the fake study: icepop and sapo at d = 64, both horizons; icepop
    ends ``effect`` below the seed's GMC (the same seed level as :func:`_fake_study`'s), sapo collapses."""
    rng = np.random.default_rng(5)
    levels = []
    for s in range(10):
        levels.append(rng.normal(0, 0.05))
        for _ in range(2):  # _fake_study's two horizons each draw one more normal (its is)
            rng.normal(0, 0.005)
    for s in seeds:
        for h, task in (("long", "scratchpad"), ("short", "arithmetic")):
            base = {"task": task, "steps": 40, "eps": 0.2, "heldout_size": 200, "seed": s, "mode": "controlled",
                    "delay": 64}
            _fake_run(root, f"{h}-icepop-d64-s{s}", {**base, "estimator": "icepop"},
                      [0.2, 0.35, 0.5 + levels[s] - effect])
            _fake_run(root, f"{h}-sapo-d64-s{s}", {**base, "estimator": "sapo"}, [0.2, 0.5, 0.01],
                      # every 4th update fully masked; every 5th without a reward spread (not counted)
                      grad=[None if t % 5 == 0 else 0.0 if t % 4 == 0 else 2.0 for t in range(40)])


def test_a_paired_grid_adds_exploratory_rows_and_never_enters_the_hypotheses(tmp_path, monkeypatch):
    """The 2025-2026 corrections' grid beside the study: its rows in the difference table (marked
    exploratory, paired with the study's GMC over the seeds whole in both), in F10, F11 and the
    plain answer; the verdicts are those of the study alone; a seed not whole there is left out."""
    import studies.staleness.figures.f10_study_differences as f10
    import studies.staleness.figures.f11_study_pc_vs_delay as f11
    from studies.report.build import differences_markdown, plain_answer
    from studies.staleness.analysis import analyse, differences, plain_answer_facts, read_runs

    monkeypatch.setenv("GMC_RESULTS", str(tmp_path))
    _fake_study(tmp_path / "llm" / "study", effect_long=0.1)
    _fake_newcomers(tmp_path / "llm" / "study_2025", effect=0.08, seeds=range(7))
    (tmp_path / "llm" / "study_2025" / "short-sapo-d64-s6" / "metrics.csv").unlink()  # seed 6 is not whole there

    runs = f10.load_runs()
    extra = runs.attrs["exploratory"]
    assert extra.attrs["seeds"] == list(range(6)) and set(extra["estimator"]) == {"icepop", "sapo"}
    assert set(runs["estimator"]) == {"gmc", "is", "tic_mask"}  # the study's own frame is untouched
    assert analyse(runs) == analyse(read_runs(tmp_path / "llm" / "study"))

    tab = differences(runs)
    ice = tab[(tab["baseline"] == "icepop") & (tab["metric"] == "pc_final")]
    assert len(ice) == 2 and ice["exploratory"].all() and (ice["n"] == 6).all()
    assert ice["mean"].to_numpy() == pytest.approx([0.08, 0.08], abs=1e-9)
    assert not tab.loc[tab["baseline"].isin(["is", "tic_mask"]), "exploratory"].any()
    assert not tab.loc[tab["baseline"] == "sapo", "baseline_stable"].any()
    md = "\n".join(differences_markdown(runs))
    assert "| long | 64 | IcePop (exploratory) | 6 | +0.080" in md

    text = plain_answer(runs)
    assert "Exploratory, not pre-registered" in text and "over their 6 whole seeds" in text
    assert "Unstable there: SAPO." in text
    facts = plain_answer_facts(runs)["exploratory"]
    order = [e for e, _, _ in facts["ranked"]]
    assert facts["seeds"] == list(range(6)) and [new for _, _, new in facts["ranked"]].count(True) == 1
    assert order.index("gmc") < order.index("icepop") < order.index("tic_mask") and facts["unstable"] == ["sapo"]
    assert facts["masked_updates"] == {"icepop": 0.0, "sapo": pytest.approx(8 / 32)}  # 8 of the 32 with a signal
    assert "exactly zero" in text and "SAPO 0.25." in text and "IcePop 0.00" not in text

    assert "(expl.)" in f10.caption(f10.summary(runs)) and "(expl.)" in f11.caption(f11.summary(runs))
    t11 = f11.table(runs)
    ice11 = t11[t11["estimator"] == "icepop"]
    assert ice11["exploratory"].all() and list(ice11["delay"]) == [0, 64, 0, 64]
    assert list(ice11["n"]) == [10, 6, 10, 6]  # delay 0: the study's delay-0 runs, the common start of every line
    import matplotlib.pyplot as plt

    for m in (f10, f11):
        plt.close(m.plot(m.summary(runs)))


def test_a_paired_grid_run_from_another_warm_start_is_refused(tmp_path):
    """A run of a grid that pairs with the study, made from another warm start than the study's runs
    with its key (another machine), is refused by the analysis that would pair it."""
    import json
    import shutil

    from grids.check import check_pairing
    from studies.staleness.analysis import read_paired, read_runs, whole_seeds

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    other = tmp_path / "study_2025"
    other.mkdir()
    shutil.copytree(root / "long-gmc-d64-s0", other / "long-icepop-d64-s0")
    cfg = json.loads((other / "long-icepop-d64-s0" / "config.json").read_text())
    cfg["config"]["estimator"] = "icepop"
    (other / "long-icepop-d64-s0" / "config.json").write_text(json.dumps(cfg))
    check_pairing(other, root)
    primary = read_runs(root)
    primary.attrs.update(source=str(root), seeds=whole_seeds(primary))
    from grids.spec import pairing_with
    from studies.grids import GRIDS
    from studies.staleness.analysis import PRIMARY

    assert list(read_paired(other, primary, pairing_with(GRIDS.values(), PRIMARY))["estimator"]) == ["icepop"]
    _set_warm_start(other / "long-icepop-d64-s0", heldout_pc=0.010061427227023785)
    with pytest.raises(ValueError, match=r"1 run\(s\) under .*study_2025 started from another warm start .*"
                                         r"long-icepop-d64-s0: held-out pc 0\.010061427227023785 vs "
                                         r"0\.514326903992187"):
        read_paired(other, primary, pairing_with(GRIDS.values(), PRIMARY))


# --------------------------------------------------------------------------- each analysis reads its own grid


def _grid_folder(tmp_path, grid, name):
    """A copy of two committed study runs under a ``sweep.json`` naming ``grid``."""
    import json

    (tmp_path / name).mkdir()
    root = _copy_committed(tmp_path / name, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    doc = json.loads((root / "sweep.json").read_text())
    doc["settings"]["name"] = grid
    (root / "sweep.json").write_text(json.dumps(doc))
    return root


def _one_line_error(capsys, rc, *needles):
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1, err
    for n in needles:
        assert n in line[0], err
    return line[0]


def test_the_analyses_refuse_a_folder_of_another_grid(tmp_path, capsys):
    """``studies.mechanism --study`` given the 2025-2026 grid flipped M4 and M5, and ``--root`` given the
    study printed verdicts: every analysis checks each folder it is given by its ``sweep.json``."""
    import studies.mechanism.analysis as mech
    from studies.staleness import analysis as study
    from studies.staleness.analysis import read_runs

    peers = _grid_folder(tmp_path, "peers_2025", "a")
    primary = _grid_folder(tmp_path, "primary", "b")
    with pytest.raises(ValueError, match=r"holds grid peers_2025 \(its sweep\.json\), not primary"):
        read_runs(peers, grid="primary")
    _one_line_error(capsys, mech.main(["--study", str(peers), "--root", str(primary)]), str(peers), "peers_2025",
                    "primary")
    _one_line_error(capsys, mech.main(["--study", str(primary), "--root", str(primary)]), "not mechanism")
    _one_line_error(capsys, study.main(["--root", str(peers)]), "peers_2025", "not primary")
    _one_line_error(capsys, mech.main(["--select-warning", "--study", str(peers), "--root", str(tmp_path / "m")]),
                    "peers_2025")


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_a_missing_empty_or_non_folder_root_is_one_line(tmp_path, capsys, kind):
    import studies.mechanism.analysis as mech
    from studies.staleness import analysis as study

    root = tmp_path / "root"
    if kind == "empty":
        root.mkdir()
    elif kind == "file":
        root.write_text("x")
    primary = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    _one_line_error(capsys, study.main(["--root", str(root)]), str(root))
    _one_line_error(capsys, mech.main(["--study", str(root), "--root", str(primary)]), str(root))
    _one_line_error(capsys, mech.main(["--study", str(primary), "--root", str(root)]), str(root))


@pytest.mark.parametrize("text", ['{"settings": {"na', "[]", "{}"])
def test_a_truncated_or_foreign_sweep_json_is_named_by_path(tmp_path, capsys, text):
    from studies.staleness import analysis as study

    root = _copy_committed(tmp_path, ["long-gmc-d0-s0", "long-gmc-d64-s0"])
    (root / "sweep.json").write_text(text)
    _one_line_error(capsys, study.main(["--root", str(root)]), str(root / "sweep.json"))


@pytest.mark.parametrize("text", ['{"settings": {"na', "[]"])
def test_the_grid_runner_names_a_truncated_or_foreign_sweep_json(tmp_path, text):
    import re

    from grids.sweep import run_sweep
    from studies.grids import GRIDS

    (tmp_path / "sweep.json").write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "sweep.json"))):
        run_sweep(GRIDS["pilot"], tmp_path, resume=True, progress=False, log=lambda m: None)
