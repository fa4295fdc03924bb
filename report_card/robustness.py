"""Finite in value and gradient: the robustness sweep the registered losses pass, run on one correction.

The same cases as the suite's sweep over every registered loss (tests/test_loss_robustness.py:
``test_masked_positions_never_influence_a_loss`` and ``test_every_loss_finite_or_documented``),
drawn here from a fixed numpy seed instead of hypothesis, through the one entry point every
trainer uses (:func:`estimators.losses.policy_loss`):

* padding: the positions outside the completion mask hold ``-inf``, NaN or a huge value (6e4 in
  float16); the value and gradient must equal the unpadded batch's bit for bit, be finite, and
  the gradient be 0 there;
* extreme ratios: per-token log-ratios in [-1e4, 1e4] (with +-1e4, +-30, 0 drawn often),
  behaviour log-probs in [-30, 0], random masks, advantages in [-10, 10] (0 often), G in {2, 4},
  one or two groups, in float64, float32, bfloat16 and float16. A bounded correction must give a
  finite value and gradient; an unbounded one (declared ``bounded=False``) ``+inf``, never NaN.
  A ``ValueError`` is the toolkit's refusal by name of an input outside a loss's domain (``is``'s
  overflowing surrogate, DPPO-TV's log-probabilities above 0): it is counted and shown with its
  message, not as a failure; any other exception is a failure, and so is policy_loss's refusal of a
  bounded loss that came out NaN or infinite (:class:`estimators.losses.dispatch.NonFiniteLoss`): the
  infinity is the loss's, not an input outside its domain, so it is no refusal.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from estimators.losses import is_bounded, policy_loss
from estimators.losses.dispatch import NonFiniteLoss

DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
PADS = (-math.inf, math.nan, 1e30)
N_CASES = 200  # the suite's max_examples
SEED = 20261203


def padded_batch(dtype, pad, G=2, prompts_per_step=2, T=5, seed=0):
    """``((logp, old), (padded logp, padded old), mask, advantages)``: a batch of ``prompts_per_step`` groups of
    ``G`` completions, ``T`` positions of which the last two (and all but the first of row 1) are
    padding holding ``pad`` in the padded copy (the suite's padding test uses it too)."""
    gen = torch.Generator().manual_seed(seed)
    B = G * prompts_per_step
    old = (torch.rand(B, T, generator=gen, dtype=torch.float64) * -2.0 - 0.1)
    logp = old + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
    mask = torch.ones(B, T)
    mask[:, 3:] = 0
    mask[1, 1:] = 0  # a one-token completion
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)[:B]
    plogp, pold = logp.clone(), old.clone()
    plogp[mask == 0] = pad
    pold[mask == 0] = pad
    return (logp.to(dtype), old.to(dtype)), (plogp.to(dtype), pold.to(dtype)), mask, adv


def _loss_and_grad(estimator, logp, old, mask, adv, G, eps):
    x = logp.clone().requires_grad_()
    out = policy_loss(estimator, x, old, mask, adv, G, eps)
    out.loss.backward()
    return out.loss.detach(), (x.grad if x.grad is not None else torch.zeros_like(x))


def _cases(rng: np.random.Generator):
    extremes = np.array([1e4, -1e4, 0.0, 30.0, -30.0])
    for _ in range(N_CASES):
        dtype = DTYPES[rng.integers(len(DTYPES))]
        G = int(rng.choice([2, 4]))
        B = G * int(rng.integers(1, 3))
        T = int(rng.integers(1, 5))
        lr = np.where(rng.random(B * T) < 0.4, extremes[rng.integers(len(extremes), size=B * T)],
                      rng.uniform(-1e4, 1e4, B * T) * rng.choice([1.0, 1e-3, 1e-6], B * T))
        old = rng.uniform(-30.0, 0.0, B * T)
        keep = rng.random(B * T) < 0.7
        pad = [-math.inf, math.nan, 0.0][rng.integers(3)]
        adv = np.where(rng.random(B) < 0.25, 0.0, rng.uniform(-10.0, 10.0, B))
        yield dtype, G, B, T, lr, old, keep, pad, adv


def sweep(estimator: str, eps: float = 0.2) -> dict:
    """Run both parts of the sweep on ``name``; per dtype the cases run and the failures (each with
    its input), and the totals. Never raises for the correction's own failure: it is a finding."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's notes on the losses' own error paths
        return _sweep(estimator, eps)


def _sweep(estimator: str, eps: float) -> dict:
    bounded = is_bounded(estimator)
    res = {"bounded": bounded, "by_dtype": {str(d).replace("torch.", ""): {"cases": 0, "failures": 0}
                                            for d in DTYPES}, "failures": [], "refused": 0, "refusals": []}

    def fail(dtype, what):
        res["by_dtype"][str(dtype).replace("torch.", "")]["failures"] += 1
        if len(res["failures"]) < 8:
            res["failures"].append(f"{str(dtype).replace('torch.', '')}: {what}")

    for dtype in DTYPES:  # padding conventions
        for pad in PADS:
            p = pad if dtype != torch.float16 or math.isnan(pad) or pad < 0 else 6e4
            res["by_dtype"][str(dtype).replace("torch.", "")]["cases"] += 1
            (logp, old), (plogp, pold), mask, adv = padded_batch(dtype, p)
            try:
                ref = _loss_and_grad(estimator, logp, old, mask, adv, 2, eps)
                got = _loss_and_grad(estimator, plogp, pold, mask, adv, 2, eps)
            except Exception as exc:  # noqa: BLE001 (a finding about the correction, not a crash)
                fail(dtype, f"padding {p!r}: {type(exc).__name__}: {exc}")
                continue
            if not (bool(torch.isfinite(got[0])) and bool(torch.isfinite(got[1]).all())):
                fail(dtype, f"padding {p!r}: value or gradient not finite ({float(got[0])})")
            elif not (torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])):
                fail(dtype, f"padding {p!r}: value or gradient differs from the unpadded batch")
            elif not bool((got[1][mask == 0] == 0).all()):
                fail(dtype, f"padding {p!r}: a padded position has a gradient")
    rng = np.random.default_rng(SEED)
    for dtype, G, B, T, lr, old, keep, pad, adv in _cases(rng):  # extreme ratios
        key = str(dtype).replace("torch.", "")
        res["by_dtype"][key]["cases"] += 1
        mask = torch.tensor(keep, dtype=torch.float64).reshape(B, T)
        mask[:, 0] = 1.0
        adv_t = torch.tensor(adv, dtype=torch.float64)

        def run(pad_value, old=old, lr=lr, B=B, T=T, mask=mask, dtype=dtype, adv_t=adv_t, G=G):
            old_t = torch.tensor(old, dtype=torch.float64).reshape(B, T)
            logp = old_t + torch.tensor(lr, dtype=torch.float64).reshape(B, T)
            logp[mask == 0] = pad_value
            old_t[mask == 0] = pad_value
            return _loss_and_grad(estimator, logp.to(dtype), old_t.to(dtype), mask, adv_t, G, eps)

        what = (f"G = {G}, {B} rows x {T} tokens, max |log r| {np.max(np.abs(lr)):.3g}, "
                f"advantages {np.round(adv, 3).tolist()}")
        try:
            loss, grad = run(pad)
            loss0, grad0 = run(0.0)
        except NonFiniteLoss as exc:  # a bounded loss's own NaN or infinity, refused by policy_loss: a failure
            fail(dtype, f"{what}: declared bounded, its loss is not finite ({str(exc)[:200]})")
            continue
        except ValueError as exc:
            res["refused"] += 1
            msg = str(exc).split(";")[0][:160]
            if len(res["refusals"]) < 3 and all(msg.split("(")[0] != m.split("(")[0] for m in res["refusals"]):
                res["refusals"].append(msg)
            continue
        except Exception as exc:  # noqa: BLE001 (a finding about the correction, not a crash)
            fail(dtype, f"{what}: {type(exc).__name__}: {exc}")
            continue
        if bool(torch.isnan(loss)) or bool(torch.isnan(grad).any()):
            fail(dtype, f"{what}: NaN {'value' if bool(torch.isnan(loss)) else 'gradient'}")
        elif not (torch.equal(loss, loss0) and torch.equal(grad, grad0)):
            fail(dtype, f"{what}: the padding changes the value or gradient")
        elif not bool((grad[mask == 0] == 0).all()):
            fail(dtype, f"{what}: a padded position has a gradient")
        elif bounded and not (bool(torch.isfinite(loss)) and bool(torch.isfinite(grad).all())):
            fail(dtype, f"{what}: declared bounded, value {float(loss):g} or gradient not finite")
        elif not bounded and float(loss) == -math.inf:
            fail(dtype, f"{what}: -inf value (an unbounded loss may reach +inf only)")
    res["cases"] = sum(v["cases"] for v in res["by_dtype"].values())
    res["n_failures"] = sum(v["failures"] for v in res["by_dtype"].values())
    res["passed"] = res["n_failures"] == 0
    return res
