"""A lean forward pass of transformers' ``Qwen3ForCausalLM``: the same tensor operations, in the
same order and with the same arguments, as ``model(input_ids=..., attention_mask=...,
position_ids=..., cache=..., logits_to_keep=...)`` (transformers 5.x ``modeling_qwen3``), minus the
Python around them (module ``__call__`` and hooks, the output-capturing and deprecation wrappers,
config look-ups). The numbers are bit for bit the model's own, forward and backward: every
operation, the causal mask (transformers' own ``create_causal_mask``), the attention kernel
(transformers' own attention interface) and the KV cache (its own ``DynamicCache``) are the
model's; ``tests/test_llm_numerics.py`` compares logits, caches and gradients with ``torch.equal``.

At the study's model size (247k parameters, 128 rows) the kernels dominate: this saves a few per
cent of a decode step, more for smaller batches.

:func:`logits_fn` falls back to the model's own call wherever the lean path does not apply: a
transformers release it was not checked against (:data:`CHECKED_TRANSFORMERS`), another
architecture, sliding-window or non-default RoPE layers, gradient checkpointing, hooks, an
installed ``kernels`` package that could swap a layer's forward.
"""
from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F

CHECKED_TRANSFORMERS = ("5.24.",)
"""transformers releases (version prefixes) whose ``modeling_qwen3`` this module mirrors."""


@functools.cache
def _checked_release() -> bool:
    """A checked transformers release, and no ``kernels`` package (it can replace a layer's forward)."""
    import transformers

    return transformers.__version__.startswith(CHECKED_TRANSFORMERS) and importlib.util.find_spec("kernels") is None


@functools.cache
def _qwen3_classes():
    from transformers.models.qwen3 import modeling_qwen3 as m

    return m


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or getattr(module, "_backward_pre_hooks", None))


def _global_hooks() -> bool:
    from torch.nn.modules import module as mm

    return bool(mm._global_forward_hooks or mm._global_forward_pre_hooks or mm._global_backward_hooks
                or getattr(mm, "_global_backward_pre_hooks", None))


def supports(model) -> bool:
    """Whether :func:`forward` runs the lean path for ``model`` (else it calls the model)."""
    if not _checked_release():
        return False
    m = _qwen3_classes()
    if type(model) is not m.Qwen3ForCausalLM:
        return False
    cfg, inner = model.config, model.model
    if inner.gradient_checkpointing or inner.has_sliding_layers or _global_hooks():
        return False
    if any(t != "full_attention" for t in cfg.layer_types[:cfg.num_hidden_layers]):
        return False
    rot = inner.rotary_emb
    if type(rot) is not m.Qwen3RotaryEmbedding or rot.rope_type != "default":
        return False
    if cfg.hidden_act != "silu" or len(inner.layers) < cfg.num_hidden_layers:
        return False
    for mod in (model, inner, inner.embed_tokens, inner.norm, model.lm_head, rot):
        if _has_hooks(mod):
            return False
    for layer in inner.layers[:cfg.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        if type(layer) is not m.Qwen3DecoderLayer or type(attn) is not m.Qwen3Attention or type(mlp) is not m.Qwen3MLP:
            return False
        if any(_has_hooks(x) for x in (layer, attn, mlp, attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj,
                                        attn.q_norm, attn.k_norm, mlp.gate_proj, mlp.up_proj, mlp.down_proj,
                                        mlp.act_fn, layer.input_layernorm, layer.post_attention_layernorm)):
            return False
        if attn.sliding_window is not None or type(mlp.act_fn).forward is not _silu_forward():
            return False
    return True


@functools.cache
def _silu_forward():
    from transformers.activations import SiLUActivation

    return SiLUActivation.forward


def _rms_norm(norm, hidden_states):
    """``Qwen3RMSNorm.forward``."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * hidden_states.to(input_dtype)


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def logits_fn(model):
    """``fn(input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, logits_to_keep=0)``
    returning the logits ``model(...)`` returns for those arguments, bit for bit: the lean path when
    :func:`supports` says so (in the model's current train / eval mode), else the model's own call."""
    if not supports(model):
        key = cache_keyword(type(model))

        def call(input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, logits_to_keep=0):
            return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=use_cache, logits_to_keep=logits_to_keep, **{key: cache}).logits
        return call
    return functools.partial(_lean_forward, model, model.training)


@functools.cache
def cache_keyword(cls) -> str:
    """The name under which ``cls.forward`` takes its KV cache: ``cache`` (transformers 5.24) or ``past_key_values``
    (earlier 5.x releases, verl's environment among them). Passed under the other name, a cache would land in the
    forward's ``**kwargs`` and be ignored without a word: every call would run as if nothing came before."""
    import inspect

    params = inspect.signature(cls.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise TypeError(f"{cls.__name__}.forward takes its KV cache neither as cache nor as past_key_values "
                    f"(its parameters: {', '.join(params)}): no route to pass one")


def forward(model, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None,
            logits_to_keep: int = 0) -> torch.Tensor:
    """One call of :func:`logits_fn`."""
    return logits_fn(model)(input_ids, attention_mask, position_ids, cache, use_cache, logits_to_keep)


def _lean_forward(model, training: bool, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                  logits_to_keep=0):
    from transformers.masking_utils import create_causal_mask
    from transformers.modeling_utils import (
        ALL_ATTENTION_FUNCTIONS,
        slice_logits_to_keep,
    )

    m = _qwen3_classes()
    cfg, inner = model.config, model.model
    if use_cache is None:
        use_cache = cfg.use_cache
    emb = inner.embed_tokens
    inputs_embeds = F.embedding(input_ids, emb.weight, emb.padding_idx, emb.max_norm, emb.norm_type,
                                emb.scale_grad_by_freq, emb.sparse)
    if use_cache and cache is None:
        from transformers import DynamicCache

        cache = DynamicCache(config=cfg)
    if position_ids is None:
        past_seen_tokens = cache.get_seq_length() if cache is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        position_ids = position_ids.unsqueeze(0)
    mask = create_causal_mask(config=cfg, inputs_embeds=inputs_embeds, attention_mask=attention_mask, cache=cache,
                              position_ids=position_ids)
    hidden_states = inputs_embeds
    # Qwen3RotaryEmbedding.forward (default RoPE)
    rot = inner.rotary_emb
    freqs = position_ids[..., None].float() * rot.inv_freq.to(device=hidden_states.device, dtype=torch.float)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * rot.attention_scaling).to(dtype=hidden_states.dtype)
    sin = (emb.sin() * rot.attention_scaling).to(dtype=hidden_states.dtype)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # apply_rotary_pos_emb(unsqueeze_dim=1)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation, m.eager_attention_forward)
    kwargs = {"position_ids": position_ids, "use_cache": use_cache}
    for layer in inner.layers[:cfg.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        residual = hidden_states
        hidden_states = _rms_norm(layer.input_layernorm, hidden_states)
        # Qwen3Attention.forward
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, attn.head_dim)
        q = _rms_norm(attn.q_norm, F.linear(hidden_states, attn.q_proj.weight, attn.q_proj.bias).view(hidden_shape))
        q = q.transpose(1, 2)
        k = _rms_norm(attn.k_norm, F.linear(hidden_states, attn.k_proj.weight, attn.k_proj.bias).view(hidden_shape))
        k = k.transpose(1, 2)
        v = F.linear(hidden_states, attn.v_proj.weight, attn.v_proj.bias).view(hidden_shape).transpose(1, 2)
        q_embed = (q * cos) + (_rotate_half(q) * sin)
        k_embed = (k * cos) + (_rotate_half(k) * sin)
        if cache is not None:
            k_embed, v = cache.update(k_embed, v, attn.layer_idx, kwargs=kwargs)
        out, _ = attention(attn, q_embed, k_embed, v, mask, dropout=0.0 if not training else attn.attention_dropout,
                           scaling=attn.scaling, sliding_window=attn.sliding_window, **kwargs)
        out = out.reshape(*input_shape, -1).contiguous()
        hidden_states = residual + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
        # Qwen3MLP.forward
        residual = hidden_states
        hidden_states = _rms_norm(layer.post_attention_layernorm, hidden_states)
        gate = F.silu(F.linear(hidden_states, mlp.gate_proj.weight, mlp.gate_proj.bias))
        up = F.linear(hidden_states, mlp.up_proj.weight, mlp.up_proj.bias)
        hidden_states = residual + F.linear(gate * up, mlp.down_proj.weight, mlp.down_proj.bias)
    hidden_states = _rms_norm(inner.norm, hidden_states)
    hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)
    return F.linear(hidden_states, model.lm_head.weight, model.lm_head.bias)
