"""Rollouts: seeded sampling with a KV cache, behaviour log-probs recorded at sampling time,
and teacher-forced re-scoring.

Sampling is done by :class:`SeededSampler` inside :func:`decode`, a plain KV-cache loop that
returns what ``model.generate(do_sample=False)`` with the sampler as its logits processor
returns (the sampler works as either): at each position it draws the next token of every row
by inverse-CDF from the behaviour distribution mu = softmax(logits / tau) (optionally top-k
/ top-p truncated), records log mu(token), and returns scores whose argmax is that token.
The uniforms come from a counter-based hash of a per-sample key derived from (seed, step,
prompt slot, sample index) and the position, so a sample does not depend on batch size,
batch order, the global RNG or on where a run was resumed.

Rows are laid out in groups: rows ``g*G .. g*G+G-1`` are the G completions of prompt g.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import numpy as np
import torch

from .qwen3_forward import logits_fn
from .tasks import Problem

# --------------------------------------------------------------------------- counter-based RNG

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic is intended)."""
    x = np.atleast_1d(np.asarray(x, dtype=np.uint64))
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def derive_key(*parts) -> np.ndarray:
    """Hash integer parts (scalars or broadcastable arrays) into uint64 keys."""
    key = np.atleast_1d(np.uint64(0x5EED))
    with np.errstate(over="ignore"):
        for p in parts:
            key = _mix64(key + _GOLDEN + np.atleast_1d(np.asarray(p).astype(np.int64)).astype(np.uint64))
    return key


def sample_keys(seed: int, step: int, prompts_per_step: int, group_size: int) -> np.ndarray:
    """Per-sample keys from (seed, step, prompt slot, sample index), shape (prompts_per_step * G,)."""
    slot = np.repeat(np.arange(prompts_per_step), group_size)
    sample = np.tile(np.arange(group_size), prompts_per_step)
    return derive_key(seed, step, slot, sample)


def key_uniforms(keys: np.ndarray, length: int) -> np.ndarray:
    """Uniforms in (0, 1], shape (len(keys), length): position p of sample n uses hash(key_n, p)."""
    pos = np.arange(1, length + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        bits = _mix64(np.asarray(keys, dtype=np.uint64)[:, None] + pos[None, :] * _GOLDEN)
    return ((bits >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


# --------------------------------------------------------------------------- sampling


def truncate_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set to -inf every token outside the top-k / top-p set (0 and 1 disable them)."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, -1)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class SeededSampler:
    """Logits processor that samples with per-sample uniforms and records log mu(token).

    ``uniforms``: (N, max_new_tokens) from :func:`key_uniforms`. After ``generate`` the
    sampled tokens and their behaviour log-probs are in ``tokens`` / ``logps`` (N, steps).
    """

    def __init__(self, prompt_len: int, uniforms: np.ndarray, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0):
        self.prompt_len = prompt_len
        self.uniforms = torch.as_tensor(uniforms, dtype=torch.float64)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self._tokens: list[torch.Tensor] = []
        self._logps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        token = self.draw(input_ids.shape[1] - self.prompt_len, scores)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, token[:, None], 0.0)

    def draw(self, pos: int, scores: torch.Tensor) -> torch.Tensor:
        """The tokens of completion position ``pos`` drawn from ``scores`` (N, V); records log mu."""
        logits = scores.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logits = truncate_logits(logits, self.top_k, self.top_p)
        logp = torch.log_softmax(logits, -1)
        cdf = logp.double().exp().cumsum(-1)
        u = self.uniforms[:, pos].to(cdf.device) * cdf[:, -1]
        token = (cdf < u[:, None]).sum(-1).clamp_(max=logits.shape[-1] - 1)
        self._tokens.append(token)
        self._logps.append(logp.gather(-1, token[:, None]).squeeze(-1))
        return token

    @property
    def tokens(self) -> torch.Tensor:
        return torch.stack(self._tokens, 1)

    @property
    def logps(self) -> torch.Tensor:
        return torch.stack(self._logps, 1)


@dataclass
class RolloutBatch:
    """B groups of G completions (rows g*G .. g*G+G-1 share prompt g). N = B*G rows."""

    prompt_ids: torch.Tensor  # (N, P) long, left padded
    prompt_mask: torch.Tensor  # (N, P) long
    completion_ids: torch.Tensor  # (N, T) long, pad after EOS
    completion_mask: torch.Tensor  # (N, T) float: 1 on completion tokens up to and including EOS
    behaviour_logp: torch.Tensor  # (N, T) float32: log mu(o^t | q, o^<t) recorded at sampling time; 0 off-mask
    rewards: torch.Tensor  # (N,) float32 r(q, o)
    versions: torch.Tensor  # (N,) long: policy version of the behaviour policy that sampled the row
    problem_index: torch.Tensor  # (N,) long: index of the prompt in the task's training pool
    finished: torch.Tensor  # (N,) bool: EOS emitted within max_new_tokens
    group_size: int

    @property
    def prompts_per_step(self) -> int:
        return self.prompt_ids.shape[0] // self.group_size

    def to(self, device) -> RolloutBatch:
        return RolloutBatch(**{f.name: (getattr(self, f.name).to(device)
                                        if isinstance(getattr(self, f.name), torch.Tensor)
                                        else getattr(self, f.name)) for f in fields(self)})

    def groups(self, start: int, stop: int) -> RolloutBatch:
        """Groups start..stop-1 as a batch (a micro-batch never splits a group)."""
        a, b = start * self.group_size, stop * self.group_size
        return RolloutBatch(**{f.name: (getattr(self, f.name)[a:b] if isinstance(getattr(self, f.name), torch.Tensor)
                                        else getattr(self, f.name)) for f in fields(self)})


def eos_ids(model, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    if gen_eos is not None:
        ids.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def encode_prompts(tokenizer, prompts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def completion_mask_of(completion_ids: torch.Tensor, eos: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask up to and including the first EOS, finished flag) for each row."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos, device=completion_ids.device))
    before = is_eos.long().cumsum(-1) - is_eos.long()  # number of EOS strictly before each position
    finished = is_eos.any(-1)
    return (before == 0).float(), finished


def decode_completions(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor,
                       finished: torch.Tensor) -> list[str]:
    """Text before the first EOS (special tokens kept: a sampled pad is not silently dropped)."""
    lengths = mask.sum(-1).long() - finished.long()
    rows = [ids[:n].tolist() for ids, n in zip(completion_ids.cpu(), lengths.cpu())]
    return tokenizer.batch_decode(rows, skip_special_tokens=False)


@torch.no_grad()
def sample_groups(model, tokenizer, task, problems: list[Problem], problem_index: list[int], group_size: int,
                  keys: np.ndarray, version: int, max_new_tokens: int, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0) -> RolloutBatch:
    """G completions for each problem from ``model`` (the behaviour policy of ``version``)."""
    device = next(model.parameters()).device
    n = len(problems) * group_size
    if keys.shape != (n,):
        raise ValueError(f"need one key per completion ({n}), got shape {keys.shape}")
    ids, attn = encode_prompts(tokenizer, [p.prompt for p in problems], device)  # each prompt once, then G rows
    ids, attn = ids.repeat_interleave(group_size, 0), attn.repeat_interleave(group_size, 0)
    sampler = SeededSampler(ids.shape[1], key_uniforms(keys, max_new_tokens), temperature, top_k, top_p)
    completion = decode(model, tokenizer, ids, attn, max_new_tokens, sampler.draw, group_size)
    mask, finished = completion_mask_of(completion, eos_ids(model, tokenizer))
    tokens = sampler.tokens
    if not torch.equal(tokens * mask.long(), completion * mask.long()):
        raise RuntimeError("generate did not emit the tokens SeededSampler drew (a logits processor was added?)")
    completion = torch.where(mask > 0, completion, torch.full_like(completion, tokenizer.pad_token_id))
    logp = torch.where(mask > 0, sampler.logps, torch.zeros_like(sampler.logps))
    texts = decode_completions(tokenizer, completion, mask, finished)
    rewards = [task.reward(problems[i // group_size], text, bool(f))
               for i, (text, f) in enumerate(zip(texts, finished))]
    return RolloutBatch(ids, attn, completion, mask, logp.float(),
                        torch.tensor(rewards, dtype=torch.float32, device=device),
                        torch.full((n,), version, dtype=torch.long, device=device),
                        torch.tensor(problem_index, device=device).repeat_interleave(group_size), finished, group_size)


def greedy(pos: int, scores: torch.Tensor) -> torch.Tensor:
    """The argmax token of each row (greedy decoding)."""
    return scores.argmax(-1)


@torch.no_grad()
def decode(model, tokenizer, ids, attn, max_new_tokens: int, pick=greedy, group_size: int = 1) -> torch.Tensor:
    """Completion ids (N, T <= max_new_tokens), pad after each row's first EOS, stopping when every
    row has ended: what ``generate(do_sample=False)`` with ``pick`` as its only logits processor
    returns after the prompt, by a plain KV-cache loop.

    ``pick(pos, logits) -> tokens`` chooses completion position ``pos`` from the (N, V) float32
    next-token logits (:func:`greedy`, or :meth:`SeededSampler.draw`). With ``group_size`` G > 1
    and rows in groups of G sharing one prompt, each prompt is run once and its cache repeated
    G times. The loop skips ``generate``'s per-token bookkeeping, which dominates at this model size,
    and calls the model through :func:`llm_runs.qwen3_forward.logits_fn` (its own numbers, bit for bit).
    """
    from transformers import DynamicCache

    N, P = ids.shape
    eos = torch.tensor(eos_ids(model, tokenizer), device=ids.device)
    was_training = model.training
    model.eval()
    try:
        cache = DynamicCache(config=model.config)
        pos = (attn.cumsum(-1) - 1).clamp_(min=0)
        G = group_size if group_size > 1 and N % group_size == 0 else 1
        if G > 1 and not torch.equal(ids.view(N // G, G, P), ids[::G, None].expand(-1, G, -1)):
            G = 1
        rows = slice(None, None, G)
        forward = logits_fn(model)
        logits = forward(ids[rows], attn[rows], pos[rows], cache, True, 1)[:, -1].float()
        if G > 1:
            logits = logits.repeat_interleave(G, 0)
            cache.batch_repeat_interleave(G)
        unfinished = torch.ones(N, dtype=torch.bool, device=ids.device)
        pad = torch.full((N,), tokenizer.pad_token_id, dtype=torch.long, device=ids.device)
        out, mask, last = [], attn, pos[:, -1:]
        for t in range(max_new_tokens):
            token = torch.where(unfinished, pick(t, logits), pad)
            out.append(token)
            unfinished &= ~torch.isin(token, eos)
            if t + 1 == max_new_tokens or not bool(unfinished.any()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            logits = forward(token[:, None], mask, last + (t + 1), cache, True)[:, -1].float()
        return torch.stack(out, 1)
    finally:
        model.train(was_training)


def warn_truncation(top_k: int, top_p: float) -> None:
    if top_k or top_p < 1.0:
        warnings.warn(
            f"top_k={top_k}, top_p={top_p}: the behaviour policy is truncated, so tokens outside its support are "
            "never sampled and the importance ratio pi_theta/mu is biased (TRL #6789); the recorded behaviour "
            "log-probs are those of the truncated distribution", stacklevel=2)


# --------------------------------------------------------------------------- scoring


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature: float = 1.0,
                        group_size: int = 1) -> torch.Tensor:
    """log pi_theta(o^t | q, o^<t) for every completion position, (N, T), by teacher forcing
    (positions as ``generate`` assigns them under left padding). Differentiable.

    With ``group_size`` G > 1 the rows come in groups of G sharing one prompt: the prompt is run
    once per group and its KV cache repeated G times (gradients flow back through it), the same
    numbers for about half the work of running every row's prompt.
    """
    T = completion_ids.shape[1]
    if group_size > 1:
        return _grouped_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature, group_size)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attn = torch.cat([prompt_mask, torch.ones_like(completion_ids)], 1)
    pos = (attn.cumsum(-1) - 1).clamp_(min=0)
    logits = logits_fn(model)(ids, attn, pos, logits_to_keep=T + 1)[:, :-1]
    return _token_logprobs(logits, completion_ids, temperature)


def _token_logprobs(logits, tokens, temperature: float) -> torch.Tensor:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, tokens[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)


def _grouped_logprobs(model, prompt_ids, prompt_mask, completion_ids, temperature, G):
    from transformers import DynamicCache

    N, P = prompt_ids.shape
    if N % G:
        raise ValueError(f"{N} rows do not split into groups of G = {G}")
    q_ids, q_mask = prompt_ids[::G], prompt_mask[::G]
    if not torch.equal(prompt_ids.view(N // G, G, P), q_ids[:, None].expand(-1, G, -1)):
        raise ValueError("rows of a group must share their prompt (rows g*G .. g*G+G-1 are prompt g)")
    q_pos = (q_mask.cumsum(-1) - 1).clamp_(min=0)
    cache = DynamicCache(config=model.config)
    forward = logits_fn(model)
    first = forward(q_ids, q_mask, q_pos, cache, True, 1).repeat_interleave(G, 0)  # predicts completion token 0
    T = completion_ids.shape[1]
    if T == 1:
        return _token_logprobs(first, completion_ids, temperature)
    cache.batch_repeat_interleave(G)
    attn = torch.cat([prompt_mask, torch.ones_like(completion_ids[:, :-1])], 1)
    pos = q_pos[:, -1:].repeat_interleave(G, 0) + torch.arange(1, T, device=q_pos.device)
    rest = forward(completion_ids[:, :-1], attn, pos, cache, True)
    return _token_logprobs(torch.cat([first, rest], 1), completion_ids, temperature)


# --------------------------------------------------------------------------- evaluation


def encode_answers(tokenizer, answers: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Answer tokens + EOS, right-padded: ``(ids (N, A) long, mask (N, A) float)``, mask 1 on real tokens."""
    toks = [t + [tokenizer.eos_token_id] for t in tokenizer(list(answers), add_special_tokens=False)["input_ids"]]
    width = max(map(len, toks))
    ids = torch.tensor([t + [tokenizer.pad_token_id] * (width - len(t)) for t in toks], device=device)
    mask = torch.tensor([[1.0] * len(t) + [0.0] * (width - len(t)) for t in toks], device=device)
    return ids, mask


@torch.no_grad()
def evaluate(model, tokenizer, task, problems: list[Problem], max_new_tokens: int, batch_size: int = 256) -> dict:
    """Greedy accuracy and ``pc``: the mean exact probability of sampling the correct answer
    (answer tokens then EOS) at temperature 1, by teacher forcing (no sampling noise)."""
    if not problems:
        return {"acc": float("nan"), "pc": float("nan")}
    device = next(model.parameters()).device
    eos = eos_ids(model, tokenizer)
    correct, pcs = [], []
    was_training = model.training
    model.eval()
    try:
        for a in range(0, len(problems), batch_size):
            chunk = problems[a:a + batch_size]
            ids, attn = encode_prompts(tokenizer, [p.prompt for p in chunk], device)
            out = decode(model, tokenizer, ids, attn, max_new_tokens)
            mask, finished = completion_mask_of(out, eos)
            texts = decode_completions(tokenizer, out, mask, finished)
            correct += [task.reward(p, t, bool(f)) for p, t, f in zip(chunk, texts, finished)]
            ans, amask = encode_answers(tokenizer, [p.answer for p in chunk], device)
            logp = completion_logprobs(model, ids, attn, ans)
            pcs += torch.exp((logp * amask).sum(-1)).tolist()
    finally:
        model.train(was_training)
    return {"acc": float(np.mean(correct)), "pc": float(np.mean(pcs))}
