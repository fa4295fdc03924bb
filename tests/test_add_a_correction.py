"""docs/ADD-A-CORRECTION.md's example file, dropped as is into estimators/ of a copy of the repository,
is a whole correction: registered, its knob a trainer flag, its loss computed, with no other edit."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ADD-A-CORRECTION.md"

CHECK = """
import numpy as np, torch
import estimators
from estimators.losses import loss_names, policy_loss
from estimators.params import PARAMS
assert "gmc_max" in loss_names() and [p.name for p in PARAMS["gmc_max"]] == ["kappa"]
w = estimators.weights("gmc_max", np.log([[3.0, 1.0, 1.0, 1.0]]), 0.2, kappa=1.0)
assert np.allclose(w, [[1.2, 0.4, 0.4, 0.4]], rtol=0, atol=1e-12), w
g = torch.Generator().manual_seed(0)
lp = torch.zeros(8, 3, dtype=torch.float64, requires_grad=True)
old = 0.3 * torch.randn(8, 3, generator=g, dtype=torch.float64)
out = policy_loss("gmc_max", lp, old, torch.ones(8, 3), torch.randn(8, generator=g, dtype=torch.float64), 4, 0.2,
                  kappa=0.5)
out.loss.backward()
assert torch.isfinite(out.loss) and lp.grad.abs().sum() > 0 and out.weights.max() <= 0.5 * 1.2 + 1e-12
from llm_runs.config import TrainConfig
assert TrainConfig().gmc_max_kappa == 1.0
print("ok")
"""


def example_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 1, f"{DOC} must hold exactly one python block, found {len(blocks)}"
    return blocks[0]


def test_the_example_is_not_committed_as_a_module():
    """Not committed (a user may drop it into their own estimators/: the suite then tests it as a correction)."""
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--", "estimators/gmc_max.py"], check=True,
                             capture_output=True, text=True).stdout
    assert tracked == ""
    first_block_at = DOC.read_text().index("```")
    assert DOC.read_text().index("```python") == first_block_at  # the page opens with the example file


def test_the_example_file_alone_adds_a_correction_with_its_flag(tmp_path):
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True,
                           text=True).stdout.split("\0")
    copy = tmp_path / "repo"
    for name in filter(None, files):
        src = ROOT / name
        if name.startswith("results/") or not src.is_file():  # run results: read by no estimator
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, copy / name)
    plain = subprocess.run([sys.executable, "-m", "llm_runs.train", "--help"], cwd=copy, capture_output=True,
                           text=True, timeout=300, check=False)
    assert plain.returncode == 0 and "--gmc-max-kappa" not in plain.stdout  # the committed files have no such flag
    (copy / "estimators" / "gmc_max.py").write_text(example_block())
    helped = subprocess.run([sys.executable, "-m", "llm_runs.train", "--help"], cwd=copy, capture_output=True,
                            text=True, timeout=300, check=False)
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "--gmc-max-kappa" in helped.stdout and "[kappa_max]" in helped.stdout
    checked = subprocess.run([sys.executable, "-c", CHECK], cwd=copy, capture_output=True, text=True, timeout=300,
                             check=False)
    assert checked.returncode == 0 and checked.stdout.strip() == "ok", checked.stderr[-2000:]
