"""No number in the documentation that the code did not write.

Every number of the README, ``docs/`` and each study's README is either
- in a generated block (between ``<!-- ...:start ... -->`` and ``<!-- ...:end -->`` markers: the findings, the
  narrative's tables; their own tests assert each block is the one its renderer writes), or
- written, digit for digit, in a committed result the code wrote (``results/REPORT.md``, every JSON under
  ``results/``: verdicts, comparisons, maps, claims, cards, grid records), or
- a setting defined in code, equal as a number: an estimator's knob (:data:`estimators.params.PARAMS`), a
  trainer default (:class:`llm_runs.config.TrainConfig`), a grid's setting (:data:`studies.grids.GRIDS`), a
  version pinned in ``pyproject.toml`` or the Makefile, or
- with a k or M suffix, a model's size: the parameter count of a model the trainer or the grids or the GPU plan
  build (counted on the meta device), rounded as written ("247k", "2.07M").

Checked: every decimal number (a factor written "x2.6" or "2.6x" too), every integer of 1,000 or more, and every
number with a k or M suffix. Smaller integers (counts such as "7 of 10", delays, seeds, section numbers) are not: they
are too common to trace by their digits alone. The trace is by digits, so it catches a number written nowhere
but not a wrong one that happens to be written elsewhere (about half of the two-place decimals in [0, 1] occur
somewhere in the committed results): it keeps numbers from being typed by hand, it does not prove each one.
The frozen pages (the pre-registrations, written before their runs, and ``docs/THEORY.md``, the
specification) and the generated ``docs/LAYERS.md`` are out of scope.
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
NUMBER = re.compile(r"(?:(?<=[\s(|*\[~]x)|(?<![\w.§/]))[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?[kMx×]?(?![\w.]\d|\w)")
"""A number in prose: not inside a word, a version or a path; a factor ("x2.6", "2.6x") and a k or M suffix
("247k") kept."""
SCALE = {"k": 1e3, "M": 1e6}


def prose(text: str) -> str:
    """``text`` without generated blocks, code (fenced or inline), link targets and HTML comments."""
    text = GENERATED.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def checked_numbers(text: str) -> list[str]:
    """The numbers of ``text``'s prose this test traces: decimals, integers of 1,000 or more and k/M-suffixed
    numbers, sign and thousands separators dropped."""
    out = []
    for m in NUMBER.finditer(prose(text)):
        v = m.group(0).lstrip("+-").replace(",", "").rstrip("x×")
        if re.fullmatch(r"\d+", v) and int(v) < 1000:
            continue
        out.append(v)
    return out


def traced(v: str, written: set[str], settings: set[float], sizes: set[float]) -> bool:
    """Whether ``v`` (as :func:`checked_numbers` gives it) is written in a committed result or is a setting. A
    k/M-suffixed number is a model's size: it is traced only to a parameter count in ``sizes`` that it rounds at
    its written places (so "247k" to 247,424, and "2k" to nothing: no model has about 2,000 parameters)."""
    if v[-1] in SCALE:
        digits, scale = v[:-1], SCALE[v[-1]]
        places = len(digits.split(".")[1]) if "." in digits else 0
        return any(round(x / scale, places) == float(digits) for x in sizes)
    return v in written or _as_float(v) in settings


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
    from studies.grids import GRIDS

    out: list[float] = []
    for params in PARAMS.values():
        for p in params:
            out += _numbers_in([p.default, p.lo, p.hi])
    out += _numbers_in([f.default for f in dataclasses.fields(TrainConfig)
                        if f.default is not dataclasses.MISSING])
    for grid in GRIDS.values():
        out += _numbers_in(grid.record())
    for pins in ("pyproject.toml", "Makefile"):
        out += _numbers_in(re.findall(r"==\s*([\d.]+)", (REPO / pins).read_text()))
    return {x for x in out if math.isfinite(x)}


@pytest.fixture(scope="module")
def sizes() -> set[float]:
    """The parameter counts a k/M-suffixed number is traced to (:func:`model_sizes`)."""
    return set(model_sizes())


def model_sizes() -> list[float]:
    """The parameter counts of the models the trainer builds by default and the grids build (the ``tiny-cpu``
    preset as it is and at each grid's ``model_kwargs``, with the committed warm starts' vocabularies) and of
    the GPU plan's Qwen3-0.6B shape."""
    import json

    from llm_runs.presets import TINY_CPU_SHAPE
    from studies.gpu.check import QWEN3_0_6B_SHAPE
    from studies.gpu.plan import parameter_counts
    from studies.grids import GRIDS

    vocabs = {len(json.loads(t.read_text())["model"]["vocab"])
              for t in (REPO / "llm_runs" / "warmstarts").glob("*/tokenizer.json")}
    shapes = {"{}", *(json.dumps(g.record()["base"].get("model_kwargs") or {}, sort_keys=True)
                       for g in GRIDS.values())}
    sizes = [parameter_counts({**TINY_CPU_SHAPE, **json.loads(k)}, v)[0] for k in shapes for v in vocabs]
    return [float(n) for n in sizes] + [float(parameter_counts(QWEN3_0_6B_SHAPE, 0)[0])]


def test_the_scan_reads_what_a_reader_reads():
    text = ("GMC 0.620 [0.5, -0.31]; `0.777` in code; [link](x/0.888.md); d = 64, 1,200 runs, §8.5, "
            "lr 2e-3, v2.13.0, a 247k-parameter model, 2.07M, x2.6 and x16, GSM8K, max2.5, 0x1F, Qwen3-0.6B, "
            "3.5x faster, **x4.5**, |x5.5|, [x6.5], ~x7.5, a 8.5× gain, ×9.5, 0.5M\n"
            "<!-- t:start -->0.999<!-- t:end -->\n```\n0.123\n```")
    assert checked_numbers(text) == ["0.620", "0.5", "0.31", "1200", "2e-3", "247k", "2.07M", "2.6", "3.5", "4.5",
                                     "5.5", "6.5", "7.5", "8.5", "9.5", "0.5M"]


def test_a_suffixed_number_is_traced_by_the_count_it_rounds():
    sizes = {247_424.0, 2_068_992.0, 512_000.0}
    assert traced("247k", set(), sizes, sizes) and traced("2.07M", set(), sizes, sizes)
    assert traced("2.1M", set(), sizes, sizes) and traced("0.5M", set(), sizes, sizes)
    assert not traced("248k", {"248"}, {248.0}, sizes) and not traced("2.08M", {"2.08"}, {2.08e6}, sizes)
    assert not traced("2k", set(), {2000.0}, sizes)  # a setting is no model size


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_number_is_one_the_code_wrote(page, written, settings, sizes):
    exempt = EXEMPT.get(str(page.relative_to(REPO)), {})
    untraced = [v for v in checked_numbers(page.read_text())
                if v not in exempt and not traced(v, written, settings, sizes)]
    assert not untraced, (f"{page.relative_to(REPO)}: numbers no committed result or code setting holds, or "
                          f"(k/M-suffixed) no model size rounds to (generate them, quote the report, or drop "
                          f"them): {untraced}")


def test_every_exemption_is_still_on_its_page():
    for page, numbers in EXEMPT.items():
        found = checked_numbers((REPO / page).read_text())
        assert set(numbers) <= set(found), (page, set(numbers) - set(found))
