"""Model presets: how the initial policy pi_theta_0 and its tokenizer come to exist.

Every model the trainer uses is loaded through :func:`load_pretrained` (``from_pretrained``
with ``local_files_only=True``): a preset either builds a fresh model and saves it (the
warm start does), or points at a local checkpoint. A missing path is a ``ValueError`` before
any work and never a hub download.

* ``tiny-cpu``: ``Qwen3ForCausalLM`` built from a ``Qwen3Config`` (hidden 128, 4 layers,
  4 heads of 32, 2 KV heads, intermediate 512, tied embeddings: 986k parameters with the
  16-token arithmetic vocabulary) and an in-process character tokenizer of the task's
  alphabet. ``model_kwargs`` overrides any ``Qwen3Config`` field.

* ``qwen3-0.6b``: a local Qwen3 checkpoint (``--model-path``, e.g. a copy of
  ``Qwen/Qwen3-0.6B``) loaded with ``from_pretrained(local_files_only=True)`` on a GPU in bf16
  mixed precision (float32 master weights and Adam state, forward passes under bf16 autocast); no
  build and no warm start (``build=None``, :func:`initial_policy` loads ``model_path``),
  GSM8K by default. A missing folder, a folder without ``config.json``, a checkpoint that is
  not a Qwen3 causal LM or a CUDA device on a machine without one is a ``ValueError`` before
  any work.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .registry import Registry

PAD, EOS = "<pad>", "<eos>"

TINY_CPU_SHAPE = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True, "max_position_embeddings": 128}


@dataclass(frozen=True)
class Preset:
    """A registered model preset.

    ``build(config, task) -> (model, tokenizer)`` creates the initial policy in process (None:
    the policy is loaded from ``config.model_path``). ``defaults`` are config values the
    preset recommends (applied by :func:`llm_runs.config.resolve_config` below explicit ones).
    """

    name: str
    build: Callable | None
    needs_model_path: bool = False
    defaults: dict = field(default_factory=dict)
    doc: str = ""
    model_kwargs_keys: Callable | None = None  # () -> the architecture keys model_kwargs may set
    probe_model_kwargs: Callable | None = None  # (model_kwargs) -> None, ValueError if the model rejects them

    def check(self, config) -> None:
        """Refuse a configuration this preset cannot run (no file is read or written)."""
        if self.needs_model_path and not config.model_path:
            raise ValueError(f"preset {self.name!r} needs --model-path (a local folder with weights and tokenizer)")
        if config.model_path:
            check_local_path(config.model_path)
        if config.model_kwargs and (self.build is None or config.model_path):
            raise ValueError(f"preset {self.name!r} loads a checkpoint: model_kwargs {config.model_kwargs} "
                             f"cannot apply")
        if config.model_kwargs and self.model_kwargs_keys is not None:
            unknown = sorted(set(config.model_kwargs) - set(self.model_kwargs_keys()))
            if unknown:
                raise ValueError(f"unknown model_kwargs {unknown} for preset {self.name!r}")
        if config.model_kwargs and self.probe_model_kwargs is not None:
            self.probe_model_kwargs(config.model_kwargs)


def check_device(device: str) -> None:
    """Refuse a device torch cannot see (before any folder is made), in one line."""
    kind = str(device).split(":")[0]
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available,
                 "mps": lambda: getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
                 "xpu": lambda: hasattr(torch, "xpu") and torch.xpu.is_available()}
    if kind in available and not available[kind]():
        raise ValueError(f"device {device!r}: torch sees no {kind.upper()} device on this machine; pass --device cpu")
    if kind == "cuda" and ":" in str(device):
        index = str(device).split(":", 1)[1]
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")


PRESETS = Registry("preset")


def register_preset(preset: Preset) -> Preset:
    return PRESETS.register(preset.name, preset)


get_preset = PRESETS.lookup


# --------------------------------------------------------------------------- loading

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def check_local_path(path: str | os.PathLike) -> Path:
    """A local folder holding a checkpoint; anything else (a hub id, a typo) is refused."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ValueError(
            f"model path {str(path)!r} does not exist or is not a folder (models are only loaded from local folders, "
            f"never downloaded)")
    if not (p / "config.json").is_file():
        raise ValueError(f"model path {str(path)!r} has no config.json: not a saved checkpoint")
    return p


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-file "Loading weights" bars would drown the training bar


def load_pretrained(path: str | os.PathLike, dtype: str = "float32", device: str = "cpu"):
    """``(model, tokenizer)`` from a local folder, the way a real checkpoint is loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    p = check_local_path(path)
    tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch_dtype(dtype)).to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def save_pretrained(model, tokenizer, path: str | os.PathLike) -> None:
    _quiet_transformers()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def initial_policy(config, task):
    """The policy before any training (warm start included): built, or loaded from model_path."""
    preset = get_preset(config.preset)
    if config.model_path:
        return load_pretrained(config.model_path, config.dtype, config.device)
    if preset.build is None:
        raise ValueError(f"preset {preset.name!r} needs --model-path")
    return preset.build(config, task)


# --------------------------------------------------------------------------- tiny-cpu


def char_tokenizer(alphabet: str):
    """A character-level ``PreTrainedTokenizerFast`` (ids: pad 0, eos 1, then ``alphabet``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet must be non-empty with distinct characters, got {alphabet!r}")
    vocab = {PAD: 0, EOS: 1}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, padding_side="left")


def _tiny_cpu_model_config(model_kwargs: dict, vocab_size: int, pad_id: int, eos_id: int):
    from transformers import Qwen3Config

    shape = {**TINY_CPU_SHAPE, **model_kwargs}
    if "num_attention_heads" in model_kwargs and "head_dim" not in model_kwargs:
        shape["head_dim"] = shape["hidden_size"] // max(1, int(shape["num_attention_heads"]))
    try:
        return Qwen3Config(vocab_size=vocab_size, pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=None, **shape)
    except Exception as exc:  # noqa: BLE001 (transformers raises TypeError, ValueError or its own validation errors)
        raise ValueError(f"model_kwargs {model_kwargs} rejected by Qwen3Config: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _probe_tiny_cpu(model_kwargs: dict) -> None:
    """Build the model on the meta device and run one forward pass (no memory, milliseconds): a shape
    the architecture rejects (heads not dividing, an odd head_dim, a negative size) is a ValueError
    now, not a traceback after the run folder is made."""
    _probe_tiny_cpu_cached(json.dumps(model_kwargs, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _probe_tiny_cpu_cached(kwargs_json: str) -> None:
    from transformers import Qwen3ForCausalLM

    model_kwargs = json.loads(kwargs_json)
    model_config = _tiny_cpu_model_config(model_kwargs, 16, 0, 1)
    try:
        with torch.device("meta"):
            Qwen3ForCausalLM(model_config)(input_ids=torch.zeros(1, 3, dtype=torch.long))
    except Exception as exc:  # noqa: BLE001 (any failure of the model code is the kwargs' fault here)
        raise ValueError(f"model_kwargs {model_kwargs} rejected by the Qwen3 model: {_one_line(exc)}") from None


def _build_tiny_cpu(config, task):
    from transformers import Qwen3ForCausalLM

    if task.alphabet is None:
        raise ValueError(f"preset 'tiny-cpu' needs a task with a character alphabet; task {task.name!r} has none")
    tokenizer = char_tokenizer(task.alphabet)
    model_config = _tiny_cpu_model_config(config.model_kwargs, len(tokenizer), tokenizer.pad_token_id,
                                          tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.warm_start_seed)
        model = Qwen3ForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.to(device=config.device, dtype=torch_dtype(config.dtype)), tokenizer


def _qwen3_config_keys() -> set[str]:
    import inspect

    from transformers import Qwen3Config

    return set(inspect.signature(Qwen3Config.__init__).parameters) - {"self", "vocab_size", "pad_token_id",
                                                                     "eos_token_id", "bos_token_id"}


register_preset(Preset(
    "tiny-cpu", _build_tiny_cpu,
    doc="Qwen3 architecture, ~1M parameters, character tokenizer of the task alphabet; CPU, float32",
    model_kwargs_keys=_qwen3_config_keys, probe_model_kwargs=_probe_tiny_cpu,
))


# --------------------------------------------------------------------------- qwen3-0.6b

QWEN3_CHAT_PROMPT = ("<|im_start|>user\n{question}\nPlease reason step by step, and put your final answer within "
                     "\\boxed{}.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
"""Qwen3's chat template for one user turn in non-thinking mode (an empty think block)."""


@dataclass(frozen=True)
class CheckpointPreset(Preset):
    """A preset whose policy is a local checkpoint of one architecture (``model_type``)."""

    model_type: str = ""

    def check(self, config) -> None:
        import json

        super().check(config)
        found = json.loads((check_local_path(config.model_path) / "config.json").read_text()).get("model_type")
        if self.model_type and found != self.model_type:
            raise ValueError(f"preset {self.name!r} loads a {self.model_type!r} checkpoint; {config.model_path} holds "
                             f"model_type {found!r}")
        if config.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"preset {self.name!r} runs on a GPU (device {config.device!r}) and torch sees no CUDA "
                             f"device; pass --device cpu to run it on the CPU (slowly)")


register_preset(CheckpointPreset(
    "qwen3-0.6b", None, needs_model_path=True, model_type="qwen3",
    defaults={"dtype": "float32", "amp": "bfloat16", "device": "cuda", "task": "gsm8k",
              "gsm8k_prompt": QWEN3_CHAT_PROMPT, "warm_start_steps": 0, "lr": 1e-6, "group_size": 8,
              "prompts_per_step": 16, "eval_batch_size": 64},
    doc="Qwen3-0.6B (596M parameters) from a local folder: from_pretrained(local_files_only), bf16 mixed precision, "
        "one GPU",
))
