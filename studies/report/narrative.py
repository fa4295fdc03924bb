"""The generated blocks of ``docs/RESULTS-NARRATIVE.md``: the narrative's numbers that are results, rendered
from the committed grids' ``summary.csv`` and verdict files instead of typed by hand.

Each block sits in the page between ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->`` (inline or on lines
of its own); :data:`BLOCKS` names its renderer. ``tests/test_narrative.py`` asserts every block is the one its
renderer writes from the committed results.

    python -m studies.report.narrative            # print every block
    python -m studies.report.narrative --write    # rewrite the page's blocks
    python -m studies.report.narrative --check    # exit 1 if a block of the page is not the rendered one
"""
from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from figures.style import label
from schema.io import loads_json, write_text
from studies.grids import GRIDS
from studies.mechanism.warning import WARNING_FILE
from studies.report.findings import block_arguments
from studies.report.verdict_files import RESULTS, cell_rows, load, stable_count

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "RESULTS-NARRATIVE.md"

CELLS = (("short", 16), ("short", 64), ("long", 16), ("long", 64))
"""The staleness study's four (horizon, positive delay) cells, in the narrative's column order."""
PEERS_2025 = ("vespo", "dppo_tv", "icepop", "sapo", "seq_geo_mask")
STUDY_ROWS = ("topr", "gspo", "gmc")
"""The study's estimators the 2025-2026 corrections are set beside in their table."""
TOP_GROUP = 0.015
"""The short-horizon sentence's top group: estimators whose mean final pc at d = 64 is within this of the best."""


def cell_outcome(rows: list[dict], estimator: str, horizon: str, delay: int) -> tuple[int, int, float]:
    """(stable runs, runs, mean final held-out pc) of one estimator in one cell of a grid's ``summary.csv`` rows."""
    mine = cell_rows(rows, horizon, delay, estimator)
    if not mine:
        raise ValueError(f"no run of {estimator!r} at horizon {horizon!r}, delay {delay} in the summary")
    return (*stable_count(mine), statistics.fmean(float(r["pc_final"]) for r in mine))


def peers_2025_table(s: dict) -> str:
    """The 2025-2026 corrections beside the study's TOPR, GSPO and GMC: stable runs of the cell's runs and mean
    final pc per cell; the corrections ordered by their mean at the long horizon, d = 64 (the best of them in bold)."""
    def row(rows, e):
        return [cell_outcome(rows, e, h, d) for h, d in CELLS]

    peers = sorted(PEERS_2025, key=lambda e: -row(s["peers_2025_runs"], e)[-1][2])
    head = "| | " + " | ".join(f"{h}, d = {d}" for h, d in CELLS) + " |"
    lines = [head, "|" + "---|" * (len(CELLS) + 1)]
    for i, e in enumerate(peers):
        cells = [f"{k}/{n}, {m:.3f}" for k, n, m in row(s["peers_2025_runs"], e)]
        if i == 0:
            cells[-1] = f"**{cells[-1]}**"
        lines.append(f"| {label(e)} | " + " | ".join(cells) + " |")
    for e in STUDY_ROWS:
        lines.append(f"| *study:* {label(e)} | "
                     + " | ".join(f"{k}/{n}, {m:.3f}" for k, n, m in row(s["study_runs"], e)) + " |")
    return "\n".join(lines)


def short_horizon_sentence(s: dict) -> str:
    """Which of the study's estimators (the stale floor aside) are in the top group at the short horizon,
    d = 64, and which lose, with their mean final pc."""
    names = sorted({r["estimator"] for r in s["study_runs"]} - {"stale"})
    means = sorted(((cell_outcome(s["study_runs"], e, "short", 64)[2], e) for e in names), reverse=True)
    best = means[0][0]
    top = [(m, e) for m, e in means if best - m <= TOP_GROUP]
    rest = [(m, e) for m, e in means if best - m > TOP_GROUP]
    return (f"{_and([label(e) for _, e in top])} are within {TOP_GROUP} of the best ({top[-1][0]:.3f}-{best:.3f} "
            f"at d = 64), while {_and([f'{label(e)} ({m:.3f})' for m, e in rest])} lose")


def delay0_gain(s: dict) -> str:
    """The range over the mechanism grid's optimiser settings of the held-out pc gained at delay 0."""
    gains = s["mechanism"]["delay0_gain"].values()
    return f"{min(gains):+.3f} to {max(gains):+.3f}"


def warning_auc(s: dict) -> str:
    """The training AUC of the early-warning signal the mechanism study chose before its runs were read (M6)."""
    return f"{s['warning']['auc']:.3f}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


BLOCKS: dict[str, Callable[[dict], str]] = {
    "short-horizon": short_horizon_sentence,
    "peers-2025": peers_2025_table,
    "delay0-gain": delay0_gain,
    "warning-auc": warning_auc,
}
"""Every generated block of the page: its name and its renderer (of :func:`studies.report.verdict_files.load`'s
sources and the mechanism study's chosen warning signal, ``warning``)."""


def block_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)}:start[^>]*-->)(.*?)(<!-- {re.escape(name)}:end -->)", re.DOTALL)


def render(root: Path = RESULTS) -> dict[str, str]:
    """Every block's body, rendered from the committed results under ``root``. A table gets a line of its own
    before and after it, so that the page's markdown reads it as a table."""
    s = {**load(root), "warning": loads_json((GRIDS["mechanism"].default_out(root) / WARNING_FILE).read_text())}
    return {name: (f"\n{body}\n" if body.startswith("|") else body) for name, f in BLOCKS.items()
            for body in [f(s)]}


def page_blocks(text: str) -> dict[str, str]:
    """The body of every block of :data:`BLOCKS` in ``text``; a ValueError naming a block the page lacks."""
    out = {}
    for name in BLOCKS:
        m = block_pattern(name).search(text)
        if m is None:
            raise ValueError(f"{PAGE.name} has no {name!r} block (<!-- {name}:start --> ... <!-- {name}:end -->)")
        out[name] = m.group(2)
    return out


def rewrite(text: str, bodies: dict[str, str]) -> str:
    for name, body in bodies.items():
        text = block_pattern(name).sub(lambda m, b=body: m.group(1) + b + m.group(3), text, count=1)
    return text


def main(argv=None) -> int:
    args = block_arguments("python -m studies.report.narrative", __doc__, "the page's generated blocks", argv)
    try:  # a missing or torn verdict file is one line naming it
        bodies = render()
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (args.write or args.check):
        print("\n\n".join(f"{name}:{body}" for name, body in bodies.items()))
        return 0
    text = PAGE.read_text()
    stale = [name for name, body in page_blocks(text).items() if body != bodies[name]]
    if args.check:
        if stale:
            print(f"{PAGE}: blocks out of date {stale}: run python -m studies.report.narrative --write",
                  file=sys.stderr)
            return 1
        return 0
    if stale:
        write_text(PAGE, rewrite(text, bodies))
    print(f"{PAGE}: {len(stale)} block(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
