"""The report's section on the 2026 corrections: N1-N3 as ``python -m studies.corrections_2026`` decided them
(docs/PREREGISTRATION-2026.md), the cells so far while the grid runs, and where the analysis departs from the
pre-registration's text."""
from __future__ import annotations

from pathlib import Path

HYPOTHESES = {
    "N1": "held: stable in at least as many seeds as GMC at each level, 5 of 5 where GMC is not",
    "N2": "learned: the gain over the warm start among stable runs, and c minus TOPR paired by seed",
    "N3": "boundary: the failure boundary on the early-KL axis lies beyond GMC's at the same optimiser",
}
DEPARTURES = [
    ("The pre-registration names the boundary rule `claims.drift`; no such module exists. The rule applied is the "
     "drift map's own, unchanged (`studies.drift.analysis.boundaries`, seed-bootstrap intervals), over the three "
     "pre-registered levels for GMC and each correction alike."),
    ("N1's text joins a count rule (\"at least as many seeds as GMC\") with a Holm-adjusted decision; applied as: "
     "REFUTED where some level's one-sided Fisher test (c less often stable than GMC) is significant after Holm "
     "over the seven corrections; CONFIRMED where c's count is at least GMC's at every level and, at every level "
     "where GMC is not 5 of 5, c is 5 of 5 and the opposite test is significant after Holm; INCONCLUSIVE otherwise."),
    ("N3's \"lies beyond GMC's\" is read with censoring: a boundary's bootstrap interval, or, where no level failed, "
     "at least its largest drift, where every level failed, at most its smallest; CONFIRMED where c's lower limit "
     "is above GMC's upper one. The axis is each run's own early KL: a correction whose runs drift further at the "
     "same step size can fail at a smaller step size than GMC and still lie beyond it here; N1 reads step sizes."),
    ("N2's \"held, not learned\" is read as: stable in at least 4 of 5 seeds (the drift map's 80% share) with the "
     "gain's 95% bootstrap interval not above the studies' margin."),
]


def verdicts_path() -> Path:
    from grids import grid_folder

    return grid_folder("corrections_2026") / "verdicts.json"


def _f(x, fmt=".3g") -> str:
    from studies.report.fmt import num

    return num(x, "{:" + fmt + "}")


def cell_lines(cells: list[dict], levels: list[str]) -> list[str]:
    """Stable count (of n), mean gain and early KL per correction and level."""
    out = ["| correction | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    for est in dict.fromkeys(c["estimator"] for c in cells):
        row = []
        for lv in levels:
            c = next((x for x in cells if x["estimator"] == est and x["level"] == lv), None)
            row.append("" if c is None else f"{c['stable']}/{c['n']} stable, gain {_f(c['gain'], '+.3f')}, "
                                            f"KL {_f(c['drift'])}")
        out.append(f"| {est} | " + " | ".join(row) + " |")
    return out


def _n2(x: dict, level: str) -> str:
    """One level of N2: the label, the gain among stable runs, and c minus TOPR paired by seed."""
    out = (f"{level}: {x['label']} (gain {_f(x['gain'], '+.3f')} [{_f(x['gain_low'], '+.3f')}, "
           f"{_f(x['gain_high'], '+.3f')}]")
    if x.get("minus_topr") is not None:
        out += (f"; minus TOPR {_f(x['minus_topr'], '+.3f')} [{_f(x['minus_topr_low'], '+.3f')}, "
                f"{_f(x['minus_topr_high'], '+.3f')}], {len(x['paired_seeds'])} seeds")
    return out + ")"


def decided_lines(v: dict) -> list[str]:
    levels = v["levels"]
    out = ["| correction | N1 (held) | N2 per level | N3 Adam + clip / SGD |", "|---|---|---|---|"]
    for c, n1 in v["N1"].items():
        pred = ", ".join(n1.get("predicted_held_beyond_gmc", [])) or "none"
        n2 = "; ".join(_n2(v["N2"][c][lv], lv) for lv in levels)
        n3 = " / ".join(v["N3"][c][f]["verdict"] for f in ("adamclip", "sgd"))
        out.append(f"| {c} | {n1['verdict']} (predicted beyond GMC at: {pred}) | {n2} | {n3} |")
    return out


def corrections_2026_section() -> list[str]:
    from schema.results import read_json

    head = "## The 2026 corrections on the drift map"
    lead = ("Pre-registration: [docs/PREREGISTRATION-2026.md](../docs/PREREGISTRATION-2026.md) (committed before any "
            "run). `python -m studies.run --grid corrections_2026` runs the grid, `python -m studies.corrections_2026` "
            "decides. Their exact points are on F9's frontier (`results/sim/peers_2026`).")
    path = verdicts_path()
    if not path.is_file():
        return [f"{head} (in progress)", "", lead, "", "Not yet decided: no verdicts file.", ""]
    v = read_json(path)
    pending = "why" in v.get("N1", {})
    md = [f"{head} (in progress)" if pending else head, "", lead, ""]
    md += ["| | hypothesis |", "|---|---|"] + [f"| {h} | {t} |" for h, t in HYPOTHESES.items()] + [""]
    if pending:
        md += [f"N1-N3: INCONCLUSIVE ({v['N1']['why']}).", ""]
    else:
        md += decided_lines(v) + [""]
    md += ["Where the analysis departs from the pre-registration's text:", ""] + [f"* {d}" for d in DEPARTURES] + [""]
    if v.get("cells"):
        md += [f"The cells{' so far' if pending else ''} (d = 64; the references are the drift map's committed runs):",
               ""]
        md += cell_lines(v["cells"], v["levels"]) + [""]
    return md
