"""The report's section on the campaigns still running: the drift map (``results/llm/drift/verdicts.json``,
made by ``python -m studies.drift``) and the second-rounding replicate
(``results/llm/replicate_avx2/comparison.json``, made by ``python -m studies.replicate``). It only reads
those files; what a verdict says is decided there."""
from __future__ import annotations

import math
from pathlib import Path

from schema.results import read_json


def _num(x, fmt="{:.3g}") -> str:
    """A number as ``fmt``; "n/a" for None and for non-finite values (saved as strings such as "nan")."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return fmt.format(v) if math.isfinite(v) else "n/a"


def drift_lines(path: Path) -> list[str]:
    if not path.is_file():
        return [(f"*No drift verdicts yet ({path}): `python -m studies.drift` after `python -m llm_runs.study --grid "
                "drift`.*"), ""]
    v = read_json(path)
    seeds = v.get("seeds_drift", [])
    md = [(f"Pre-registered in `docs/PREREGISTRATION-DRIFT.md`. Whole seeds of the drift grid: {len(seeds)} of 5 "
          f"({', '.join(map(str, seeds)) or 'none'}); of the decisive seeds 5-9: {len(v.get('seeds_decisive', []))}."),
          "", "| hypothesis | verdict |", "|---|---|"]
    for h in ("D1", "D2", "D3", "D4", "D5", "D6", "D7"):
        r = v.get(h, {})
        md.append(f"| {h} | {r.get('verdict', 'n/a')}{' (' + r['why'] + ')' if 'why' in r else ''} |")
    md.append("")
    bounds = v.get("boundaries", [])
    if bounds:
        state = "provisional, on the runs finished so far (not decided)" if v.get("provisional") else "decided"
        md += [(f"The map ({state}): per correction and optimiser, each level's early KL per token (the median over "
               "seeds of the median over updates d..d+19) and its stable share (runs)."), "",
               "| correction | optimiser | levels: KL, stable (n) | boundary |", "|---|---|---|---|"]
        for b in bounds:
            lv = "; ".join(f"{x['level']}: {_num(x['drift'])}, {x['stable_share']:.0%} ({x['n']})" for x in b["levels"])
            cens = {"right": " (none failed: beyond)", "left": " (failed at the smallest)"}.get(b.get("censored"), "")
            md.append(f"| {b['estimator']} | {b['optimizer']} | {lv} | {_num(b['boundary'])}{cens} |")
        md.append("")
    d5 = v.get("D5", {})
    for key, label in (("signals", "as pre-registered (rolling median from t = d)"),
                       ("exploratory_from_0", "exploratory, not pre-registered (from the first update)")):
        if d5.get(key):
            md += [f"D5, VCPO's predictor, {label}" + (" (interim)" if "interim_verdict" in d5 else "") + ": "
                   + "; ".join(f"`{c}` ({x['fires']}, threshold {_num(x['threshold'])} chosen on "
                               f"{d5['train_runs']} study runs): hits {x['hits'][0]}/{x['hits'][1]}, false alarms "
                               f"{x['false_alarms'][0]}/{x['false_alarms'][1]} of {d5['held_out_runs']} held-out runs, "
                               f"Fisher p = {_num(x['p_fisher'])}, median lead {_num(x['lead_median'])} updates"
                               for c, x in d5[key].items()) + ".", ""]
    dev = d5.get("deviation")
    if dev:
        md += [f"D5's disclosed deviation: {dev['text']}: "
               + "; ".join(f"`{c}` threshold {_num(x['threshold'])}, hits {x['hits'][0]}/{x['hits'][1]}, false alarms "
                           f"{x['false_alarms'][0]}/{x['false_alarms'][1]}, Fisher p = {_num(x['p_fisher'])}"
                           for c, x in dev["signals"].items()) + ".", ""]
    m6 = v.get("M6_disclosure")
    if m6:
        md += ["The mechanism study's M6 as disclosed beside its verdict: "
               + "; ".join(f"on {k} runs {r['verdict']} (hits {r['hits'][0]}/{r['hits'][1]}, false alarms "
                           f"{r['false_alarms'][0]}/{r['false_alarms'][1]}, Fisher p = {r['p_fisher']:.3f})"
                           for k, r in m6.items()) + ".", ""]
    return md


def replicate_lines(path: Path) -> list[str]:
    if not path.is_file():
        return [(f"*No replicate comparison yet ({path}): `python -m studies.replicate` "
                 "after `python -m llm_runs.study "
                "--grid replicate_avx2`.*"), ""]
    v = read_json(path)
    state = "provisional (no verdict said to survive or not)" if v.get("provisional") else (
        "the verdicts survive" if v.get("survives") else "the verdicts do NOT all survive")
    md = [(f"Pre-registered in `docs/PREREGISTRATION-REPLICATE.md`; every run on AVX2 kernels from the committed warm "
          f"start. Whole seeds: {len(v.get('seeds_whole', []))} of 10: {state}."), "",
          ("| arm | correction | stable, replicate | stable, committed | difference (Newcombe 95%) | pc replicate | "
          "pc committed |"), "|---|---|---|---|---|---|---|"]
    for c in v.get("cells", []):
        lo, hi = c["share_difference"]
        md.append(f"| {c['arm']} | {c['estimator']} | {c['replicate_stable'][0]}/{c['replicate_stable'][1]} | "
                  f"{c['committed_stable'][0]}/{c['committed_stable'][1]} | [{_num(lo, '{:+.2f}')}, "
                  f"{_num(hi, '{:+.2f}')}] | {_num(c['pc_replicate'], '{:.3f}')} | "
                  f"{_num(c['pc_committed'], '{:.3f}')} |")
    md.append("")
    for h, r in v.get("verdicts", {}).items():
        md.append(f"- {h}: replicate {r['replicate']}, committed {r['committed']}")
    return md + [""]


def drift_decided(path: Path) -> bool:
    """Whether the drift map is decided (its seeds whole): the report then leads with it."""
    return path.is_file() and not read_json(path).get("provisional", True)


def progress_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                     figure_sections=None) -> tuple[list[str], list[str], bool]:
    """The drift map (with its figure, when ``figure_sections`` places figures) and the replicate: under
    "Campaigns in progress" while the map is provisional; the map as a section of its own once decided.
    Returns the lines, the figures not drawn and whether the map is decided (the report then leads with it)."""
    from figures.registry import DRIFT_FIGURES
    from llm_runs.run_table import grid_folder

    path = grid_folder("drift") / "verdicts.json"
    decided = drift_decided(path)
    md = (["## The drift map: where each correction fails as the drift grows", ""] if decided
          else ["## Campaigns in progress", "", "### The drift map", ""])
    missing: list[str] = []
    if figure_sections is not None:
        lines, missing = figure_sections(DRIFT_FIGURES, report_dir, figures_out, draw_missing)
        md += lines
    md += drift_lines(path)
    md += ["### Verdicts under a different rounding (the replicate)", ""]
    md += replicate_lines(grid_folder("replicate_avx2") / "comparison.json")
    return md, missing, decided
