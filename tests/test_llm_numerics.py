"""Speed never changes the numbers: the lean Qwen3 forward pass is the model's own forward bit for
bit (logits, KV cache, gradients), and the trainer reproduces byte for byte the metrics the code
that made the pre-registered grid's runs (commit 83f36ef) wrote.

``tests/reference_runs/`` holds two runs made by that code from two cells of
``studies.grids.GRIDS['primary']`` (one per horizon) with only their size cut (warm start,
task pool, updates, evaluation and checkpoint period; :data:`SMALL`): ``config.json`` (with the
commit that made it) and ``metrics.csv``. The slow test replays the first updates of a run the
grid itself produced (``results/llm/study/``), warm start included.
"""
from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest
import torch

from llm_runs import qwen3_forward
from llm_runs.config import config_diff, resolve_config
from llm_runs.reference import STUDY_MODEL
from llm_runs.replay import ReplaySkipped, compare_metrics, replay, replay_against_commit
from llm_runs.rollout import completion_logprobs, decode
from schema.results import metrics_path, read_json, read_run_config
from studies.grids import GRIDS

REPO = Path(__file__).resolve().parents[1]
REFERENCES = Path(__file__).resolve().parent / "reference_runs"
GRID_COMMIT = "83f36efe1160c3ff303d4b2846b5aa9a258adafe"
SMALL = {"warm_start_steps": 20, "train_size": 2000, "heldout_size": 50, "steps": 6, "eval_every": 3,
         "checkpoint_every": 3}
"""What the reference runs change in their study cell (``train_size`` at the long horizon only)."""
REFERENCE_RUNS = ("long-gmc-d16-s0", "short-token_clip-d16-s0")


# --------------------------------------------------------------------------- the lean forward pass


def _model(seed=0, vocab=20):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(**STUDY_MODEL, vocab_size=vocab, tie_word_embeddings=True, max_position_embeddings=128,
                      pad_token_id=0, eos_token_id=1)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # non-trivial norm weights (they start at one)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _inputs(N=12, P=7, vocab=20, pad_rows=(0, 5)):
    ids = torch.randint(2, vocab, (N, P))
    attn = torch.ones(N, P, dtype=torch.long)
    for r in pad_rows:
        attn[r, :3] = 0
        ids[r, :3] = 0
    return ids, attn, (attn.cumsum(-1) - 1).clamp_(min=0)


def _hf(model, *a, **k):
    names = ("input_ids", "attention_mask", "position_ids", "cache", "use_cache", "logits_to_keep")
    return model(**dict(zip(names, a)), **k).logits


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_lean_forward_gives_the_models_logits_and_cache_bit_for_bit(training, padded):
    from transformers import DynamicCache

    model = _model().train(training)
    assert qwen3_forward.supports(model)
    ids, attn, pos = _inputs(pad_rows=(0, 5) if padded else ())
    fwd = qwen3_forward.logits_fn(model)
    with torch.no_grad():
        for keep in (0, 1, 3):
            assert torch.equal(fwd(ids, attn, pos, logits_to_keep=keep),
                               _hf(model, ids, attn, pos, logits_to_keep=keep))
        ours, theirs = DynamicCache(config=model.config), DynamicCache(config=model.config)
        assert torch.equal(fwd(ids, attn, pos, ours, True, 1), _hf(model, ids, attn, pos, theirs, True, 1))
        mask, last = attn, pos[:, -1:]
        for t in range(4):  # KV-cache decode steps
            token = torch.randint(2, 20, (ids.shape[0], 1))
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            a = fwd(token, mask, last + t + 1, ours, True)
            b = _hf(model, token, mask, last + t + 1, theirs, True)
            assert torch.equal(a, b)
        for x, y in zip(ours.layers, theirs.layers):
            assert torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)


def _grads(model, fn):
    model.zero_grad(set_to_none=True)
    out = fn()
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("group_size", [1, 4])
def test_lean_forward_gives_the_models_log_probs_and_gradients_bit_for_bit(group_size, monkeypatch):
    model = _model(1).train()
    G, B, T = group_size, 3, 5
    q_ids, q_attn, _ = _inputs(N=B, P=6, pad_rows=(1,))
    ids, attn = q_ids.repeat_interleave(G, 0), q_attn.repeat_interleave(G, 0)
    comp = torch.randint(2, 20, (B * G, T))
    lean = _grads(model, lambda: completion_logprobs(model, ids, attn, comp, 0.7, G))
    monkeypatch.setattr(qwen3_forward, "supports", lambda model: False)  # the model's own forward
    own = _grads(model, lambda: completion_logprobs(model, ids, attn, comp, 0.7, G))
    assert torch.equal(lean[0], own[0])
    assert all(torch.equal(a, b) for a, b in zip(lean[1], own[1]))
    assert any(float(g.abs().max()) > 0 for g in own[1])


def test_decode_is_the_same_with_and_without_the_lean_forward(monkeypatch):
    model = _model(2)
    ids, attn, _ = _inputs()

    class Tok:
        pad_token_id, eos_token_id = 0, 1

    model.generation_config.eos_token_id = 1
    lean = decode(model, Tok(), ids, attn, 6)
    monkeypatch.setattr(qwen3_forward, "supports", lambda model: False)
    assert torch.equal(lean, decode(model, Tok(), ids, attn, 6))


def test_a_forward_that_takes_the_cache_as_past_key_values_is_given_it_there():
    """Earlier transformers 5.x releases (verl's environment) name the forward's cache ``past_key_values``; passed as
    ``cache`` it would fall into ``**kwargs`` unread, and the grouped log-probabilities and the decode would run
    every step without what came before. A model with that signature (the lean path steps aside for it: not the
    checked class) gives the same numbers as the checked model, bit for bit."""
    from transformers import Qwen3ForCausalLM

    class Earlier(Qwen3ForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                    use_cache=None, logits_to_keep=0, **kwargs):  # an unknown keyword is dropped, as there
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                   cache=past_key_values, use_cache=use_cache, logits_to_keep=logits_to_keep)

    model = _model(3)
    earlier = Earlier(model.config)
    earlier.load_state_dict(model.state_dict())
    assert qwen3_forward.cache_keyword(Earlier) == "past_key_values" and not qwen3_forward.supports(earlier)
    assert qwen3_forward.cache_keyword(Qwen3ForCausalLM) == "cache"
    G = 4
    q_ids, q_attn, _ = _inputs(N=3, P=6, pad_rows=(1,))
    ids, attn = q_ids.repeat_interleave(G, 0), q_attn.repeat_interleave(G, 0)
    comp = torch.randint(2, 20, (3 * G, 5))
    with torch.no_grad():
        assert torch.equal(completion_logprobs(earlier, ids, attn, comp, 1.0, G),
                           completion_logprobs(model, ids, attn, comp, 1.0, G))

    class Tok:
        pad_token_id, eos_token_id = 0, 1

    for m in (model, earlier):
        m.generation_config.eos_token_id = 1
    ids, attn, _ = _inputs()
    assert torch.equal(decode(earlier, Tok(), ids, attn, 6), decode(model, Tok(), ids, attn, 6))

    class Neither(Qwen3ForCausalLM):
        def forward(self, input_ids=None, **kwargs):
            return super().forward(input_ids=input_ids)

    with pytest.raises(TypeError, match="takes its KV cache neither as cache nor as past_key_values"):
        qwen3_forward.logits_fn(Neither(model.config))


def test_lean_forward_steps_aside_for_hooks_and_gradient_checkpointing():
    model = _model()
    assert qwen3_forward.supports(model)
    seen = []
    handle = model.model.layers[1].mlp.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    assert not qwen3_forward.supports(model)
    ids, attn, pos = _inputs()
    with torch.no_grad():
        qwen3_forward.forward(model, ids, attn, pos)
    assert seen == [(ids.shape[0], ids.shape[1], STUDY_MODEL["hidden_size"])]  # the model's own call ran the hook
    handle.remove()
    assert qwen3_forward.supports(model)
    model.activation_checkpointing_enable()
    assert not qwen3_forward.supports(model)


# --------------------------------------------------------------------------- byte-identical runs


def _fields(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_the_reference_runs_are_study_cells_cut_small_made_by_the_grids_code():
    cells = {c.name: c for c in GRIDS["primary"].cells()}
    for name in REFERENCE_RUNS:
        run = REFERENCES / name
        info = read_json(run / "config.json")
        assert info["git_commit"] == GRID_COMMIT and info["git_dirty"] is False
        cell = cells[name]
        small = dict(SMALL) if cell.horizon == "long" else {**SMALL, "train_size": None}
        expected = resolve_config({**cell.overrides, **small}).to_dict()
        assert config_diff(expected, read_run_config(run)) == {}
        rows = _fields(run / "metrics.csv")
        header = rows[0]
        assert [int(r[0]) for r in rows[1:]] == list(range(SMALL["steps"] + 1))
        col = {c: [r[header.index(c)] for r in rows[1:-1]] for c in header}
        # the rows exercise what could change: nonzero log-ratios (sampler vs trainer), evaluations
        assert all(float(v) != 0.0 for v in col["stale/log_ratio_abs_mean"])
        assert sum(v != "" for v in col["eval/heldout_pc"]) == 2
    short = _fields(REFERENCES / "short-token_clip-d16-s0" / "metrics.csv")
    grad = short[0].index("train/grad_norm")
    assert sum(float(r[grad]) > 0 for r in short[1:-1]) >= 4  # real gradient steps


@pytest.fixture(scope="module")
def rounds_as_the_grid_machine(tmp_path_factory) -> bool:
    """Whether this machine rounds as the one that made the committed grid did: its warm start for
    the grid's short horizon is the one the committed run ``short-gmc-d16-s0`` records (the warm
    start is chaotic enough that another instruction set changes it)."""
    import dataclasses

    from llm_runs.config import load_run_config
    from llm_runs.replay import _check_warm_start

    run = REPO / "results" / "llm" / "study" / "short-gmc-d16-s0"
    cfg = dataclasses.replace(load_run_config(run), cache_dir=str(tmp_path_factory.mktemp("grid-cache")))
    try:
        _check_warm_start(run, cfg)
    except ReplaySkipped:  # it loads the committed warm start, but rounds the recipe otherwise
        return False
    except ValueError as exc:
        assert "started from another warm start" in str(exc)
        return False
    return True


@pytest.mark.parametrize("name", REFERENCE_RUNS)
def test_replaying_a_reference_run_reproduces_every_metric_byte_for_byte(name, tmp_path, rounds_as_the_grid_machine):
    """Today's code computes, byte for byte, what the grid commit's code computes on this machine;
    on a machine that rounds as the grid's did, also what the stored reference holds."""
    assert replay_against_commit(REFERENCES / name, SMALL["steps"], GRID_COMMIT) == []
    if rounds_as_the_grid_machine:
        assert replay(REFERENCES / name, SMALL["steps"], cache_dir=tmp_path / "cache") == []


def test_the_comparison_sees_a_one_ulp_change_and_ignores_timings(tmp_path):
    ref = REFERENCES / "short-token_clip-d16-s0" / "metrics.csv"
    rows = _fields(ref)
    header = rows[0]
    loss, perf = header.index("train/loss"), header.index("perf/step_s")
    timing = [r[:] for r in rows]
    timing[2][perf] = "123.0"
    path = tmp_path / "timing.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(timing)
    assert compare_metrics(ref, path, SMALL["steps"]) == []
    bumped = [r[:] for r in rows]
    value = float(bumped[3][loss])
    bumped[3][loss] = repr(math.nextafter(value, math.inf))
    with path.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(bumped)
    assert compare_metrics(ref, path, SMALL["steps"]) == [
        f"step 2 train/loss: {rows[3][loss]!r} vs {bumped[3][loss]!r}"]
    with path.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows[:3])
    assert compare_metrics(ref, path, SMALL["steps"])[0] == "step 2: missing from the replay"


@pytest.mark.slow
def test_replaying_the_grids_own_short_horizon_run_is_byte_identical(tmp_path, rounds_as_the_grid_machine):
    from schema.packing import unpack_run

    run = REPO / "results" / "llm" / "study" / "short-gmc-d16-s0"
    assert metrics_path(run) is not None, f"committed reference run {run} is missing"
    copy = unpack_run(run, tmp_path / run.name)  # a run folder, whether the grid is packed or not
    if rounds_as_the_grid_machine:
        assert replay(copy, 3, cache_dir=tmp_path / "cache") == []
    else:  # skipped, naming why, rather than a list of differing numbers: it loads the committed warm start, and
        # this process rounds otherwise (another machine, or a kernel path forced here and not for the run)
        with pytest.raises(ReplaySkipped, match="(rounds the recipe differently|was made on the kernel path) .* "
                                                "byte-for-byte check is skipped"):
            replay(copy, 3, cache_dir=tmp_path / "cache")
    assert replay_against_commit(copy, 3) == []  # the commit that made the run, run here


def test_the_comparison_includes_the_final_evaluation(tmp_path):
    """The primary metric sits in the evaluation after the last update (row ``steps``): a replay of
    every update compares it too, and a replay of fewer updates compares the evaluation at its end
    where the stored run evaluated there."""
    ref = REFERENCES / "short-token_clip-d16-s0" / "metrics.csv"
    rows = _fields(ref)
    header = rows[0]
    pc = header.index("eval/heldout_pc")
    path = tmp_path / "bumped.csv"
    for step in (SMALL["steps"], SMALL["eval_every"]):
        bumped = [r[:] for r in rows]
        bumped[step + 1][pc] = repr(math.nextafter(float(rows[step + 1][pc]), math.inf))
        with path.open("w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(bumped)
        assert compare_metrics(ref, path, step) == [
            f"step {step} eval/heldout_pc: {rows[step + 1][pc]!r} vs {bumped[step + 1][pc]!r}"]
    assert compare_metrics(ref, path, 2) == []  # no evaluation at step 2: nothing more to compare


def test_against_commit_on_a_run_from_a_dirty_tree_says_its_code_was_not_the_commits(tmp_path, monkeypatch, capsys):
    import json

    from llm_runs import replay as replay_mod

    run = tmp_path / "run"
    shutil.copytree(REFERENCES / "short-token_clip-d16-s0", run)
    doc = json.loads((run / "config.json").read_text())
    doc["git_dirty"] = True
    (run / "config.json").write_text(json.dumps(doc))
    monkeypatch.setattr(replay_mod, "replay_against_commit", lambda *a, **k: [])
    rc = replay_mod.main([str(run), "--steps", "3", "--against-commit"])
    out = capsys.readouterr().out
    assert rc == 3 and "uncommitted changes" in out and "not the code of" in out, out
    assert "python -m llm_runs.replay" in out  # the plain replay is the verdict that counts
    doc["git_dirty"] = False
    (run / "config.json").write_text(json.dumps(doc))
    assert replay_mod.main([str(run), "--steps", "3", "--against-commit"]) == 0
    assert "uncommitted" not in capsys.readouterr().out
