"""The README as a front door: its Python snippets run as written, its findings block is the one
``python -m studies.report.findings`` renders from the committed verdict files, and every command it names
exists (a ``make`` target of the Makefile, a ``python -m`` module of the toolkit)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from studies.report import findings
from studies.report.verdict_files import load

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted(p for p in (REPO / "docs").glob("*.md")
              if not p.name.startswith("PREREGISTRATION") and p.name != "THEORY.md")  # those two are frozen
MODULE_DOCS = {"ADD-A-CORRECTION.md"}
"""Docs whose Python block is a module to save into the package, not a snippet to run beside it (run as a snippet in a
toolkit that already holds the module, it would register its correction twice): tests/test_add_a_correction.py drops
it into a copy of the repository and runs it there."""

# Names a snippet takes from its reader's own program, given here as the smallest working stand-ins.
TRL_SETUP = """
import sys
sys.path.insert(0, {tests!r})
from datasets import Dataset
from test_integrations_trl import char_tokenizer, make_args, reward as reward_fn, tiny_qwen3

tokenizer = char_tokenizer()
model = tiny_qwen3(len(tokenizer))
grpo_config = make_args({out!r}, max_steps=1)
dataset = Dataset.from_dict({{"prompt": ["ab", "cd", "ef", "gh"]}})
"""
SETUPS = {"TrajectoryGRPOTrainer": TRL_SETUP}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.DOTALL)


def _run_block(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    setup = "".join(s.format(tests=str(REPO / "tests"), out=str(tmp_path / "out"))
                    for key, s in SETUPS.items() if key in code)
    script = tmp_path / "snippet.py"
    script.write_text(textwrap.dedent(setup) + "\n" + code)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "GMC_RESULTS": str(tmp_path / "results")}
    # written outside the repository and run in a fresh interpreter, as a reader would run it
    return subprocess.run([sys.executable, str(script)], check=False, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


README_BLOCKS = python_blocks(README)
DOC_BLOCKS = [(p.name, b) for p in DOCS if p.name not in MODULE_DOCS for b in python_blocks(p)]


def test_the_readme_has_the_three_quickstarts():
    text = "\n".join(README_BLOCKS)
    for piece in ("estimators.weights(", "policy_loss(", "TrajectoryGRPOTrainer("):
        assert piece in text, piece
    assert re.search(r"```bash\npython3 -m verl\.trainer\.main_ppo", README.read_text())  # tests/verl_suite reads it


@pytest.mark.parametrize("code", README_BLOCKS, ids=[f"README-{i}" for i in range(len(README_BLOCKS))])
def test_every_readme_python_block_runs(code, tmp_path):
    proc = _run_block(code, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_each_module_doc_s_block_is_the_one_its_own_test_drops_into_the_package():
    from test_add_a_correction import DOC, example_block

    assert {p.name for p in DOCS} >= MODULE_DOCS == {DOC.name}
    assert python_blocks(DOC) == [example_block()]


@pytest.mark.parametrize("name,code", DOC_BLOCKS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(DOC_BLOCKS)])
def test_every_docs_python_block_runs(name, code, tmp_path):
    proc = _run_block(code, tmp_path)
    assert proc.returncode == 0, (name, proc.stdout[-2000:] + proc.stderr[-4000:])


def test_the_findings_blocks_are_the_rendered_ones():
    """No number of "What it found" or of the narrative's findings is typed by hand: rerun
    ``python -m studies.report.findings --write`` after a verdict file changes."""
    text = README.read_text()
    assert findings.page_block(text, findings.SUMMARY_START, findings.SUMMARY_END) == findings.render_summary()
    assert findings.page_block(findings.NARRATIVE.read_text()) == findings.render()
    assert findings.START not in text  # the full block lives in the narrative only


def test_the_readme_s_findings_are_one_short_line_per_study():
    """The README's "What it found", heading to the next heading, stays within the limit: six generated lines,
    each a study's headline verdict with a link to the study; the numbers behind them are the narrative's."""
    section = findings.readme_section(README.read_text())
    assert section.startswith("## What it found\n") and "\n## " not in section
    assert len(section) <= findings.SECTION_LIMIT == 1750, len(section)
    lines = findings.page_block(section, findings.SUMMARY_START, findings.SUMMARY_END).splitlines()[1:-1]
    assert len(lines) == 6 and all(line.startswith("* **") for line in lines)
    assert all(re.search(r"\]\((studies/\w+/README\.md|results/verify/claims\.md)\)", line) for line in lines)
    assert "docs/RESULTS-NARRATIVE.md" in section


def test_the_section_limit_reads_to_the_next_heading():
    text = "# t\n\n## What it found\n\nabc\n### sub\n\n## Layout\n\nx\n"
    assert findings.readme_section(text) == "## What it found\n\nabc\n### sub\n\n"
    assert findings.readme_section("## What it found\nend") == "## What it found\nend"


def test_the_findings_say_what_the_files_say():
    block = findings.render()
    assert block.count("\n* ") == 6  # theory, staleness, optimiser, mechanism, drift map and replicate, group size
    drift = load()["drift"]
    if all(drift[k]["verdict"] == "INCONCLUSIVE" for k in drift if re.fullmatch(r"D\d+", k)):
        assert "In progress, no verdict yet" in block and "INCONCLUSIVE" in block
    from claims.registry import CLAIMS

    assert f"checks the {len(CLAIMS)} claims" in block or "covers" in block  # every registered claim, or says not


def test_the_formula_is_quoted_from_the_definition():
    from estimators.schemes import gmc_log_weights

    quoted = re.search(r"^## The two commands", README.read_text(), re.MULTILINE)
    # a quoted line, not a code block: the README's first code block is the two commands
    block = re.findall(r"^> `(.*?)`$", README.read_text()[:quoted.start()], re.MULTILINE)
    assert len(block) == 1 and block[0] in " ".join(gmc_log_weights.__doc__.split())


def test_the_two_commands_state_the_committed_claims_table():
    """The claim count the README types by hand is the registry's; what it says exit 0 means holds of the
    committed table (every outcome matches THEORY's ledger), and the refuted claims it names are the
    ledger's."""
    from claims.ledger import read_ledger
    from claims.registry import CLAIMS

    text = README.read_text()
    section = text[text.index("## The two commands"):text.index("## Quickstart")]
    assert f"checks the {len(CLAIMS)} claims of THEORY" in section
    assert "**Exit 0 means every outcome is as recorded**" in section
    rows = load()["claims"]["claims"]
    assert len(rows) == len(CLAIMS)
    assert all(r["matches"] for r in rows), [r["id"] for r in rows if not r["matches"]]
    refuted = sorted(i for i, e in read_ledger().items() if e.recorded == "refuted")
    assert sorted(r["id"] for r in rows if r["recorded"] == "refuted") == refuted
    named = sorted(int(i) for i in re.findall(r"claim (\d+), a conjecture refuted", section))
    assert named == refuted


def test_findings_check_and_write(tmp_path, monkeypatch):
    readme, page = tmp_path / "README.md", tmp_path / "docs" / "RESULTS-NARRATIVE.md"
    page.parent.mkdir()
    readme.write_text(f"# x\n\n{findings.SUMMARY_START}\nstale\n{findings.SUMMARY_END}\n\nafter\n")
    page.write_text(f"# y\n\n{findings.START}\nstale\n{findings.END}\n")
    monkeypatch.setattr(findings, "README", readme)
    monkeypatch.setattr(findings, "NARRATIVE", page)
    monkeypatch.setattr(findings, "REPO", tmp_path)  # the links are written from the page's folder in the repository
    assert findings.main(["--check"]) == 1
    assert findings.main(["--write"]) == 0
    assert findings.main(["--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith("\n\nafter\n") and findings.render_summary() in text
    assert findings.render(page=page) in page.read_text() and "](../results/verify/claims.md)" in page.read_text()
    page.write_text(f"# y\n\n{findings.START}\nstale\n{findings.END}\n")
    assert findings.main(["--check"]) == 1  # one page out of date is enough
    readme.write_text("no block\n")
    with pytest.raises(ValueError, match="README.md has no findings block"):
        findings.main(["--check"])


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_named_command_exists(path):
    text = path.read_text()
    targets = _make_targets()
    missing = sorted({t for t in re.findall(r"`make ([a-z][\w-]*)", text) if t not in targets})
    assert not missing, f"{path.name} names make targets the Makefile lacks: {missing}"
    modules = set(re.findall(r"python3? -m ([a-z_][\w.]*)", text))
    ours = {m for m in modules if m.split(".")[0] in {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()}}
    absent = sorted(m for m in ours if importlib.util.find_spec(m) is None)
    assert not absent, f"{path.name} names modules that do not exist: {absent}"


def _make_modules() -> list[str]:
    """The toolkit modules the Makefile's targets run (``$(PY) -m MODULE``), benchmarks and pytest aside."""
    found = set(re.findall(r"\$\(PY\) -m ([a-z_][\w.]*)", (REPO / "Makefile").read_text()))
    return sorted(m for m in found if m != "pytest" and not m.endswith("bench"))


def test_every_make_target_runs_a_command_that_answers_help():
    """A target's module parses ``--help`` and exits 0: a module that only says where its command went
    (exit 2) or one that is gone fails here, before anyone types ``make``."""
    mods = [m for m in _make_modules() if m != "claims"]  # claims runs every check; its module is tested apart
    assert "studies.run" in mods, mods
    code = textwrap.dedent("""
        import contextlib, io, runpy, sys
        for m in sys.argv[1:]:
            sys.argv = [m, "--help"]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    runpy.run_module(m, run_name="__main__", alter_sys=True)
                    rc = 0
                except SystemExit as e:
                    rc = e.code or 0
            print(m, rc, err.getvalue().strip().splitlines()[-1:] if rc else "")
    """)
    out = subprocess.run([sys.executable, "-c", code, *mods], check=False, cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    failed = [line for line in out.stdout.splitlines() if line.split(" ")[1] != "0"]
    assert len(out.stdout.splitlines()) == len(mods) and not failed, failed


PACKAGES = sorted(p.name for p in REPO.iterdir() if (p / "__init__.py").is_file())
DOTTED = re.compile(r"(?<![\w/.-])((?:{})(?:\.\w+)+)(?![\w/-])".format("|".join(PACKAGES)))


def dotted_names(text: str) -> set[str]:
    """The ``pkg.module.attr`` names inside the code spans and blocks of a markdown ``text``."""
    blocks = re.findall(r"```.*?```", text, re.DOTALL)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
    return {m for chunk in (*blocks, *spans) for m in DOTTED.findall(chunk)
            if not re.search(r"\.(md|json|csv|png|py|gz)$", m)}


def _resolve(name: str) -> str | None:
    """None if ``name`` (``pkg.module.attr...``) names an existing module or attribute, else why not."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        if importlib.util.find_spec(parts[0]) is None:
            return "no such package"
        try:
            obj = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod:
                continue  # a shorter prefix may be the module and the rest its attributes
            raise
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:parts.index(attr)])} has no attribute {attr!r}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_named_python_object_exists(path):
    """Every `pkg.module.name` the page writes in code spans is importable: a renamed or moved
    module or function shows up here, not in a reader's traceback."""
    names = sorted(dotted_names(path.read_text()))
    absent = {n: why for n in names if (why := _resolve(n))}
    assert not absent, f"{path.name}: {absent}"
