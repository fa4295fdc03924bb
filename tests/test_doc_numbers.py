"""No number in the documentation that the code did not write.

Every number of the README, ``docs/`` and each study's README is either
- in a generated block (between ``<!-- ...:start ... -->`` and ``<!-- ...:end -->`` markers: the findings, the
  narrative's tables; their own tests assert each block is the one its renderer writes), or
- written, digit for digit, in a committed result the code wrote (``results/REPORT.md``, every JSON under
  ``results/``: verdicts, comparisons, maps, claims, cards, grid records), or
- a setting defined in code, equal as a number: an estimator's knob (:data:`estimators.params.PARAMS`), a
  trainer default (:class:`llm_runs.config.TrainConfig`), a grid's setting (:data:`studies.grids.STUDIES`), a
  version pinned in ``pyproject.toml`` or the Makefile.

Checked: every decimal number and every integer of 1,000 or more. Smaller integers (counts such as "7 of 10",
delays, seeds, section numbers) are not: they are too common to trace by their digits alone. The frozen pages
(the pre-registrations, written before their runs, and ``docs/THEORY.md``, the specification) and the generated
``docs/LAYERS.md`` are out of scope.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FROZEN = ("THEORY.md", "LAYERS.md")
PAGES = [REPO / "README.md",
         *(p for p in sorted((REPO / "docs").glob("*.md")) if not p.name.startswith("PREREGISTRATION")
           and p.name not in FROZEN),
         *sorted((REPO / "studies").rglob("README.md"))]

EXEMPT = {
    "README.md": {"2610.01896": "the paper's arXiv identifier"},
}
"""Per page, numbers that are names rather than quantities, each with why."""

GENERATED = re.compile(r"<!-- (\w[\w-]*):start.*?<!-- \1:end -->", re.DOTALL)
NUMBER = re.compile(r"(?<![\w.§/])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.]\d|\w)")


def prose(text: str) -> str:
    """``text`` without generated blocks, code (fenced or inline), link targets and HTML comments."""
    text = GENERATED.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def checked_numbers(text: str) -> list[str]:
    """The numbers of ``text``'s prose this test traces: decimals and integers of 1,000 or more, sign dropped."""
    out = []
    for m in NUMBER.finditer(prose(text)):
        v = m.group(0).lstrip("+-").replace(",", "")
        if re.fullmatch(r"\d+", v) and int(v) < 1000:
            continue
        out.append(v)
    return out


def _as_float(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def written() -> set[str]:
    """Every number, as the code wrote it, in the committed results' report and JSON files."""
    root = REPO / "results"
    files = [root / "REPORT.md", *root.rglob("*.json"), *(root / "cards").rglob("*.md")]
    text = "\n".join(p.read_text(errors="replace") for p in files)
    return {t.lstrip("+-") for t in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)}


def _numbers_in(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers_in(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers_in(v)]
    if isinstance(value, str):
        return [f for t in re.findall(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", value) if (f := _as_float(t)) is not None]
    return []


@pytest.fixture(scope="module")
def settings() -> set[float]:
    """Every setting defined in code, as a number."""
    from estimators.params import PARAMS
    from llm_runs.config import TrainConfig
    from studies.grids import STUDIES

    out: list[float] = []
    for params in PARAMS.values():
        for p in params:
            out += _numbers_in([p.default, p.lo, p.hi])
    out += _numbers_in([f.default for f in dataclasses.fields(TrainConfig)
                        if f.default is not dataclasses.MISSING])
    for grid in STUDIES.values():
        out += _numbers_in(grid.record())
    for pins in ("pyproject.toml", "Makefile"):
        out += _numbers_in(re.findall(r"==\s*([\d.]+)", (REPO / pins).read_text()))
    return {x for x in out if math.isfinite(x)}


def test_the_scan_reads_what_a_reader_reads():
    text = ("GMC 0.620 [0.5, -0.31]; `0.777` in code; [link](x/0.888.md); d = 64, 1,200 runs, §8.5, "
            "lr 2e-3, v2.13.0\n<!-- t:start -->0.999<!-- t:end -->\n```\n0.123\n```")
    assert checked_numbers(text) == ["0.620", "0.5", "0.31", "1200", "2e-3"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_number_is_one_the_code_wrote(page, written, settings):
    exempt = EXEMPT.get(str(page.relative_to(REPO)), {})
    untraced = [v for v in checked_numbers(page.read_text())
                if v not in written and v not in exempt and _as_float(v) not in settings]
    assert not untraced, (f"{page.relative_to(REPO)}: numbers no committed result or code setting holds "
                          f"(generate them, quote the report, or drop them): {untraced}")


def test_every_exemption_is_still_on_its_page():
    for page, numbers in EXEMPT.items():
        found = checked_numbers((REPO / page).read_text())
        assert set(numbers) <= set(found), (page, set(numbers) - set(found))
