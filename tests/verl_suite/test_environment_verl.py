"""The verl environment (.venv-verl): verl 0.9.1 with all its dependencies, uvicorn and fastapi,
no TRL, and pip finds no broken requirement."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys


def test_pip_check_is_clean():
    res = subprocess.run([sys.executable, "-m", "pip", "check"], check=False, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_verl_with_its_engine_workers_and_without_trl():
    assert importlib.metadata.version("verl") == "0.9.1"
    assert importlib.metadata.version("torch").split("+")[0] == "2.13.0"
    # TRL 1.16 breaks verl's model build (verl/models/transformers/monkey_patch.py imports a class it dropped)
    assert importlib.util.find_spec("trl") is None, "TRL belongs in .venv"
    import verl.workers.engine_workers  # noqa: F401  (imports uvicorn and fastapi, which verl does not declare)
