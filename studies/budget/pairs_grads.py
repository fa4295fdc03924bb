"""The per-completion gradients of the frozen-pair second moment (:mod:`studies.budget.pairs`) and their seeded
random projection.

* :func:`per_completion_gradients`: ``grad log pi(o_j)`` of every completion of one prompt, as rows of one
  matrix, from one batched forward and backward: the activations each parametrised layer sees and the gradient
  of the summed sequence log-probabilities at its output are caught by hooks; since the rows do not interact,
  that gradient at row j's positions is the gradient of row j's own log-probability, and each row's parameter
  gradient is an outer product summed over its positions (the per-sample gradient of Opacus and BackPACK). The
  same numbers as :func:`studies.common.pool.per_sample_vectors`'s ``torch.func`` form, to rounding, for
  several times less work (``python -m studies.budget.pairs_bench``).
* :class:`CountSketch`: ``z = S s`` in k dimensions, ``S`` a seeded CountSketch (each coordinate goes to one of
  k buckets with a random sign). For any fixed vectors ``x, y`` it is unbiased, ``E <Sx, Sy> = <x, y>``, with

      Var <Sx, Sy> = (|x|^2 |y|^2 + <x, y>^2 - 2 sum_i x_i^2 y_i^2) / k  <=  (|x|^2 |y|^2 + <x, y>^2) / k,

  so a squared norm is off by at most sqrt(2 / k) of itself (one s.d.), and so is any average of squared norms
  (the s.d. of a sum is at most the sum of the s.d.s). :func:`sketch_error` checks a sketched Gram matrix against
  the exact one in these units.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

SKETCH_DIM = 16384
"""k of the projection: one s.d. of a sketched squared norm is sqrt(2 / k) = 1.1% of it."""
SKETCH_SEED = 20261207


def _rms_norm_input(mod, x: torch.Tensor) -> torch.Tensor:
    """The normalised input an RMSNorm multiplies its weight by (transformers' ``Qwen3RMSNorm.forward``)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)).to(x.dtype)


def per_completion_gradients(model, prompt: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor, flat: bool = True):
    """``(n, params)`` in the parameters' dtype (with ``flat=False``: its column blocks, one ``(start, stop, (n,
    stop - start))`` per parameter, in order, without assembling them): row j is
    ``grad_theta sum_t mask[j, t] log pi(rows[j, t] | prompt, rows[j, <t])``, the parameters in
    ``model.parameters()`` order (those with ``requires_grad``; a tied weight once). ``prompt`` ``(L,)`` is unpadded
    and shared by the rows ``(n, T)``; tokens after a row's end are masked out of its sum and, attention being
    causal, change nothing before them. Layers: ``nn.Linear`` without bias, ``nn.Embedding`` and
    RMSNorm (a ``weight`` times the normalised input, with ``variance_epsilon``); another parametrised layer is
    refused by name, never skipped."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no parameter with requires_grad: no gradient to take")
    where, off = {}, 0
    for p in params:
        where[id(p)] = (off, off + p.numel())
        off += p.numel()
    n, T = rows.shape
    if mask.shape != rows.shape:
        raise ValueError(f"mask {tuple(mask.shape)} and rows {tuple(rows.shape)} differ in shape")
    caught: list[list] = []
    starts: list[torch.Tensor] = []
    hooks = []

    def catch(mod, inp, out):
        own = [p for p in mod.parameters(recurse=False) if id(p) in where]
        if not own:
            return None
        if isinstance(mod, nn.Embedding):  # the first layer: the graph starts at its output
            out = out.detach().requires_grad_(True)
            starts.append(out)
        rec = [mod, inp[0].detach(), None]
        out.register_hook(lambda g, rec=rec: rec.__setitem__(2, g.detach()))
        caught.append(rec)
        return out

    for mod in model.modules():
        if any(id(p) in where for p in mod.parameters(recurse=False)):
            if not (isinstance(mod, (nn.Linear, nn.Embedding)) or (hasattr(mod, "variance_epsilon")
                                                                   and set(mod._parameters) == {"weight"})):
                raise ValueError(f"per_completion_gradients: no per-sample rule for the layer {type(mod).__name__}")
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                raise ValueError(f"per_completion_gradients: the layer {type(mod).__name__} has a bias (no rule)")
            hooks.append(mod.register_forward_hook(catch))
    flags = [p.requires_grad for p in params]
    ids = torch.cat([prompt[None].expand(n, -1), rows], 1)
    try:
        for p in params:  # the graph through the activations only: no parameter gradient is formed
            p.requires_grad_(False)
        with torch.enable_grad():
            logits = model(input_ids=ids, use_cache=False, logits_to_keep=T + 1).logits[:, :-1]
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float32 at least, as the trainer
            lp = logits.gather(-1, rows[..., None])[..., 0] - torch.logsumexp(logits, -1)
            total = (lp * mask.to(lp.dtype)).sum()
            if not starts:
                raise ValueError("per_completion_gradients: the model has no embedding layer to start the graph at")
            torch.autograd.backward(total, inputs=starts)
    finally:
        for h in hooks:
            h.remove()
        for p, f in zip(params, flags):
            p.requires_grad_(f)
    blocks: dict[int, list] = {}
    for mod, x, g in caught:
        a, b = where[id(mod.weight)]
        if g is None:  # a layer the summed log-probability does not reach
            continue
        if isinstance(mod, nn.Linear):
            gw = torch.bmm(g.reshape(n, -1, g.shape[-1]).transpose(1, 2), x.reshape(n, -1, x.shape[-1]))
        elif isinstance(mod, nn.Embedding):
            gw = torch.zeros(n, *mod.weight.shape, dtype=g.dtype)
            gw.scatter_add_(1, x.reshape(n, -1, 1).expand(-1, -1, mod.weight.shape[1]), g.reshape(n, -1, g.shape[-1]))
        else:
            xh = _rms_norm_input(mod, x)
            gw = (g * xh).reshape(n, -1, xh.shape[-1]).sum(1)
        gw = gw.reshape(n, -1).to(params[0].dtype)
        if a in blocks:  # a tied weight: its second layer's share
            blocks[a][2] = blocks[a][2] + gw
        else:
            blocks[a] = [a, b, gw]
    for p in params:
        a, b = where[id(p)]
        if a not in blocks:
            blocks[a] = [a, b, torch.zeros(n, b - a, dtype=params[0].dtype)]
    out = [tuple(blocks[a]) for a in sorted(blocks)]
    if not flat:
        return out
    return torch.cat([blk for _, _, blk in out], 1)
    return out


class CountSketch:
    """A seeded CountSketch of ``dim``-vectors into ``k`` buckets: coordinate i goes to bucket ``h(i)`` with sign
    ``sigma(i)`` (``numpy.random.default_rng([seed, dim, k])``). ``fold(z, k2)`` is the CountSketch with ``k2``
    buckets (``k2`` dividing ``k``): bucket ``h(i) mod k2``, the same signs."""

    def __init__(self, dim: int, k: int = SKETCH_DIM, seed: int = SKETCH_SEED):
        if dim < 1 or k < 1:
            raise ValueError(f"CountSketch needs dim >= 1 and k >= 1, got dim = {dim}, k = {k}")
        rng = np.random.default_rng([seed, dim, k])
        self.dim, self.k = dim, k
        self.bucket = torch.from_numpy(rng.integers(0, k, dim))
        self.sign = torch.from_numpy(rng.integers(0, 2, dim) * 2.0 - 1.0).float()

    def __call__(self, x) -> torch.Tensor:
        """``(n, dim)`` -> ``(n, k)``, in ``x``'s dtype; ``x`` may also be column blocks ``[(start, stop, (n, stop -
        start)), ...]`` covering ``range(dim)`` (:func:`per_completion_gradients` with ``flat=False``)."""
        blocks = [(0, x.shape[-1], x)] if isinstance(x, torch.Tensor) else list(x)
        if sum(b - a for a, b, _ in blocks) != self.dim or any(blk.shape[-1] != b - a for a, b, blk in blocks):
            given = sum(blk.shape[-1] for _, _, blk in blocks)
            raise ValueError(f"CountSketch of dimension {self.dim} given vectors of dimension {given}")
        first = blocks[0][2]
        z = torch.zeros(*first.shape[:-1], self.k, dtype=first.dtype)
        for a, b, blk in blocks:
            z.index_add_(-1, self.bucket[a:b], blk * self.sign[a:b].to(blk.dtype))
        return z

    @staticmethod
    def fold(z: torch.Tensor, k2: int) -> torch.Tensor:
        k = z.shape[-1]
        if k % k2:
            raise ValueError(f"a sketch of {k} buckets folds only into a divisor of {k}, not {k2}")
        return z.reshape(*z.shape[:-1], k // k2, k2).sum(-2)


def sketch_error(exact: torch.Tensor, sketched: torch.Tensor, k: int) -> dict:
    """A sketched Gram matrix against the exact one, in the units of the variance above: per entry
    ``z = (sketched - exact) / sqrt((G_ii G_jj + G_ij^2) / k)`` (mean ~0 and mean square <= 1 for an unbiased
    sketch within its bound), and the largest relative error of a squared norm against sqrt(2 / k)."""
    e, s = exact.double(), sketched.double()
    d = e.diagonal()
    scale = torch.sqrt((d[:, None] * d[None, :] + e**2) / k).clamp_min(1e-300)
    z = (s - e) / scale
    rel = ((s.diagonal() - d) / d.clamp_min(1e-300)).abs()
    return {"k": k, "entries": int(z.numel()), "z_mean": float(z.mean()), "z_rms": float(z.pow(2).mean().sqrt()),
            "z_max": float(z.abs().max()), "norm_rel_err_max": float(rel.max()),
            "norm_rel_err_rms": float(rel.pow(2).mean().sqrt()), "norm_sd_bound": math.sqrt(2 / k)}
