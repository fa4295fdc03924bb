"""The README's headline table of the staleness study quotes the committed verdicts
(``results/llm/study/verdicts.json``) number for number: its numbers are written by hand, and
this is what keeps them from drifting when the verdicts are recomputed."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERDICTS = REPO / "results" / "llm" / "study" / "verdicts.json"


def _interval(r: dict) -> str:
    return f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]".replace("+", "")


def _headline_rows() -> tuple[str, dict[str, str]]:
    text = (REPO / "README.md").read_text()
    start = text.index("## Under stale rollouts, which correction?")
    section = text[start:text.index("\n## ", start + 1)]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (H\d) \|.*$", section, re.MULTILINE)}
    return section, rows


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return json.loads(VERDICTS.read_text())  # committed beside the README: missing is a failure


def test_readme_headline_quotes_the_committed_verdicts(verdicts):
    section, rows = _headline_rows()
    assert sorted(rows) == sorted(verdicts)
    seeds = verdicts["H1"]["seeds"]
    assert f"**{len(seeds)} whole seeds** ({seeds[0]}-{seeds[-1]}," in section
    for key, r in verdicts.items():
        row = rows[key]
        assert f"**{r['verdict']}**" in row, (key, r["verdict"], row)
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


def test_interval_format_matches_the_readme_style():
    assert _interval({"mean": -0.28, "low": -0.4538, "high": 0.1053}) == "-0.280 [-0.454, 0.105]"
