"""No committed file is larger than schema.io.MAX_FILE_BYTES (5 MB): a large table is written as
row-range parts (schema.io.write_parquet_parts), a finished LLM grid as packed tables. No Python line is longer
than ruff's line length, and no module outside the tests longer than MAX_MODULE_LINES."""
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from schema.io import MAX_FILE_BYTES, parquet_parts, read_parquet_parts, write_parquet_parts

ROOT = Path(__file__).resolve().parent.parent


def test_no_tracked_file_over_the_limit():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    big = {}
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and not path.is_symlink() and path.stat().st_size > MAX_FILE_BYTES:
            big[name] = path.stat().st_size
    assert not big, f"tracked files over {MAX_FILE_BYTES} bytes: {big}"


def test_a_large_table_is_written_as_parts_and_read_back_as_one(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.standard_normal(20000), "k": np.arange(20000), "s": ["a", "b"] * 10000})
    df.loc[3, "x"] = np.nan
    df.loc[4, "x"] = np.inf
    path = tmp_path / "steps.parquet"
    files = write_parquet_parts(path, df, max_bytes=60_000)
    assert len(files) > 1 and not path.exists()
    assert all(f.stat().st_size <= 60_000 for f in files)
    assert parquet_parts(path) == files
    pd.testing.assert_frame_equal(read_parquet_parts(path), df, check_exact=True)
    small = df.iloc[:10].reset_index(drop=True)
    assert write_parquet_parts(path, small) == [path]  # fits: one file again, the old parts removed
    assert parquet_parts(path) == [path] and not list(tmp_path.glob("steps.part*"))
    pd.testing.assert_frame_equal(read_parquet_parts(path), small, check_exact=True)


def test_no_python_line_is_longer_than_ruffs_line_length():
    """pyproject's [tool.ruff] line-length, with E501 selected; checked here too, since CI runs no ruff."""
    import tomllib

    limit = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
    packages = ("estimators", "bounds", "stats", "schema", "simulators", "llm_runs", "grids", "claims", "figures",
                "report_card", "studies", "execution", "tests")
    long = [f"{path.relative_to(ROOT)}:{i}" for pkg in packages for path in sorted((ROOT / pkg).rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > limit]
    assert not long, f"lines over {limit} characters: {long[:20]}"


PACKAGES = ("estimators", "bounds", "stats", "schema", "simulators", "llm_runs", "grids", "claims", "figures",
            "report_card", "studies", "execution")
MAX_MODULE_LINES = 400


def long_modules(root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """Every Python module of the toolkit's packages (tests excepted) longer than ``limit`` lines: path -> lines."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > limit:
                out[path.relative_to(root).as_posix()] = n
    return out


def test_no_module_is_longer_than_the_limit():
    """A module over MAX_MODULE_LINES is split along its seams (named modules, its callers updated)."""
    over = long_modules()
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_the_module_length_check_counts_lines(tmp_path):
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "short.py").write_text("x = 1\n" * 400)
    (tmp_path / "studies" / "long.py").write_text("x = 1\n" * 401)
    assert long_modules(tmp_path) == {"studies/long.py": 401}
