import importlib.util
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
