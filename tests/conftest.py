import importlib.util
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import logging

import pytest
from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)  # reproducible runs
settings.load_profile("ci")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass


# Two environments (see the Makefile): the main suite runs in .venv (TRL, no verl), the verl
# suite (tests/verl_suite/) in .venv-verl (verl, no TRL). Each environment collects only its own.
HERE = Path(__file__).resolve().parent
VERL_SUITE = HERE / "verl_suite"  # not "verl": on sys.path a folder named verl would shadow the package
HAS_VERL = importlib.util.find_spec("verl") is not None


@pytest.fixture(autouse=True)
def _toolkit_loggers_as_they_were():
    """A command run in-process (its ``main``) installs its stderr handler on the toolkit's loggers and stops their
    propagation; put them back after each test, so that a later test in the same worker sees them unconfigured."""
    from schema.log import PACKAGES

    saved = {n: (lg.handlers[:], lg.level, lg.propagate) for n in PACKAGES for lg in [logging.getLogger(n)]}
    yield
    for n, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(n)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


def pytest_ignore_collect(collection_path, config):
    path = Path(collection_path).resolve()
    if path == HERE:
        return None
    in_verl_suite = path == VERL_SUITE or VERL_SUITE in path.parents
    return True if in_verl_suite != HAS_VERL else None


def pytest_report_header(config):
    if HAS_VERL:
        return "verl is installed: collecting the verl suite (tests/verl_suite/) only; the main suite runs in .venv"
    return "verl is not installed: the verl suite (tests/verl_suite/) is not collected; it runs in .venv-verl"


# --------------------------------------------------------------------------- helpers several test modules use
# (import them with ``from conftest import ...``)


TINY_MODEL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}


def tiny(cache_dir, **kw):
    """A TrainConfig of a tiny model and task (fast on the CPU), warm start cached in ``cache_dir``."""
    from llm_runs.config import resolve_config

    base = {"model_kwargs": TINY_MODEL, "warm_start_steps": 40, "warm_start_lr": 3e-3, "warm_start_batch": 64,
            "heldout_size": 20, "eval_train_size": 20, "prompts_per_step": 8, "group_size": 4, "steps": 5,
            "eval_every": 0, "checkpoint_every": 0, "cache_dir": str(cache_dir)}
    return resolve_config({**base, **kw})


def pd_read(run):
    import pandas as pd

    return pd.read_csv(Path(run) / "metrics.csv")


def _metrics_without_perf(out) -> list[list[str]]:
    lines = (out / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, c in enumerate(header) if not c.startswith("perf/")]
    return [[row.split(",")[i] for i in keep] for row in lines]


def _softmax_policy_batch(seed, prompts_per_step, G, T, V, scale):
    """Tabular per-position softmax policy: theta (T, V). Returns sampled tokens and two thetas."""
    import torch

    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(T, V, generator=g, dtype=torch.float64)
    theta_b = theta - scale * torch.randn(T, V, generator=g, dtype=torch.float64)
    probs_b = torch.softmax(theta_b, -1)
    tokens = torch.multinomial(probs_b, prompts_per_step * G, replacement=True, generator=g).T  # (B, T)
    lengths = torch.randint(1, T + 1, (prompts_per_step * G,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(torch.float64)
    rewards = torch.randint(0, 2, (prompts_per_step, G), generator=g).to(torch.float64)
    return theta, theta_b, tokens, mask, rewards
