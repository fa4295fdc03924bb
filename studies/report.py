"""``python -m studies.report``: ``results/REPORT.md`` and ``results/REPORT.html``.

The report puts theory and measurement side by side: a verdict per claim of the abstract
(derived at report time from the claim statuses of ``results/verify/claims.json`` and from
the figures' results, with the numbers), the claims table, every figure with a caption
computed from its results, the LLM track's table, and a list of disagreements. Nothing in
it is typed in: rerun it after new results and every number and verdict follows.

A figure whose PNG is missing is drawn from its results (plotting only; no simulation).
A figure whose results are missing is listed with the command that makes them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from claims.abstract import evidence_excerpt
from figures import style
from figures.mdhtml import interval as _iv
from figures.mdhtml import num as _num
from figures.mdhtml import plain, to_html
from figures.registry import (
    FIGURES,
    FRAME_FIGURES,
    GPU_FIGURE,
    MECHANISM_FIGURES,
    OPTIMIZER_FIGURES,
    STUDY_FIGURES,
    fig_module,
    figure_section,
    figure_sections,
)
from schema.io import check_output, check_output_folder, write_text
from schema.provenance import git_commit
from schema.results import (
    UNSTABLE_RULE,
    MissingResults,
    read_abstract,
    read_claims,
    results_root,
    verify_was_quick,
)

# ----------------------------------------------------------------------------------- sections


def claims_table(rows: list[dict]) -> list[str]:
    from claims.table import brief

    esc = lambda s: " ".join(str(s).split()).replace("|", "\\|").replace("*", "\\*")
    out = ["| id | claim | THEORY | expected | measured | status | s |", "|---:|---|---|---|---|---|---:|"]
    for r in sorted(rows, key=lambda r: r["id"]):
        status = r["status"] if r["status"] == "PASS" else f"**{r['status']}**"
        out.append(f"| {r['id']} | {esc(r.get('title', ''))} | {esc(r.get('theory_ref', ''))} | "
                   f"{esc(brief(r.get('expected')))} | {esc(brief(r.get('measured')))} | {status} | "
                   f"{float(r.get('seconds', float('nan'))):.2f} |")
    return out


def llm_table() -> list[str]:
    f7 = fig_module("f7_llm_final_vs_delay")
    tab = f7.table(f7.load())
    if not len(tab):
        return ["No complete LLM run."]
    delays = sorted(tab["delay"].unique())
    out = ["| estimator | " + " | ".join(f"d = {d:g}" for d in delays) + " |", "|---|" + "---:|" * len(delays)]
    for est, mode in f7.series(tab):
        cells = []
        for d in delays:
            r = tab[(tab["estimator"] == est) & (tab["mode"] == mode) & (tab["delay"] == d)]
            cells.append("-" if not len(r) else
                         f"{r['acc'].item():.3f} +- {r['se'].item():.3f} ({r['n_stable'].item()}/{r['n'].item()} stable)")
        out.append(f"| {style.label(est, mode)} | " + " | ".join(cells) + " |")
    return out


# ----------------------------------------------------------------------------------- staleness study


def verdict_numbers(key: str, r: dict) -> str:
    """The numbers behind one hypothesis' verdict, from its record in ``verdicts.json``."""
    if key == "H1":
        return f"GMC - TIC-mask at d = {r['delay']}, long: {_iv(r['gmc_minus_tic_mask'])}"
    if key == "H2":
        bs = "; ".join(f"{style.label(b)} {_iv(v)}, non-inferior {'yes' if v['noninferior'] else 'no'}"
                       f" (p = {_num(v['p_noninferior'], '.3g')}), worse {'yes' if v['worse'] else 'no'}"
                       for b, v in r["baselines"].items())
        ex = ", ".join(style.label(e) for e in r.get("unstable_excluded", [])) or "none"
        return (f"GMC - each stable baseline at d = {r['delay']}, long, margin {r['margin']:g}: {bs or 'no stable baseline'}; "
                f"unstable, left out: {ex}")
    if key == "H3":
        a, b = r["pair"]
        return (f"(GMC - TIC-mask) long minus short at d = {r['delay']}: {_iv(r['long_gap_minus_short_gap'])}"
                if (a, b) == ("gmc", "tic_mask") else f"gap {a} - {b}, long minus short: {_iv(r['long_gap_minus_short_gap'])}")
    if key == "H4":
        lo, hi = r["ci"]
        return (f"{r['warned_before_collapse']} of {r['collapsed_runs']} collapsed runs warned first "
                f"(`{r['diagnostic']}` rolling median > {r['threshold']:g}), 95% CI [{_num(lo)}, {_num(hi)}]; "
                f"false alarms {r['false_alarms']} of {r['non_collapsed_runs']} other runs. Not specific: it fires in "
                f"nearly every long-horizon run at positive delay (the report's 'Why GMC fails here' counts them), so it "
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
                   f"[{_num(a['low'], '+.3f')}, {_num(a['high'], '+.3f')}] | {'yes' if r['baseline_stable'] else '**no**'} |")
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
           "| whole seeds | H1 | GMC - TIC-mask (long, largest delay) | H2 | stable baselines | H3 | H4 | warned / collapsed |",
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
    out = [("| horizon | d | scheme | runs | updates | realised <= bound | median realised/bound | max realised/bound | "
           "bound 0 (plug-in chi^2 <= 0) |"), "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in tab.itertuples():
        out.append(f"| {r.horizon} | {r.delay} | {plain(style.label(r.scheme))} | {r.runs} | {r.updates} | {r.holds_frac:.1%} | "
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
                 f"seed{'' if k == 1 else 's'} (every estimator's mean on those seeds) rank among the stable estimators "
                 f"there as: {placed}. Unstable there: "
                 f"{', '.join(plain(style.label(e)) for e in x['unstable']) or 'none'}"
                 + (f"; no complete run there: {', '.join(plain(style.label(e)) for e in x['absent'])}"
                    if x["absent"] else "") + ".")
        masked = {e: z for e, z in x.get("masked_updates", {}).items() if z > 0}
        if masked:
            text += (" Of their updates there with a learning signal (some advantage not 0), the share whose gradient "
                     "is exactly zero (every token or sequence that carried one masked; the optimiser still steps, "
                     "so Adam moves the policy on its momentum alone): "
                     + ", ".join(f"{plain(style.label(e))} {z:.2f}" for e, z in sorted(masked.items(), key=lambda t: -t[1]))
                     + ".")
    return text


def study_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], list[str]]:
    """The report's first section: the staleness study's verdicts, tables, plain answer and figures.
    Returns (markdown lines, names of figures not drawn)."""
    from figures.f10_study_differences import load as load_runs
    from schema.results import STUDY, VERDICTS, read_json
    from studies.staleness.analysis import MIN_SEEDS, STABLE_FRACTION, bound_table, exploratory_estimators

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
            md += [(f"**verdicts.json is out of date**: it was made from seeds {vseeds}, the run folders now hold whole "
                   f"seeds {list(runs.attrs['seeds'])}; rerun `{VERDICTS.command}`."), ""]
        md += verdicts_table(doc) + [""]
        reasons = sorted({r["reason"] for r in doc.values() if r.get("reason")})
        md += [f"NOT DECIDED: {'; '.join(reasons)}. The column beside it is the decision rule applied to the seeds "
               "so far, which decides nothing." if reasons else "", ""]
    except MissingResults as e:
        md += [f"*{e}*", ""]
    if runs is None:
        return md, [plain(fig_module(n).TITLE) + ": results missing" for n in STUDY_FIGURES]
    md += stopping_markdown(runs)
    md += [f"### Plain answer{'' if decided else ' so far'}", "", plain_answer(runs), ""]
    md += ["### GMC minus each baseline", "",
           ("Mean paired difference (GMC minus the baseline, seed by seed, whole seeds) with its 95% percentile-bootstrap "
           f"interval; a baseline is stable in a cell when at least {STABLE_FRACTION:.0%} of its seeds are."
           + (" Rows marked (exploratory): the 2025-2026 corrections (`python -m llm_runs.study --grid peers_2025`, "
              "`results/llm/study_2025`), run after the study from its warm starts, prompts and sampling keys and "
              "paired with its GMC by seed; they are not part of the pre-registered families H1-H4."
              if exploratory_estimators(runs) else "")), ""]
    md += differences_markdown(runs) + [""]
    md += ["### THEORY §3's mass-bias bound at LLM scale", "",
           ("Per update of every complete run: the realised mass bias against its bound at the batch's plug-in chi^2 "
           "(`llm_runs.run_table.bound_table`; a ratio above 1 is a failure)."), ""]
    try:
        md += bound_markdown(bound_table(STUDY.require())) + [""]
        md += [("The same updates against the one table's tight form (`bounds.mass_bound(..., form=\"tight\")`: Scarf's "
                "bound for GMC and TIC-trunc, unchanged for TIC-mask and stale), recomputed from the logged chi^2 and "
                "mu_4 (`llm_runs.run_table.bound_table(..., form=\"tight\")`); the logged column above is Theorem 2's form "
                "(`llm_runs.theory.BOUND_FORM`)."), ""]
        md += bound_markdown(bound_table(STUDY.require(), form="tight")) + [""]
    except ValueError as e:
        md += [f"*{e}*", ""]
    lines, missing = figure_sections(STUDY_FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing


def simulator_ordering_paragraph(df) -> str:
    """Whether the exact simulators reproduce the LLM study's ordering (final J of GMC below TOPR's and
    TIC-trunc's at the longest horizon and largest delay), optimiser by optimiser, by rule from the
    paired intervals of :func:`claims.optimizers.ordering_table`; and claim 17's ordering beside it."""
    import numpy as np

    from claims.optimizers import ordering_table

    tab = ordering_table(df)
    H, d = int(tab["H"].max()), int(tab["d"].iloc[0])
    long = tab[tab["H"] == H]
    names = {"sgd": "SGD", "adam": "Adam", "adam_clip": "Adam + clip", "adamw_clip": "AdamW + clip"}

    def iv(r, key, fmt):
        return f"{getattr(r, key + '_mean'):{fmt}} [{getattr(r, key + '_low'):{fmt}}, {getattr(r, key + '_high'):{fmt}}]"

    repro = [names.get(r.optimizer, r.optimizer) for r in long.itertuples() if r.topr_J_high < 0 and r.trunc_J_high < 0]
    cells = "; ".join(f"{names.get(r.optimizer, r.optimizer)}: GMC - TOPR {iv(r, 'topr_J', '+.3f')}, GMC - TIC-trunc "
                      f"{iv(r, 'trunc_J', '+.3f')}, collapsed GMC {r.collapse_gmc:.0%} / TOPR {r.collapse_topr:.0%} / "
                      f"TIC-trunc {r.collapse_tic_trunc:.0%}" for r in long.itertuples())
    worse = [f"{names.get(r.optimizer, r.optimizer)} H={r.H}" for r in tab.itertuples() if r.mask_low > 0]
    verdict = (f"The exact simulators reproduce the *direction* of the LLM's ordering under {', '.join(repro)}"
               if repro else "The exact simulators do **not** reproduce the LLM's ordering under any optimiser")
    rep = long[long["optimizer"].map(names).isin(repro)]
    size = float(np.nanmax(np.abs(rep[["topr_J_mean", "trunc_J_mean"]].to_numpy()))) if len(rep) else float("nan")
    coll = float(np.nanmax(long[["collapse_gmc", "collapse_topr", "collapse_tic_trunc", "collapse_tic_mask"]]
                           .to_numpy())) if len(long) else float("nan")
    cell = df[(df["H"] == H) & (df["d"] == d)]
    means = cell.groupby(["optimizer", "scheme"])["final_J"].mean()
    shown = [s for s in ("gmc", "gmc_cap", "gmc_topr", "is", "topr", "tic_trunc", "tic_mask") if s in set(cell["scheme"])]
    finals = "; ".join(f"{names.get(o, o)}: " + ", ".join(f"{plain(style.label(s))} {means[(o, s)]:.4f}" for s in shown)
                       for o in [o for o in names if o in set(cell["optimizer"])])
    return (f"{verdict}: at H = {H} and d = {d}, GMC's final J is below both TOPR's and TIC-trunc's (paired 95% "
            f"t-intervals below 0) under {', '.join(repro) or 'no optimiser'}; but the largest difference there is "
            f"{size:.4f} in J, and " + ("no run of GMC, TOPR, TIC-trunc or TIC-mask collapses" if coll == 0 else
                                         f"up to {coll:.0%} of one of these schemes' runs collapse")
            + f" (the LLM study's differences and collapses are in its section above). Per optimiser (J(theta_0) = {cell['J0'].iloc[0]:.3f}): {cells}. Mean final J "
            f"there: {finals}. Claim 17's ordering (GMC's average ||grad J||^2 at most TIC-mask's) "
            + (f"fails (GMC significantly worse) in {', '.join(worse)}." if worse else
               "is contradicted in no (optimiser, horizon) cell.")
            + " The task (one reward for all H tokens right) shares the LLM's product-of-ratios chi^2 growth in H, "
            "but its policy is H independent token softmaxes with no shared parameters"
            + ("; no run collapses, so the trajectory weights, the horizon and the optimiser alone do not make GMC "
               "collapse in this model." if coll == 0 else f"; up to {coll:.0%} of a scheme's runs collapse here."))


def optimizer_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], list[str]]:
    """The report's section on the exact simulators across optimisers and horizons (F15, F16) and the
    paragraph of :func:`simulator_ordering_paragraph`. Returns (markdown lines, figures not drawn)."""
    from claims.optimizers import SOURCE
    from schema.results import read_sim

    md = ["## Exact simulators across optimisers and horizons (against the LLM's ordering)", "",
          ("`python -m simulators.sweep async_optimizers` (E2 long horizons, every gradient exact) and "
           "`python -m simulators.sweep second_moment_vs_chi2`; claim 19 in the claims table above."), ""]
    try:
        md += [simulator_ordering_paragraph(read_sim(SOURCE)), ""]
    except MissingResults as e:
        md += [f"*{e}*", ""]
    lines, missing = figure_sections(OPTIMIZER_FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing


def frame_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], list[str], list[str]]:
    """Theory and experiment in one frame (F22, F23; THEORY §8): the shared-parameter model's answer in
    one sentence, the frame table, and the cells where theory and LLM disagree. Returns (markdown lines,
    figures not drawn, disagreement lines for "Disagreements and gaps")."""
    f22, f23 = fig_module("f22_shared_collapse"), fig_module("f23_theory_frame")
    md = ["## Theory and experiment in one frame (THEORY §8)", "",
          ("`python -m simulators.sweep shared_collapse` (the shared-parameter exact model), "
           "`python -m simulators.sweep async_optimizers` (the factorised E2) and the LLM's study and mechanism "
           "runs; claims 20-22 in the claims table above."), ""]
    try:
        md += ["**Shared-parameter model.** " + plain(f22.pattern_sentence(f22.load())), ""]
    except MissingResults as e:
        md += [f"*{e}*", ""]
    dis = []
    try:
        tab = f23.load()
        md += f23.markdown(tab) + [""]
        dis = f23.disagreements(tab)
    except MissingResults as e:
        md += [f"*{e}*", ""]
    lines, missing = figure_sections(FRAME_FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing, dis


# ----------------------------------------------------------------------------------- Qwen3-0.6B on one GPU

def gpu_study_section(report_dir: Path, figures_out: Path, draw_missing: bool) -> list[str]:
    """The Qwen3-0.6B study (``python -m llm_runs.gpu_study``), beside the CPU study's figures: its row of the
    plain answer (:func:`plain_answer`, the same rule) and F14; "not yet run on a GPU" without its folder."""
    from schema.results import GPU_STUDY, read_json

    md = ["### Qwen3-0.6B on one GPU", ""]
    root = GPU_STUDY.find()
    if root is None:
        return md + [(f"Not yet run on a GPU: `{GPU_STUDY.command}` (one CUDA GPU, at most 8 minutes) writes "
                     "`results/llm/gpu_study/`, and this section then shows its plain answer and F14."), ""]
    runs = fig_module(GPU_FIGURE).load()
    record = read_json(root / "gpu_study.json") if (root / "gpu_study.json").is_file() else {}
    ws, plan = record.get("warm_start", {}), record.get("plan", {})
    if ws:
        md += [(f"Warm start: {ws.get('steps')} supervised steps to held-out pc {_num(ws.get('heldout_pc'))} (target "
                f"{ws.get('target_pc')}, {'reached' if ws.get('reached') else 'not reached'}); completions of "
                f"{ws.get('completion_tokens')} Qwen3 tokens. GRPO: {plan.get('steps')} updates at lr "
                f"{plan.get('lr')}, "
                f"seeds run {[w['seed'] for w in record.get('waves', [])]}, peak GPU memory "
                f"{_num(record.get('peak_gpu_gb'), '.1f')} GB. Source: "
                f"`{os.path.relpath(root, results_root().parent)}/gpu_study.json`."), ""]
    md += ["| model | plain answer |", "|---|---|",
           (f"| {fig_module(GPU_FIGURE).model_label(runs)}, one GPU | "
           f"{plain_answer(runs).replace('|', '/')} |"), ""]
    lines, _ = figure_section(GPU_FIGURE, report_dir, figures_out, draw_missing)
    return md + lines + [""]


# --------------------------------------------------------------------------- the 2025-2026 peers against GMC (F9)

NEWCOMERS = ("seq_geo_mask", "vespo", "icepop", "sapo", "dppo_tv")
"""The corrections verl, TRL, AReaL and prime-rl added in 2025-2026 (F9 measures them beside GMC)."""


def newcomers_sentence(df) -> str:
    """Where each newcomer sits against GMC at the largest delay of each environment of F9's
    table: who dominates whom in (bias, second moment), or the trade, and class membership."""
    from claims.measures import frontier

    parts = []
    for env, d in df.groupby("env"):
        dd = d[(d["Delta"] == d["Delta"].max()) & (d["batch_groups"] == 1)]
        if "gmc" not in set(dd["scheme"]):
            continue
        g = dd[dd["scheme"] == "gmc"].iloc[0]
        on_front = set(frontier(dd)["scheme"])
        said = []
        for name in (n for n in NEWCOMERS if n in set(dd["scheme"])):
            r = dd[dd["scheme"] == name].iloc[0]
            b, m, gb, gm = r["bias_norm"], r["second_moment"], g["bias_norm"], g["second_moment"]
            if m == 0:
                rel = "never moves (second moment 0: every trajectory of every group rejected or A = 0)"
            elif b <= gb and m <= gm and (b < gb or m < gm):
                rel = "dominates GMC"
            elif gb <= b and gm <= m and (gb < b or gm < m):
                rel = "is dominated by GMC"
            else:
                rel = ("trades a lower second moment for a higher bias" if m < gm
                       else "trades a lower bias for a higher second moment")
            cls = ("token-level" if r["level"] != "trajectory" else
                   f"{'in' if bool(r['in_class']) else 'outside'} C_eps, largest group mass {r['sup_mass']:.3g}")
            said.append(f"{name} ({cls}) {rel} (bias {b:.3g} vs {gb:.3g}, second moment {m:.3g} vs {gm:.3g}; "
                        f"{'on' if name in on_front else 'off'} the frontier)")
        if said:
            parts.append(f"{'E1' if env == 'bandit' else 'E2'} at Delta = {dd['Delta'].iloc[0]:g}: " + "; ".join(said))
    return ("The 2025-2026 corrections against GMC (F9's table, exact enumeration, one group per batch): "
            + ". ".join(parts) + ".") if parts else ""


def _git_commit() -> str:
    commit = git_commit()["git_commit"]
    return commit[:7] if commit else "unknown"


def build(report_dir: Path, figures_out: Path, draw_missing: bool = True) -> str:
    try:
        rows = read_claims()
        claims = {r["id"]: r for r in rows}
    except MissingResults as e:
        rows, claims, claims_missing = [], None, str(e)
    quick_verify = verify_was_quick() if claims is not None else None
    md = ["# GMC-GRPO toolkit: theory against measurement", "",
          (f"Generated by `python -m studies.report` on {time.strftime('%Y-%m-%d %H:%M')} at commit {_git_commit()}. "
          "Every number and verdict below is computed from the results files when the report is made. The bounds "
          "are THEORY.md's reconstruction ([R]) of the paper (only its abstract is public), not the paper's text."), ""]

    from studies.mechanism.section import mechanism_section

    mech_md, missing = mechanism_section(report_dir, figures_out, draw_missing, figure_sections)
    md += mech_md
    study_md, study_missing = study_section(report_dir, figures_out, draw_missing)
    md += study_md
    missing += study_missing
    md += gpu_study_section(report_dir, figures_out, draw_missing)
    from studies.drift.section import progress_section

    md += progress_section()

    md += ["## Verdicts on the abstract's claims", ""]
    disagreements = []
    try:
        verdicts = read_abstract()["claims"]
        md += ["From `results/verify/abstract.json` (made by `python -m claims.abstract`).", ""]
    except MissingResults as e:
        verdicts = []
        md += [f"*{e}*", ""]
    for v in verdicts:
        word = v["verdict"]
        md += [f"{v['k']}. *{v['text']}*", "", f"**Verdict: {word}.** {plain(v['evidence'])}", ""]
        if not word.startswith("confirmed"):
            disagreements.append(f"- Abstract claim {v['k']} ({word}): {v['text']}")

    md += ["## Claims of THEORY.md §5 (`make verify-bounds`)", ""]
    if claims is None:
        md += [f"*{claims_missing}*", ""]
    else:
        counts = {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}
        md += ["From `results/verify/claims.json`" + (" (made with `--quick`)" if quick_verify else "") + ": "
               + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(rows)} claims. Evidence for each "
               "claim is in `results/verify/claims.md`.", ""]
        md += claims_table(rows) + [""]
        linked = {i for v in verdicts for i in v["claim_ids"]}
        for r in sorted(rows, key=lambda r: r["id"]):
            if r["status"] != "PASS":
                where = "" if r["id"] in linked else " (a supporting claim, not one of the abstract's)"
                disagreements.append(f"- Claim {r['id']} {r['status']}{where}: {r['title']}. Evidence: {evidence_excerpt(r)}")

    opt_md, opt_missing = optimizer_section(report_dir, figures_out, draw_missing)
    md += opt_md
    missing += opt_missing
    frame_md, frame_missing, frame_dis = frame_section(report_dir, figures_out, draw_missing)
    md += frame_md
    missing += frame_missing
    if frame_dis:
        disagreements += [("- Theory against the LLM (F23), where an exact model's prediction and the LLM's "
                           "outcome differ:")] + ["  " + line for line in frame_dis]

    md += ["## Figures", ""]
    for name in (n for n in FIGURES if n not in STUDY_FIGURES and n not in MECHANISM_FIGURES
                 and n not in OPTIMIZER_FIGURES and n not in FRAME_FIGURES):
        lines, miss = figure_section(name, report_dir, figures_out, draw_missing)
        md += lines + [""]
        if name == "f9_peers_frontier" and not miss:  # the newcomers against GMC, one sentence
            md += [plain(newcomers_sentence(fig_module(name).load())), ""]
        if miss:
            missing.append(miss)

    md += ["## LLM track: final held-out accuracy", ""]
    try:
        md += [("Seed mean +- standard error over seeds of the final held-out accuracy, complete runs only; "
               f"(stable/n) counts runs by the rule: {UNSTABLE_RULE}."), ""]
        md += llm_table() + [""]
    except MissingResults as e:
        md += [f"*{e}*", ""]

    md += ["## Disagreements and gaps", ""]
    md += (disagreements or ["- None: every abstract claim is confirmed and every §5 claim passes."]) + [""]
    if missing:
        md += ["Figures not drawn (results missing): " + "; ".join(missing) + ".", ""]
    return "\n".join(md)


def write_report(out_dir: Path | None = None, figures_out: Path | None = None,
                 draw_missing: bool = True) -> tuple[Path, Path]:
    out_dir = Path(out_dir) if out_dir is not None else results_root()
    figures_out = Path(figures_out) if figures_out is not None else Path(__file__).resolve().parent / "out"
    md_path, html_path = out_dir / "REPORT.md", out_dir / "REPORT.html"
    for path in (md_path, html_path):  # before the work: a user's file is never replaced; writable now
        check_output(path, legacy=_is_report_text)
    check_output_folder(figures_out)
    md = build(out_dir, figures_out, draw_missing)
    write_text(md_path, md + "\n")
    write_text(html_path, to_html(md, REPORT_TITLE))
    return md_path, html_path


REPORT_TITLE = "GMC-GRPO toolkit report"


def _is_report_text(text: str) -> bool:
    """True for a REPORT.md or REPORT.html that :func:`write_report` wrote."""
    return text.startswith("# GMC-GRPO toolkit") or f"<title>{REPORT_TITLE}</title>" in text[:1000]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.report", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for REPORT.md/.html (default results/)")
    p.add_argument("--figures", type=Path, default=None, help="folder of the figure PNGs (default figures/out/)")
    p.add_argument("--no-draw", action="store_true", help="do not draw missing or out-of-date figures")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        md, html = write_report(a.out, a.figures, draw_missing=not a.no_draw)
    except (ValueError, OSError) as exc:
        print(f"python -m studies.report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {md} and {html} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
