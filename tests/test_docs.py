"""The README, docs/ and each study's README hold together: every relative link resolves (file and
heading), and the numbers the research narrative writes by hand (``docs/RESULTS-NARRATIVE.md``) are
the committed results' number for number, so they cannot drift when the verdicts are recomputed. (The README's own
findings are generated, not typed: ``tests/test_readme.py``.)"""
from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
STUDY_PAGES = sorted((REPO / "studies").rglob("README.md"))  # each study's own page
NARRATIVE = REPO / "docs" / "RESULTS-NARRATIVE.md"
RESULTS = REPO / "results" / "llm"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]  # relative ones only


@pytest.mark.parametrize("page", PAGES + STUDY_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_slug_is_github_s():
    assert slug("The Qwen3-0.6B study on one GPU (`make gpu-study`)") == "the-qwen3-06b-study-on-one-gpu-make-gpu-study"
    assert slug("Step-size control (VCPO and friends)") == "step-size-control-vcpo-and-friends"


def test_every_doc_is_linked_from_the_readme():
    linked = {(REPO / t.partition("#")[0]).resolve() for t in links(REPO / "README.md")}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, orphans


# --------------------------------------------------------------------------- hand-typed numbers


def _section(heading: str) -> str:
    text = NARRATIVE.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _interval(r: dict) -> str:
    return f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]".replace("+", "")


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return json.loads((RESULTS / "study" / "verdicts.json").read_text())  # committed: missing is a failure


def test_the_staleness_headline_quotes_the_committed_verdicts(verdicts):
    section = _section("## Under stale rollouts, which correction?")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (H\d) \|.*$", section, re.MULTILINE)}
    assert sorted(rows) == sorted(verdicts)
    seeds = verdicts["H1"]["seeds"]
    assert f"**{len(seeds)} whole seeds** ({seeds[0]}-{seeds[-1]}," in section
    for key, r in verdicts.items():
        assert f"**{r['verdict']}**" in rows[key], (key, r["verdict"], rows[key])
        assert r["seeds"] == seeds
    assert _interval(verdicts["H1"]["gmc_minus_tic_mask"]) in rows["H1"]
    for b, v in verdicts["H2"]["baselines"].items():
        assert _interval(v) in rows["H2"], (b, _interval(v))
    assert _interval(verdicts["H3"]["long_gap_minus_short_gap"]) in rows["H3"]
    h4 = verdicts["H4"]
    lo, hi = h4["ci"]
    for piece in (f"{h4['warned_before_collapse']} of {h4['collapsed_runs']} collapsed runs",
                  f"[{lo:.3f}, {hi:.3f}]", f"{h4['false_alarms']} of {h4['non_collapsed_runs']} runs"):
        assert piece in rows["H4"], (piece, rows["H4"])


def test_interval_format_matches_the_narrative_style():
    assert _interval({"mean": -0.28, "low": -0.4538, "high": 0.1053}) == "-0.280 [-0.454, 0.105]"


def test_the_mechanism_table_quotes_the_committed_stable_shares():
    shares = json.loads((RESULTS / "mechanism" / "verdicts.json").read_text())["stable_shares"]
    section = _section("## Under stale rollouts, which correction?")
    table = section[section.index("| optimiser | GMC | IS |"):]
    header, _, *rows = [r for r in table.split("\n\n")[0].split("\n") if r.startswith("|")]
    columns = {"GMC": "gmc", "IS": "is", "TIC-mask": "tic_mask", "TIC-trunc": "tic_trunc", "TOPR": "topr"}
    names = [columns[c.strip()] for c in header.strip("|").split("|")[1:]]
    arms = ("sgd", "adam", "adamclip", "adamwclip")  # the table's rows, in order
    assert len(rows) == len(arms)
    for arm, row in zip(arms, rows, strict=True):
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")[1:]]
        assert cells == [str(shares[f"{arm}/{e}"][0]) for e in names], (arm, row)
        assert {shares[f"{arm}/{e}"][1] for e in names} == {10}  # "Stable seeds of 10"


def _cells(summary: Path) -> dict[tuple[str, str, int], tuple[int, str]]:
    """(estimator, horizon, delay) -> (stable runs, runs, mean final held-out pc to 3 places), counted here
    apart from the renderer (an oracle for the generated table)."""
    out: dict = {}
    for r in csv.DictReader(summary.open()):
        out.setdefault((r["estimator"], r["run"].split("-")[0], int(r["delay"])), []).append(r)
    return {k: (sum(r["stable"] == "True" for r in v), len(v),
                f"{statistics.mean(float(r['pc_final']) for r in v):.3f}")
            for k, v in out.items()}


def test_the_2025_corrections_table_quotes_the_committed_runs():
    cells = {**_cells(RESULTS / "study" / "summary.csv"), **_cells(RESULTS / "study_2025" / "summary.csv")}
    section = _section("## Under stale rollouts, which correction?")
    lines = section[section.index("| | short, d = 16 |"):].split("\n")
    table = lines[:next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    columns = [("short", 16), ("short", 64), ("long", 16), ("long", 64)]
    names = {"VESPO": "vespo", "DPPO-TV": "dppo_tv", "IcePop": "icepop", "SAPO": "sapo",
             "seq. geo-mean mask": "seq_geo_mask", "*study:* TOPR": "topr", "*study:* GSPO": "gspo",
             "*study:* GMC": "gmc"}
    rows = table[2:]
    assert [r.split("|")[1].strip() for r in rows] == list(names)
    for row in rows:
        label, *values = [c.strip().strip("*") for c in row.strip("|").split("|")]
        est = names[row.split("|")[1].strip()]
        for (h, d), value in zip(columns, values, strict=True):
            stable, n, pc = cells[(est, h, d)]
            assert value == f"{stable}/{n}, {pc}", (label, h, d, value, (stable, n, pc))


def test_the_verl_command_is_one_command():
    """docs/INTEGRATIONS.md explains the README's verl command (which tests/verl_suite trains
    through); the two copies are the same."""
    pattern = r"```bash\n(python3 -m verl\.trainer\.main_ppo.*?)```"
    copies = [re.findall(pattern, p.read_text(), re.DOTALL)
              for p in (REPO / "README.md", REPO / "docs" / "INTEGRATIONS.md")]
    assert [len(c) for c in copies] == [1, 1] and copies[0] == copies[1]


def test_the_claims_count_is_the_committed_table_s():
    rows = json.loads((REPO / "results" / "verify" / "claims.json").read_text())["claims"]
    passed = sum(r["status"] == "PASS" for r in rows)
    failed = [r["id"] for r in rows if r["status"] != "PASS"]
    section = _section("## What the toolkit found")
    expected = f"{passed} of {len(rows)} claims PASS" + "".join(f" and claim {i} FAILS" for i in failed)
    assert f"**{expected}" in section, expected
