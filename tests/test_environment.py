"""The main environment (.venv): the toolkit, TRL and Ray, no verl, and pip finds no broken requirement."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys


def test_pip_check_is_clean():
    res = subprocess.run([sys.executable, "-m", "pip", "check"], check=False, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_trl_and_ray_without_verl():
    assert importlib.util.find_spec("verl") is None, "verl belongs in .venv-verl (make setup-verl)"
    assert importlib.metadata.version("trl").startswith("1.16.")
    assert importlib.metadata.version("torch").split("+")[0] == "2.13.0"
    assert importlib.util.find_spec("ray") is not None
