"""The staleness study's section of the report (``python -m studies.report``): its verdicts from
``results/llm/study/verdicts.json`` with the numbers behind each, the paired differences, the verdicts had
the grid stopped earlier, the realised mass bias against THEORY's bound, the plain answer and its
figures (F10-F13). Renders only: every number is computed by :mod:`studies.staleness.analysis` and
:mod:`grids.run_table`."""
from __future__ import annotations

import os
from pathlib import Path

from figures import style
from figures.mdhtml import interval as _iv
from figures.mdhtml import num as _num
from figures.mdhtml import plain
from figures.registry import fig_module, figure_sections
from schema.results import MissingResults, results_root
from studies.staleness.figures import FIGURES


def verdict_numbers(key: str, r: dict) -> str:
    """The numbers behind one hypothesis' verdict, from its record in ``verdicts.json``."""
    if key == "H1":
        return f"GMC - TIC-mask at d = {r['delay']}, long: {_iv(r['gmc_minus_tic_mask'])}"
    if key == "H2":
        bs = "; ".join(f"{style.label(b)} {_iv(v)}, non-inferior {'yes' if v['noninferior'] else 'no'}"
                       f" (p = {_num(v['p_noninferior'], '.3g')}), worse {'yes' if v['worse'] else 'no'}"
                       for b, v in r["baselines"].items())
        ex = ", ".join(style.label(e) for e in r.get("unstable_excluded", [])) or "none"
        return (f"GMC - each stable baseline at d = {r['delay']}, long, margin {r['margin']:g}: "
                f"{bs or 'no stable baseline'}; "
                f"unstable, left out: {ex}")
    if key == "H3":
        a, b = r["pair"]
        return (f"(GMC - TIC-mask) long minus short at d = {r['delay']}: {_iv(r['long_gap_minus_short_gap'])}"
                if (a, b) == ("gmc", "tic_mask")
                else f"gap {a} - {b}, long minus short: {_iv(r['long_gap_minus_short_gap'])}")
    if key == "H4":
        lo, hi = r["ci"]
        return (f"{r['warned_before_collapse']} of {r['collapsed_runs']} collapsed runs warned first "
                f"(`{r['diagnostic']}` rolling median > {r['threshold']:g}), 95% CI [{_num(lo)}, {_num(hi)}]; "
                f"false alarms {r['false_alarms']} of {r['non_collapsed_runs']} other runs. Not specific: it fires in "
                f"nearly every long-horizon run at positive delay (the report's 'Why GMC fails here' counts them), "
                "so it "
                f"separates the horizons, not the runs")
    return ""


def verdicts_table(verdicts: dict) -> list[str]:
    from studies.staleness.analysis import HYPOTHESES

    esc = lambda t: str(t).replace("|", "\\|")
    out = ["| | hypothesis | verdict | rule's outcome on the seeds so far | numbers |", "|---|---|---|---|---|"]
    for k in sorted(verdicts):
        r = verdicts[k]
        out.append(f"| {k} | {esc(HYPOTHESES.get(k, ''))} | **{r['verdict']}** | {r.get('interim_verdict', '-')} | "
                   f"{esc(plain(verdict_numbers(k, r)))} |")
    return out


def differences_markdown(runs) -> list[str]:
    """GMC minus each baseline (whole seeds) per horizon and delay, final pc and AUC, as a table."""
    from studies.staleness.analysis import differences

    tab = differences(runs)
    if not len(tab):
        return ["No paired difference (no positive-delay cell)."]
    pc, auc = (tab[tab["metric"] == m].set_index(["horizon", "delay", "baseline"]) for m in ("pc_final", "auc"))
    out = ["| horizon | d | baseline | n | final pc: mean [95% CI] | AUC: mean [95% CI] | baseline stable |",
           "|---|---:|---|---:|---|---|---|"]
    order = {"short": 0, "long": 1}
    extra = set(tab.loc[tab["exploratory"], "baseline"])
    rank = style.ordered(pc.index.get_level_values(2), last=extra)
    for (h, d, b) in sorted(pc.index, key=lambda k: (order.get(k[0], 2), k[1], rank.index(k[2]))):
        r, a = pc.loc[(h, d, b)], auc.loc[(h, d, b)]
        name = plain(style.label(b)) + (" (exploratory)" if b in extra else "")
        out.append(f"| {h} | {d} | {name} | {int(r['n'])} | {_num(r['mean'], '+.3f')} "
                   f"[{_num(r['low'], '+.3f')}, {_num(r['high'], '+.3f')}] | {_num(a['mean'], '+.3f')} "
                   f"[{_num(a['low'], '+.3f')}, {_num(a['high'], '+.3f')}] | "
                   f"{'yes' if r['baseline_stable'] else '**no**'} |")
    return out


def stopping_markdown(runs) -> list[str]:
    """The verdicts on the first k whole seeds (``studies.staleness.analysis.stopping_points``): how much they
    depend on where the grid stopped."""
    from studies.staleness.analysis import stopping_points

    points = stopping_points(runs)
    if len(points) < 2:
        return []
    out = ["### Verdicts had the grid stopped earlier", "",
           ("The decision rule applied to the first k whole seeds (not a pre-registered test: a check of how much the "
           "verdicts depend on the stopping point)."), "",
           ("| whole seeds | H1 | GMC - TIC-mask (long, largest delay) | H2 | stable baselines | H3 | H4 "
            "| warned / collapsed |"),
           "|---|---|---|---|---|---|---|---|"]
    for r in points:
        i1 = r["H1_interval"]
        stable = ", ".join(style.label(e) for e in r["H2_stable"]) or "none"
        out.append(f"| {r['seeds']} | {r['H1']} | {_num(i1['mean'], '+.3f')} [{_num(i1['low'], '+.3f')}, "
                   f"{_num(i1['high'], '+.3f')}] | {r['H2']} | {stable} | {r['H3']} | {r['H4']} | "
                   f"{r['H4_warned'][0]} / {r['H4_warned'][1]} |")
    return out + [""]


def bound_markdown(tab) -> list[str]:
    if not len(tab):
        return ["No run logs both the realised mass bias and its bound."]
    out = [("| horizon | d | scheme | runs | updates | realised <= bound | median realised/bound "
           "| max realised/bound | "
           "bound 0 (plug-in chi^2 <= 0) |"), "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in tab.itertuples():
        out.append(f"| {r.horizon} | {r.delay} | {plain(style.label(r.scheme))} | {r.runs} | {r.updates} "
                   f"| {r.holds_frac:.1%} | "
                   f"{_num(r.ratio_median, '.3g')} | {_num(r.ratio_max, '.3g')} | {r.bound_zero_frac:.1%} |")
    return out


def plain_answer(runs) -> str:
    """:func:`studies.staleness.analysis.plain_answer_facts` in one paragraph."""
    from studies.staleness.analysis import MIN_SEEDS, plain_answer_facts

    f = plain_answer_facts(runs)
    if f["horizon"] is None:
        return "No positive-delay run yet: no answer."
    n = len(f["seeds"])
    rank = "; ".join(f"{plain(style.label(e))} {m:.3f}" for e, m in f["ranked"]) or "none"
    text = (f"At the largest delay (d = {f['delay']}) and the {f['horizon']} horizon, over {n} whole seed"
            f"{'' if n == 1 else 's'}, the stable estimators ranked by mean final held-out pc are: {rank}. ")
    if not f["gmc_present"]:
        text += "GMC has no run there. "
    elif "gmc_vs_best" in f:
        b = f["gmc_vs_best"]
        text += (f"GMC minus the best other stable estimator ({plain(style.label(b['best']))}): {b['mean']:+.3f}, 95% "
                 f"interval [{_num(b['low'], '+.3f')}, {_num(b['high'], '+.3f')}] over {b['n']} paired seeds"
                 + ("" if f["gmc_stable"] else " (GMC itself is unstable there)") + ". ")
    text += (f"Unstable there (fewer than {f['stable_fraction']:.0%} of seeds stable): "
             f"{', '.join(plain(style.label(e)) for e in f['unstable']) or 'none'}.")
    if f["interim"]:
        text += (f" This is interim: the pre-registered stopping rule needs {MIN_SEEDS} whole seeds, so nothing here "
                 "is a verdict.")
    if "exploratory" in f:
        x = f["exploratory"]
        k = len(x["seeds"])
        placed = "; ".join(f"{i}. {plain(style.label(e))}{' (exploratory)' if new else ''} {m:.3f}"
                           for i, (e, m, new) in enumerate(x["ranked"], 1)) or "none"
        text += (f" Exploratory, not pre-registered: the 2025-2026 corrections "
                 f"({', '.join(plain(style.label(e)) for e in x['estimators'])}) over their {k} whole "
                 f"seed{'' if k == 1 else 's'} (every estimator's mean on those seeds) "
                 "rank among the stable estimators "
                 f"there as: {placed}. Unstable there: "
                 f"{', '.join(plain(style.label(e)) for e in x['unstable']) or 'none'}"
                 + (f"; no complete run there: {', '.join(plain(style.label(e)) for e in x['absent'])}"
                    if x["absent"] else "") + ".")
        masked = {e: z for e, z in x.get("masked_updates", {}).items() if z > 0}
        if masked:
            text += (" Of their updates there with a learning signal (some advantage not 0), the share whose gradient "
                     "is exactly zero (every token or sequence that carried one masked; the optimiser still steps, "
                     "so Adam moves the policy on its momentum alone): "
                     + ", ".join(f"{plain(style.label(e))} {z:.2f}"
                                 for e, z in sorted(masked.items(), key=lambda t: -t[1]))
                     + ".")
    return text


def step_size_first() -> list[str]:
    """The drift map's D7 leads the plain answer when it holds (docs/PREREGISTRATION-DRIFT.md: "If it holds, the
    plain answer leads with the step size"), then what the map says at the user's drift; nothing before it is
    decided."""
    from studies.report.verdict_text import drift_guide, read_verdicts, step_control_sentence, step_size_lead

    v, name = read_verdicts(), (lambda e: plain(style.label(e)))
    return [x for text in (step_size_lead(v, name=name), step_control_sentence(v), drift_guide(v, name=name)) if text
            for x in (text, "")]


def study_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], list[str]]:
    """The report's first section: the staleness study's verdicts, tables, plain answer and figures.
    Returns (markdown lines, names of figures not drawn)."""
    from grids.folders import STUDY, VERDICTS
    from schema.results import read_json
    from schema.stability import STABLE_FRACTION
    from studies.report.sections.replicate import survival_lines
    from studies.staleness.analysis import MIN_SEEDS, bound_table, exploratory_estimators
    from studies.staleness.figures.f10_study_differences import load_runs

    md = ["## Staleness study (headline)", "",
          ("The pre-registered study (docs/PREREGISTRATION.md): GMC and ten baselines at delays 16 and 64 (and the "
          "stale floor at 64) on two horizons, paired by seed. Only whole seeds (every run of the seed complete) "
          f"enter the analysis, and below {MIN_SEEDS} of them every verdict is NOT DECIDED."), ""]
    missing = []
    try:
        runs = load_runs()
    except MissingResults as e:
        runs = None
        md += [f"*{e}*", ""]
    decided = runs is not None and len(runs.attrs["seeds"]) >= MIN_SEEDS
    if runs is not None:
        seeds = runs.attrs["seeds"]
        md += [(f"**Whole seeds: {len(seeds)}** ({', '.join(map(str, seeds)) or 'none'}); "
               f"{'the stopping rule is met' if decided else f'the stopping rule needs {MIN_SEEDS}'}. "
               f"Source: `{os.path.relpath(STUDY.find(), results_root().parent)}`."), ""]
    md += ["### Pre-registered hypotheses", ""]
    try:
        doc = read_json(VERDICTS.require())
        vseeds = sorted({s for r in doc.values() for s in r.get("seeds", [])})
        md += [(f"From `results/llm/study/verdicts.json` (made by `{VERDICTS.command}`), over seeds "
               f"{', '.join(map(str, vseeds)) or 'none'}."), ""]
        if runs is not None and vseeds != list(runs.attrs["seeds"]):
            md += [(f"**verdicts.json is out of date**: it was made from seeds {vseeds}, "
                   "the run folders now hold whole "
                   f"seeds {list(runs.attrs['seeds'])}; rerun `{VERDICTS.command}`."), ""]
        md += verdicts_table(doc) + [""]
        reasons = sorted({r["reason"] for r in doc.values() if r.get("reason")})
        md += [f"NOT DECIDED: {'; '.join(reasons)}. The column beside it is the decision rule applied to the seeds "
               "so far, which decides nothing." if reasons else "", ""]
        md += survival_lines(("H1", "H2", "H4"))
    except MissingResults as e:
        md += [f"*{e}*", ""]
    if runs is None:
        return md, [plain(fig_module(n).TITLE) + ": results missing" for n in FIGURES]
    md += stopping_markdown(runs)
    md += [f"### Plain answer{'' if decided else ' so far'}", ""] + step_size_first() + [plain_answer(runs), ""]
    md += ["### GMC minus each baseline", "",
           ("Mean paired difference (GMC minus the baseline, seed by seed, whole seeds) "
           "with its 95% percentile-bootstrap "
           f"interval; a baseline is stable in a cell when at least {STABLE_FRACTION:.0%} of its seeds are."
           + (" Rows marked (exploratory): the 2025-2026 corrections (`python -m studies.run --grid peers_2025`, "
              "`results/llm/study_2025`), run after the study from its warm starts, prompts and sampling keys and "
              "paired with its GMC by seed; they are not part of the pre-registered families H1-H4."
              if exploratory_estimators(runs) else "")), ""]
    md += differences_markdown(runs) + [""]
    md += ["### THEORY §3's mass-bias bound at LLM scale", "",
           ("Per update of every complete run: the realised mass bias against its bound at the batch's plug-in chi^2 "
           "(`grids.bound_table.bound_table`; a ratio above 1 is a failure)."), ""]
    try:
        md += bound_markdown(bound_table(STUDY.require())) + [""]
        md += [("The same updates against the one table's tight form "
                "(`bounds.mass_bound(..., form=\"tight\")`: Scarf's "
                "bound for GMC and TIC-trunc, unchanged for TIC-mask and stale), recomputed from the logged chi^2 and "
                "mu_4 (`grids.bound_table.bound_table(..., form=\"tight\")`); "
                "the logged column above is Theorem 2's form "
                "(`llm_runs.theory.BOUND_FORM`)."), ""]
        md += bound_markdown(bound_table(STUDY.require(), form="tight")) + [""]
    except ValueError as e:
        md += [f"*{e}*", ""]
    lines, missing = figure_sections(FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing
