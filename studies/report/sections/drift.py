"""The report's section on the drift map (``results/llm/drift/verdicts.json``, made by
``python -m studies.drift``), followed by the second-rounding replicate's table
(:mod:`studies.report.sections.replicate`). It only reads those files; what a verdict says is decided there, and each
verdict's sentence is :mod:`studies.report.verdict_text`."""
from __future__ import annotations

from pathlib import Path

from grids.run_table import MARGIN
from schema.results import read_json
from studies.report.fmt import num as _num
from studies.report.verdict_text import (
    OPTIMIZER_NAMES,
    d1_sentence,
    d2_sentence,
    d5_sentence,
    delay0_of,
    drift_guide,
    fails_at_delay0,
    rate_words,
    step_control_sentence,
    step_size_lead,
    verdict_cell,
    verdicts_path,
)


def drift_lines(path: Path) -> list[str]:
    if not path.is_file():
        return [(f"*No drift verdicts yet ({path}): `python -m studies.drift` after `python -m studies.run --grid "
                "drift`.*"), ""]
    v = read_json(path)
    seeds = v.get("seeds_drift", [])
    md = [(f"Pre-registered in `docs/PREREGISTRATION-DRIFT.md`. Whole seeds of the drift grid: {len(seeds)} of 5 "
          f"({', '.join(map(str, seeds)) or 'none'}); of the decisive seeds 5-9: {len(v.get('seeds_decisive', []))}."),
          "", "| hypothesis | verdict |", "|---|---|"]
    for h in ("D1", "D2", "D3", "D4", "D5", "D6", "D7"):
        md.append(f"| {h} | {verdict_cell(v, h)} |")
    md.append("")
    md += [x for text in (d1_sentence(v), d2_sentence(v), step_control_sentence(v), d5_sentence(v), step_size_lead(v),
                          drift_guide(v)) if text for x in (text, "")]
    bounds = v.get("boundaries", [])
    if bounds:
        state = "provisional, on the runs finished so far (not decided)" if v.get("provisional") else "decided"
        md += [(f"The map ({state}): per correction and optimiser, each level's early KL per token (the median over "
               "seeds of the median over updates d..d+19) and its stable share (runs); where a level's own delay-0 "
               "runs are below 80% stable, their share follows (d0: ...): that step fails without staleness."), "",
               "| correction | optimiser | levels: KL, stable (n) | boundary |", "|---|---|---|---|"]
        for b in bounds:
            lv = "; ".join(f"{x['level']}: {_num(x['drift'])}, {x['stable_share']:.0%} ({x['n']})"
                           + (f", d0: {delay0_of(x)}" if fails_at_delay0(x) else "") for x in b["levels"])
            cens = {"right": " (none failed: beyond)", "left": " (failed at the smallest)"}.get(b.get("censored"), "")
            md.append(f"| {b['estimator']} | {b['optimizer']} | {lv} | {_num(b['boundary'])}{cens}"
                      f"{_bracket_note(b)} |")
        md.append("")
        md += beside_lines(v)
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


def _bracket_note(b: dict) -> str:
    """Where an interpolated boundary lies between two tested levels: their drifts and how far apart."""
    br = b.get("bracket")
    if not br:
        return ""
    return (f"; interpolated between the tested KL {_num(br[0])} and {_num(br[1])}, {_factor(br[1] / br[0])} apart, "
            "no level run between")


def _held_learned(g: dict) -> str:
    """A level's last column: held and learned, held without a gain beyond the margin, or did not hold."""
    return "yes" if g["held"] and g["learned"] else f"held, no gain beyond {MARGIN}" if g["held"] else "no"


def _factor(r: float) -> str:
    """A ratio as "5.7x" or "2,088x"."""
    return f"{r:.1f}x" if r < 10 else f"{r:,.0f}x"


def _level_name(opt: str, level: str) -> str:
    return f"{OPTIMIZER_NAMES[opt]} {rate_words(level)}"


def beside_lines(v: dict) -> list[str]:
    """What the report shows beside the verdicts (``beside`` in the verdicts, :func:`studies.drift.beside.beside`):
    the points read after their run's collapse and the map on the pre-collapse window, each level's gain over
    the warm start, and the axis's dependence on the correction. [] for verdicts written without it."""
    bes = v.get("beside")
    if not bes:
        return []
    md = []
    ac = bes["after_collapse"]
    total = sum(x["unstable"] for x in ac.values())
    after = sum(x["after_collapse"] for x in ac.values())
    whole = sum(x["whole_window_after"] for x in ac.values())
    md += [(f"**Drift read after the collapse.** The early window (updates d..d+19) is read after the outcome in "
            f"{after} of the {total} unstable runs on the map (of {sum(x['points'] for x in ac.values())} points): "
            f"their collapse update under the stability rule comes before the window ends ({whole} of them at or "
            "before its first update, so the whole window follows the collapse). "
            + "; ".join(f"{OPTIMIZER_NAMES[o]}: {x['after_collapse']} of {x['unstable']} unstable runs"
                        for o, x in ac.items())
            + ". A drift read there is the collapse's symptom, not its cause. On the pre-collapse window (the 20 "
            "updates ending at the collapse, or at d + 20 when that comes first; the early window for every "
            "other run) the boundaries are:"), "",
           "| correction | optimiser | boundary, early window | boundary, pre-collapse window [95%] | moved |",
           "|---|---|---|---|---|"]
    for b in bes["precollapse_boundaries"]:
        cens = {"right": "beyond ", "left": "below "}.get(b.get("censored"), "")
        moved = ("no" if not b["moved"] else "yes, outside the early interval" if b["outside_early_interval"]
                 else "yes, within the early interval")
        md.append(f"| {b['estimator']} | {b['optimizer']} | {_num(b['early_boundary'])} | {cens}{_num(b['boundary'])} "
                  f"[{_num(b.get('low'))}, {_num(b.get('high'))}] | {moved} |")
    moved = [b for b in bes["precollapse_boundaries"] if b["moved"]]
    out = [b for b in moved if b["outside_early_interval"]]
    md += ["", (f"{len(moved)} of {len(bes['precollapse_boundaries'])} boundaries move on the pre-collapse window"
                + (f"; {len(out)} beyond the early boundary's 95% interval ("
                   + ", ".join(f"{b['estimator']} under {OPTIMIZER_NAMES[b['optimizer']]}" for b in out) + ")"
                   if out else ", none beyond the early boundary's 95% interval") + "."), ""]
    md += [("**Held is not learned.** Each level's gain over the warm start: final held-out pc minus the run's own "
            "first evaluation (the warm start), paired within the run, mean over its seeds with a 95% bootstrap "
            f"interval. *Held*: at least 80% of the seeds stable; *learned*: the gain's interval above {MARGIN} (the "
            "smallest difference in final held-out pc the studies count). The advice below names only corrections "
            "that held and learned."), "",
           ("| optimiser, step | correction | early KL | stable | pc at warm start | gain over warm start [95%] "
            "| held and learned |"), "|---|---|---|---|---|---|---|"]
    for g in bes["gains"]:
        md.append(f"| {_level_name(g['optimizer'], g['level'])} | {g['estimator']} | {_num(g['drift'])} "
                  f"| {g['stable']} of {g['n']} | {g['pc0']:.3f} | {g['gain']:+.3f} [{g['low']:+.3f}, "
                  f"{g['high']:+.3f}] | {_held_learned(g)} |")
    dep = bes["axis_dependence"]
    md += ["", ("**The axis depends on the correction.** The early KL is measured under each correction's own "
                "updates, so one setting (optimiser and step, chosen before any correction acts) sits at different "
                "drifts for different corrections: "
                + "; ".join(f"{_level_name(x['optimizer'], x['level'])}: {_num(x['min'][1])} ({x['min'][0]}) to "
                            f"{_num(x['max'][1])} ({x['max'][0]}), {_factor(x['ratio'])}" for x in dep)
                + ". 'Your drift' is therefore a correction's drift: a run placed by the KL it logged under one "
                "correction is placed on that correction's scale only. The setting itself (optimiser, step, delay) "
                "does not depend on the correction, and the advice is given per setting."), ""]
    return md


def drift_decided(path: Path) -> bool:
    """Whether the drift map is decided (its seeds whole): the report then leads with it."""
    return path.is_file() and not read_json(path).get("provisional", False)


def progress_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                     figure_sections=None) -> tuple[list[str], list[str], bool]:
    """The drift map (with its figure, when ``figure_sections`` places figures) and the replicate: under
    "Campaigns in progress" while the map is provisional; the map as a section of its own once decided.
    Returns the lines, the figures not drawn and whether the map is decided (the report then leads with it)."""
    from studies.drift.figures import FIGURES as DRIFT_FIGURES
    from studies.report.sections.replicate import comparison_path, replicate_lines

    path = verdicts_path()
    decided = drift_decided(path)
    md = (["## The drift map: where each correction fails as the drift grows", ""] if decided
          else ["## Campaigns in progress", "", "### The drift map", ""])
    missing: list[str] = []
    if figure_sections is not None:
        lines, missing = figure_sections(DRIFT_FIGURES, report_dir, figures_out, draw_missing)
        md += lines
    md += drift_lines(path)
    md += ["### Verdicts under a different rounding (the replicate)", ""]
    md += replicate_lines(comparison_path())
    return md, missing, decided
