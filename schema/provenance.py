"""Provenance of a result: the git commit it was made at and the package versions, captured once."""
from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("numpy", "scipy", "sympy", "pandas", "torch", "transformers", "tokenizers", "safetensors", "trl",
            "gmc-grpo-toolkit")


def git_commit(root: Path = ROOT) -> dict:
    """``{"git_commit": sha or None, "git_dirty": bool or None}`` of the repository at ``root``."""
    def git(*args):
        try:
            return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], check=False,
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD")
    return {"git_commit": commit or None, "git_dirty": bool(git("status", "--porcelain")) if commit else None}


def package_versions(packages=PACKAGES) -> dict:
    """Python, platform and the installed version of each package (None if not installed)."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(packages=PACKAGES) -> dict:
    """Commit, versions and command line: the block every results file records."""
    return {**git_commit(), "versions": package_versions(packages), "command": command()}


def command(argv: list[str] | None = None, root: Path = ROOT) -> list[str]:
    """The command line, each argument that is an absolute path inside the repository made relative to it
    (a results file names no machine's folders)."""
    out = []
    for a in (sys.argv if argv is None else argv):
        p = Path(a)
        out.append(str(p.relative_to(root)) if p.is_absolute() and p.is_relative_to(root) else a)
    return out
