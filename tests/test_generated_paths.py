"""No generated file names a machine's folders: the report, the cards, the claims table, the figures'
captions, the drift verdicts and the README's generated blocks name paths relative to the repository."""
import os
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".md", ".html", ".json", ".txt", ".csv")
GENERATED = ["results/REPORT.md", "results/REPORT.html", "README.md", "results/llm/drift/verdicts.json",
             "results/llm/drift/map.json"]
GENERATED_DIRS = ["results/cards", "results/verify"]
# an absolute path: a slash after a space, quote, backtick, bracket, '=' or '>' (or at a line's start), then a top-level
# folder of this machine, then at least one more part
TOP = sorted(d for d in os.listdir("/") if os.path.isdir("/" + d))
ABSOLUTE = re.compile(r"(?:^|[\s`'\"(\[=>])(/(?:" + "|".join(map(re.escape, TOP)) + r")/[^\s`'\")\]]+)", re.MULTILINE)


def generated_files() -> list[Path]:
    files = [ROOT / f for f in GENERATED if (ROOT / f).is_file()]
    for d in GENERATED_DIRS:
        files += sorted(p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in TEXT)
    return files


def absolute_paths(text: str) -> list[str]:
    return ABSOLUTE.findall(text) + ([str(ROOT) + "/"] if str(ROOT) + "/" in text else [])


def test_the_pattern_finds_absolute_paths_and_only_them():
    assert absolute_paths(f"Sources: `{ROOT}/results/sim/x.parquet`") != []
    assert absolute_paths('"command": ["/usr/bin/python", "x"]') == ["/usr/bin/python"]
    assert absolute_paths("Sources: `results/sim/x.parquet`, 3/4 of the runs, tokens/s, https://a.org/b/c") == []


@pytest.mark.parametrize("path", generated_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_generated_file_names_an_absolute_path(path):
    found = absolute_paths(path.read_text(errors="replace"))
    assert not found, f"{path.relative_to(ROOT)} names absolute path(s): {found[:3]}"


def test_the_generated_files_are_the_ones_named():
    names = {str(p.relative_to(ROOT)) for p in generated_files()}
    assert {"results/REPORT.md", "README.md", "results/verify/claims.json", "results/verify/claims.md"} <= names
    assert any(n.startswith("results/cards/") for n in names)


def test_paths_are_shown_relative_to_the_repository(monkeypatch, tmp_path):
    from schema.provenance import command
    from schema.sources import shown_path, source_note

    assert shown_path(ROOT / "results" / "sim" / "a.parquet") == "results/sim/a.parquet"
    assert shown_path("results/x.json") == "results/x.json"
    monkeypatch.setenv("GMC_RESULTS", str(tmp_path / "elsewhere" / "results"))
    assert shown_path(tmp_path / "elsewhere" / "results" / "sim" / "a.parquet") == "results/sim/a.parquet"
    assert not shown_path("/somewhere/else/entirely/a.parquet").startswith("/")
    assert command([str(ROOT / "claims" / "__main__.py"), "--only", "5"]) == ["claims/__main__.py", "--only", "5"]
    df = pd.DataFrame({"a": [1]})
    df.attrs["source"] = [str(tmp_path / "elsewhere" / "results" / "sim" / "b.parquet")]
    assert source_note(df) == "Source: `results/sim/b.parquet`."


def test_claim_19_and_f23_name_their_sources_relative():
    from claims.optimizers import check_19
    from figures import f23_theory_frame as f23

    assert not absolute_paths(check_19(True).evidence)
    try:
        tab = f23.load()
    except Exception as exc:  # noqa: BLE001 - the sweeps are committed; say which is missing
        pytest.fail(f"F23's sources did not load: {exc}")
    assert tab.attrs["sources"] and all(not s.startswith("/") for s in tab.attrs["sources"])
    assert not absolute_paths(f23.caption(tab))
