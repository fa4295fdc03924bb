"""Step-size control in the trainer's update (llm_runs.update.policy_update, a tiny run trained 5 steps):
per-trajectory gradients against brute force, every control off leaving the update untouched, a step scale
scaling SGD's step exactly, the zero-gradient skip against Adam's momentum, OPOB in the trainer, an
overflowing optimiser step and a non-finite checkpoint refused, and ``RECIPES["vcpo_exact"]`` against a
transcription of VCPO's code."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from conftest import tiny

from llm_runs import stepsize
from llm_runs.update import flat_params, policy_update


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run's trainer after 5 updates at delay 2 (its last batch has a learning signal)."""
    from llm_runs.trainer import Trainer

    root = tmp_path_factory.mktemp("stepsize")
    cfg = tiny(root / "cache", delay=2, steps=5)
    trainer = Trainer(cfg, root / "run", progress=False, log=lambda m: None)
    trainer.run()
    assert float(trainer.last_batch.rewards.std()) > 0
    return trainer


def test_trajectory_grad_norms_equal_brute_force(trained):
    from llm_runs.rollout import completion_logprobs

    model, batch = trained.policy, trained.last_batch
    got = stepsize.trajectory_grad_sq_norms(model, batch)
    for i in (0, 5):
        model.zero_grad(set_to_none=True)
        logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, 1.0, 1)
        (logp[i] * batch.completion_mask[i]).sum().backward()
        want = sum(float((p.grad.double() ** 2).sum()) for p in model.parameters() if p.grad is not None)
        assert got.view(-1)[i].item() == pytest.approx(want, rel=1e-4)
    model.zero_grad(set_to_none=True)


class _Control:
    def __init__(self, **kw):
        self.ess_scaling, self.ess_base_ratio, self.ess_use_clipped = "none", 1.0, False
        self.gmc_step, self.skip_zero_grad, self.drift_diagnostics = False, False, False
        self.opob_norm_by_std, self.estimator, self.eps = True, "gmc", 0.2
        self.__dict__.update(kw)


def _step(model, batch, control, opt_state=None, **kw):
    m = copy.deepcopy(model)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    if opt_state is not None:
        opt.load_state_dict(opt_state)
    row = policy_update(m, opt, batch, estimator=kw.pop("estimator", "gmc"), eps=0.2, control=control, **kw)
    return m, opt, row


def test_every_control_off_is_the_uncontrolled_update(trained):
    a, _, ra = _step(trained.policy, trained.last_batch, None)
    b, _, rb = _step(trained.policy, trained.last_batch, _Control())
    assert np.array_equal(flat_params(a), flat_params(b))
    assert not any(k.startswith(("step/", "drift/")) for k in rb) and ra == {**ra, **rb}


def test_a_step_scale_scales_sgd_s_step_exactly(trained):
    base = flat_params(trained.policy)

    def sgd_step(control):
        m = copy.deepcopy(trained.policy)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        row = policy_update(m, opt, trained.last_batch, estimator="is", eps=0.2, control=control)
        return flat_params(m) - base, row

    plain, _ = sgd_step(None)
    scaled, row = sgd_step(_Control(ess_scaling="linear", estimator="is"))
    s = row["step/lr_scale"]
    assert 0 < s < 1 and row["step/ess_ratio"] == pytest.approx(s)
    ulp = 2.0**-23 * np.abs(base).max()  # float32 parameters: each difference is exact to about one ulp of theta
    np.testing.assert_allclose(scaled, s * plain, rtol=1e-4, atol=4 * ulp)
    assert np.abs(plain).max() > 1e3 * ulp  # the steps are far above the rounding
    _, row = sgd_step(_Control(gmc_step=True, estimator="is"))
    assert row["step/gmc_scale"] == row["step/lr_scale"] <= 1.0


def test_the_zero_gradient_skip_stops_adam_s_momentum(trained):
    batch = trained.last_batch
    m1, opt, _ = _step(trained.policy, batch, None)  # a step with a gradient: Adam has momentum now
    flat = copy.deepcopy(batch)
    flat.rewards = torch.zeros_like(batch.rewards)  # every advantage 0: a zero gradient
    state = opt.state_dict()
    moved, _, row = _step(m1, flat, None, opt_state=state)
    assert row["train/grad_norm"] == 0.0 and not np.array_equal(flat_params(moved), flat_params(m1))
    kept, _, row = _step(m1, flat, _Control(skip_zero_grad=True), opt_state=state)
    assert row["step/zero_grad_skipped"] == 1 and row["train/update_skipped"] == 0
    assert np.array_equal(flat_params(kept), flat_params(m1))
    _, _, row = _step(m1, batch, _Control(skip_zero_grad=True), opt_state=state)
    assert row["step/zero_grad_skipped"] == 0


def test_opob_runs_in_the_trainer_and_logs_its_cost(tmp_path):
    import pandas as pd

    from llm_runs.trainer import Trainer

    cfg = tiny(tmp_path / "cache", delay=1, steps=2, advantage="opob", estimator="seq_tis", seq_tis_c=8.0,
               ess_scaling="sqrt", max_grad_norm=1.0, drift_diagnostics=True)
    Trainer(cfg, tmp_path / "run", progress=False, log=lambda m: None).run()
    m = pd.read_csv(tmp_path / "run" / "metrics.csv")
    upd = m[m["step"] < 2]
    assert (upd["perf/opob_s"] > 0).all() and upd["step/lr_scale"].between(0, 1).all()
    assert upd["drift/kl"].notna().all() and upd["drift/ess_ratio"].between(0, 1 + 1e-9).all()


def test_an_optimiser_step_that_overflows_is_refused_by_name(trained):
    """A step that turns a weight non-finite from a finite gradient (here an SGD whose step writes an
    inf, as an overflowing step would) is an error naming the optimiser step and its settings, not the
    log-probabilities of the next forward pass."""
    class Overflowing(torch.optim.SGD):
        def step(self, closure=None):
            super().step(closure)
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("inf")

    m = copy.deepcopy(trained.policy)
    with pytest.raises(ValueError, match=r"the optimiser step \(Overflowing: lr 0.01.*non-finite from a finite "
                                         r"gradient \(norm"):
        policy_update(m, Overflowing(m.parameters(), lr=0.01), trained.last_batch, estimator="gmc", eps=0.2)


def test_a_checkpoint_is_never_written_with_a_non_finite_weight(trained):
    p = next(trained.policy.parameters())
    keep = p.detach().clone()
    with torch.no_grad():
        p.view(-1)[0] = float("nan")
    try:
        with pytest.raises(ValueError, match="not writing the checkpoint of update 7 .* is not finite"):
            trained.save_checkpoint(7)
        assert not (trained.out / "checkpoints" / "step-000007").exists()
    finally:
        with torch.no_grad():
            p.copy_(keep)


def _vcpo_update_direction(model, batch, cap: float = 8.0, base: float = 1.0):
    """VCPO's update of one mini-batch, transcribed from mit-han-lab/vcpo with its recipe's settings
    (``shell/vcpo/math/vcpo_k=10.sh``: seq-mean-token-mean, rollout_is sequence at 8, PPO clipping off, OPOB
    per group on the unclipped IS weights with norm_by_std, ESS sqrt scaling on the unclipped ratios, base 1.0):
    ``megatron_actor.py`` (one trajectory per micro-batch with advantage 1; ``_compute_grad_norms``;
    ``_update_grad_buffers``), ``staleness_utils.py`` (``compute_is_info``'s seq_is, ``compute_grad_info``'s
    population std, ``compute_opob_baseline``, ``get_weighted_mean``, ``compute_ess_info``). Returns the
    accumulated gradient (a flat float64 vector), the step's lr factor sqrt(min(1, ess_ratio / base)), and the
    elementwise magnitude ``sum_i |A_i| |g_i|`` of the terms the gradient sums (``A_i`` the trajectory's OPOB
    advantage, ``g_i`` its weighted gradient), which scales the rounding of the advantages; and, per trajectory,
    the sequence weight ``seq_is`` and ``delta``, a bound on how far a float32 computation of its sequence
    log-ratio may lie from another's (:func:`_float32_seq_log_ratio_bound`)."""
    from llm_runs.rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    N, G = batch.rewards.numel(), batch.group_size
    rewards = [float(r) for r in batch.rewards.view(-1)]
    accum = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    score = torch.zeros_like(accum)
    mag, mag_reward, mag_score = torch.zeros_like(accum), torch.zeros_like(accum), torch.zeros_like(accum)
    records, seq_is_all, deltas = [], [], []
    for i in range(N):
        sl = slice(i, i + 1)
        logp = completion_logprobs(model, batch.prompt_ids[sl], batch.prompt_mask[sl], batch.completion_ids[sl], 1.0, 1)
        mask = batch.completion_mask[sl].to(logp.dtype)
        log_ratio = (logp.detach() - batch.behaviour_logp[sl].to(logp.dtype)) * mask  # old (= pi_theta) - rollout
        seq_is = float(torch.exp(log_ratio.sum()))
        deltas.append(_float32_seq_log_ratio_bound(model, batch, i, log_ratio))
        is_weight = min(seq_is, cap)
        ratio = torch.exp(logp - logp.detach())  # clip_ratio_low=1, high=1e9: never clipped
        per_tok = -1.0 * ratio * is_weight  # advantages set to ones
        L = int(mask.sum())
        loss = (per_tok * mask).sum() / mask.sum() * (1.0 / N)  # seq-mean-token-mean of one sequence, loss_multiplier
        grads = torch.autograd.grad(loss, params)
        g = torch.cat([x.double().flatten() for x in grads])
        unscaled = float(g.norm()) * L / (1.0 / N)
        grp = i // G
        r = rewards[grp * G:(grp + 1) * G]
        std = float(torch.std(torch.tensor(r, dtype=torch.float32), unbiased=False))
        scale_reward, scale_baseline = rewards[i], 1.0
        if std > 1e-8:
            scale_reward, scale_baseline = rewards[i] / std, 1.0 / std
        accum += scale_reward * g
        score += scale_baseline * g
        mag_reward += abs(scale_reward) * g.abs()
        mag_score += abs(scale_baseline) * g.abs()
        records.append((grp, rewards[i], unscaled ** 2 * seq_is ** 2))
        seq_is_all.append(seq_is)
        if i % G == G - 1:  # last trajectory of its group: compute_opob_baseline, move_grad_buffers
            num = den = 0.0
            for rg, rw, w in records:
                if rg == grp:
                    num += float(rw) * float(w)
                    den += float(w)
            accum -= num / (den + 1e-8) * score
            mag += mag_reward + abs(num / (den + 1e-8)) * mag_score  # >= sum_i |A_i| |g_i| over the group
            score.zero_()
            mag_reward.zero_()
            mag_score.zero_()
    s1, s2 = sum(seq_is_all), sum(v ** 2 for v in seq_is_all)
    ess_ratio = s1 ** 2 / (s2 + 1e-8) / N
    return accum, math.sqrt(min(1.0, ess_ratio / base)), mag, seq_is_all, deltas


def _float32_seq_log_ratio_bound(model, batch, i: int, log_ratio: torch.Tensor) -> float:
    """A bound on ``|a - b|`` for two float32 computations ``a``, ``b`` of trajectory ``i``'s sequence
    log-ratio ``sum_t (log pi(o_t) - log mu(o_t))``, however each kernel orders its sums: the log-probabilities
    are taken in float32 from the (float64) logits (:func:`llm_runs.rollout._token_logprobs`), so each side
    rounds, per token, ``z_y`` (2^-24 |z_y|) and ``lse = m + log S``, ``S = sum_j exp(z_j - m)``: each term
    of S to 2^-24 (|z_j - m| + 2) of itself, the sum of V terms to ceil(log2 V) 2^-24 of it (torch's cascade
    sum), so log S to 2^-24 (E_softmax |z - m| + 2 + ceil(log2 V)), the log and the add to 2^-24 (|log S| +
    |lse|); then the difference to the behaviour log-prob (2^-24 |log r_t|, one more for the log-prob's own
    subtraction) and the sum over L tokens ((L - 1) 2^-24 sum_t |log r_t|). Two sides, each within this of
    the exact value: twice it."""
    from llm_runs.qwen3_forward import logits_fn

    sl = slice(i, i + 1)
    T = batch.completion_ids.shape[1]
    ids = torch.cat([batch.prompt_ids[sl], batch.completion_ids[sl]], 1)
    attn = torch.cat([batch.prompt_mask[sl], torch.ones_like(batch.completion_ids[sl])], 1)
    pos = (attn.cumsum(-1) - 1).clamp_(min=0)
    with torch.no_grad():
        z = logits_fn(model)(ids, attn, pos, logits_to_keep=T + 1)[:, :-1].double()[0]
    m = z.max(-1).values
    log_s = torch.log(torch.exp(z - m[:, None]).sum(-1))
    lse = m + log_s
    p = torch.softmax(z, -1)
    zy = z.gather(-1, batch.completion_ids[i][:, None]).squeeze(-1)
    V = z.shape[-1]
    per_token = (zy.abs() + (p * ((z - m[:, None]).abs() + 2)).sum(-1) + math.ceil(math.log2(V))
                 + log_s.abs() + 2 * lse.abs() + 1)
    mask = batch.completion_mask[i].double()
    lr = log_ratio.detach().double().reshape(-1).abs() * mask
    L = float(mask.sum())
    one_side = 2.0 ** -24 * (float((per_token * mask).sum()) + float(lr.sum()) * L)
    return 2 * one_side


def test_the_vcpo_exact_recipe_steps_as_vcpo_s_code_does(trained, tmp_path):
    """``RECIPES["vcpo_exact"]`` through the trainer's update (SGD at lr 1, no gradient clip: the step is
    -scale * gradient) against the transcription of VCPO's code on the same batch, in float64, to 1e-6;
    the toolkit's ``vcpo`` recipe differs from it (the three differences are real).

    The tolerance is elementwise, from the computation: both sides are float64 except for one float32
    rounding each of the advantages. The trainer casts its OPOB advantages to float32 (a relative error of at
    most 2^-24 per ``A_i``), and the transcription divides by VCPO's float32 ``torch.std`` of the G rewards
    (a relative error of at most about (G + 2) 2^-24, whatever order the kernel sums in). An error
    ``delta A_i`` moves element k by ``delta A_i g_ik``, so element k may differ by (G + 4) 2^-24
    ``sum_i |A_i| |g_ik|``: an error relative to the terms summed, not to the sum, which cancels (on one CPU
    an element 8e-6 of its own size apart was well inside this; an RMS-scaled tolerance failed on others).
    The float64 parts add about N 2^-53 of the same magnitude, far below it."""
    from llm_runs.config import resolve_config

    model = copy.deepcopy(trained.policy).double()
    batch = copy.deepcopy(trained.last_batch)
    batch.behaviour_logp = batch.behaviour_logp.double()
    # rewards with unequal groups and one flat group (where VCPO leaves R (1 - sum W / (sum W + 1e-8)), about 1e-10
    # here: opob_flat_zero is VCPO's, but this batch cannot tell it from 0)
    g = torch.Generator().manual_seed(3)
    batch.rewards = (torch.rand(batch.rewards.shape, generator=g) < 0.5).to(batch.rewards.dtype)
    batch.rewards.view(batch.prompts_per_step, -1)[0] = 1.0
    want, want_s, mag, w, delta = _vcpo_update_direction(model, batch)
    assert 0.05 < want_s < 0.999 and float(want.norm()) > 0  # the ESS step and the gradient both act
    # the step's factor sqrt(rho), rho = (sum w)^2 / (sum w^2 N): both sides take the sequence log-ratios in
    # float32 (from logits of different batch shapes), each within delta_i of the other (the helper's bound), and
    # d log rho / d log w_i = 2 w_i / s1 - 2 w_i^2 / s2, so log s may differ by half the sum of |that| delta_i
    s1, s2 = sum(w), sum(v * v for v in w)
    s_tol = 0.5 * sum(abs(2 * v / s1 - 2 * v * v / s2) * d for v, d in zip(w, delta)) + 1e-12
    # not vacuous: far below what the rule decides (linear against sqrt doubles log s)
    assert s_tol <= 0.01 * abs(math.log(want_s))

    def step(recipe):
        settings = {k: v for k, v in stepsize.RECIPES[recipe].items() if k != "max_grad_norm"}
        cfg = resolve_config({**trained.config.__dict__, **settings, "max_grad_norm": None})
        m = copy.deepcopy(model)
        before = torch.cat([p.detach().double().flatten() for p in m.parameters()])
        opt = torch.optim.SGD(m.parameters(), lr=1.0)
        row = policy_update(m, opt, batch, estimator=cfg.estimator, eps=cfg.eps, advantage=cfg.advantage,
                            loss_options=cfg.loss_options(), control=cfg)
        after = torch.cat([p.detach().double().flatten() for p in m.parameters()])
        return before - after, row

    got, row = step("vcpo_exact")
    assert abs(math.log(row["step/lr_scale"] / want_s)) <= s_tol, (row["step/lr_scale"], want_s, s_tol)
    err = (got - want_s * want).abs()
    bound = ((batch.group_size + 4) * 2.0 ** -24 * want_s * mag + 64 * 2.0 ** -53 * want_s * mag
             + abs(row["step/lr_scale"] - want_s) * want.abs())  # the factors' own rounding, as above
    worst = int(torch.argmax(err / bound.clamp_min(1e-300)))
    assert bool((err <= bound).all()), (
        f"element {worst}: {float(got[worst])} against {float(want_s * want[worst])}, "
        f"{float(err[worst]):.3g} apart where the rounding allows {float(bound[worst]):.3g}")
    # not vacuous: the rounding allows far less than the step itself (a few 1e-6 of it here)
    assert float(bound.norm()) <= 1e-4 * want_s * float(want.norm())
    ours, _ = step("vcpo")
    assert float((ours - got).norm()) > 1e-3 * float(got.norm())
