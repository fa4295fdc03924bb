"""The report's headline section "Why GMC fails here": what the staleness study's own data say
against its first explanation, the mechanism study's interventions (docs/PREREGISTRATION-MECHANISM.md)
and their verdicts so far, and its figures (F20, F21). Renders only: every number is computed by
:mod:`studies.mechanism.analysis`."""
from __future__ import annotations

from pathlib import Path

from figures import style
from figures.mdhtml import interval, plain
from grids.folders import MECHANISM, STUDY
from schema.results import MissingResults
from studies.mechanism.figures import FIGURES


def _facts_lines(study: Path) -> list[str]:
    from studies.mechanism.analysis import study_facts

    f = study_facts(study)
    w64, w16, h4 = f["weight_max"][64], f["weight_max"][16], f["h4"]
    return [
        ("**The first explanation does not hold.** The staleness study explained GMC's collapse by one trajectory "
        "keeping a weight up to G(1+eps) = 9.6. Its own data contradict it:"), "",
        (f"* GMC's largest weight per update (median over updates 0-49) does not separate the runs: at d = 64 the "
        f"{w64['survived']} surviving runs had {w64['survived_median']:.2f}, the {w64['collapsed']} collapsed ones "
        f"{w64['collapsed_median']:.2f} (AUC for collapse {w64['auc']:.2f}: the survivors had the larger weights); "
        f"at d = 16 {w16['survived_median']:.2f} against {w16['collapsed_median']:.2f} (AUC {w16['auc']:.2f})."),
        (f"* H4's warning (rolling median of the plug-in trajectory chi^2 above 1) fired in {h4['fired']} of the "
        f"{h4['runs']} long-horizon runs at positive delay, at a median update {h4['median_update']:.0f}; "
        f"{h4['collapsed']} of them collapsed. It separates the horizons, not the runs: H4 is CONFIRMED as "
        "pre-registered (it precedes collapse) but it is not a warning a user can act on."),
        (f"* The plug-in chi^2 is <= 0 in {100 * f['gmc_d64_chi2_nonpositive']:.0f}% of GMC's updates at d = 64 (a "
        "heavy right tail the batch does not see)."), ""]


def _iv(d: dict | None) -> str:
    """:func:`figures.mdhtml.interval`, ``-`` for a missing or empty interval."""
    return interval(d) if d and d.get("n") else "-"


def _share(kn) -> str:
    return f"{kn[0]}/{kn[1]}" if kn else "-"


def verdict_numbers(h: str, r: dict) -> str:
    """The numbers a verdict of :func:`studies.mechanism.analysis.analyse` rests on, in one line."""
    if h == "M1":
        return (f"SGD: GMC stable {_share(r.get('gmc_stable'))}; GMC - TIC-mask {_iv(r.get('gmc_minus_tic_mask'))}; "
                f"GMC - IS {_iv(r.get('gmc_minus_is'))}")
    if h == "M2":
        return "; ".join(f"{plain(style.label(e))} stable with clip {v['clipped_stable']}/{v['n']} against "
                         f"{v['unclipped_stable']}/{v['n']} without (up {v['up']}, down {v['down']}, McNemar p = "
                         f"{v['p_mcnemar']:.3g})" for e, v in r.items() if isinstance(v, dict) and "p_mcnemar" in v)
    if h == "M2b":
        base = "; ".join(f"minus {plain(style.label(e))} {_iv(v)}" for e, v in r.get("baselines", {}).items())
        return (f"GMC stable {_share(r.get('gmc_stable'))}; {base or 'no stable baseline'} "
                f"(margin {r.get('margin', 0):g})")
    if h == "M3":
        return (f"GMC + cap stable {_share(r.get('gmc_cap_stable'))}; mass bias minus TIC-trunc "
                f"{_iv(r.get('mass_bias_gmc_cap_minus_tic_trunc'))}; kappa 2 (exploratory) stable "
                f"{_share(r.get('exploratory_kappa2_stable'))}")
    if h == "M4":
        return "; ".join(f"{plain(style.label(e))} stable {_share(r[e].get('stable'))}, minus TOPR {_iv(r[e])}"
                         for e in ("gmc_topr", "topr_gmc") if e in r) + f" (margin {r.get('margin', 0):g}, Holm)"
    if h == "M5":
        return f"larger model GMC - TOPR {_iv(r.get('gmc_minus_topr'))}; study model {_iv(r.get('study_model'))}"
    if h == "M6" and "hit_rate" in r:
        hit, fa = r["hit_rate"], r["false_alarm_rate"]
        return (f"{r['signal']} ({r['direction']}, threshold {r['threshold']:.3g}): hit rate {hit['k']}/{hit['n']} "
                f"[{hit['ci'][0]:.2f}, {hit['ci'][1]:.2f}], false alarms {fa['k']}/{fa['n']} [{fa['ci'][0]:.2f}, "
                f"{fa['ci'][1]:.2f}], Fisher one-sided p = {r['p_fisher']:.3g}")
    return r.get("reason", "")


def _verdict_lines(res: dict) -> list[str]:
    from studies.mechanism.analysis import HYPOTHESES

    out = ["| | hypothesis | verdict | on the seeds so far | numbers |", "|---|---|---|---|---|"]
    for h, r in res["hypotheses"].items():
        out.append(f"| {h} | {HYPOTHESES[h]} | **{r['verdict']}** | {r.get('interim_verdict', '')} | "
                   f"{verdict_numbers(h, r).replace('|', '/')} |")
    return out


def scale_lines(m5: dict) -> list[str]:
    """M5 at the larger model: its grid's whole seeds, stable shares and mean final pc at d = 64, and
    GMC - TOPR against the study model's."""
    ref = m5.get("study_model", {})
    out = [(f"**M5, the larger model** (2.07M parameters, `python -m studies.run --grid scale`, "
            f"`results/llm/scale/`, the addendum of the pre-registration): {len(m5.get('scale_seeds', []))} whole "
            f"seed(s) of 5.")]
    if not m5.get("scale_seeds"):
        return out + [f" {m5.get('reason', '')}", ""]
    d = m5["gmc_minus_topr"]
    shares = m5["stable_shares"]
    out[0] += (" At d = 64, stable seeds and mean final pc: "
               + "; ".join(f"{plain(style.label(e))} {k}/{n}, {m5['means'].get(e, float('nan')):.3f}"
                           for e, (k, n) in shares.items())
               + f". Delay 0 gains {m5['delay0_gain']:+.3f} from the warm start. GMC - TOPR: {d['mean']:+.3f} "
               f"[{d['low']:+.3f}, {d['high']:+.3f}] over {d['n']} paired seeds, "
               f"against {ref.get('mean', float('nan')):+.3f} "
               f"[{ref.get('low', float('nan')):+.3f}, {ref.get('high', float('nan')):+.3f}] at the study model "
               f"(n = {ref.get('n', 0)}). Verdict: **{m5['verdict']}**"
               + (f" (on the seeds so far: {m5['interim_verdict']})" if "interim_verdict" in m5 else "") + ".")
    return out + [""]


def _drift_cells(v) -> str:
    """A drift table row's :data:`grids.mechanism_table.DRIFT_COLUMNS` cells ("-" for NaN)."""
    from grids.mechanism_table import DRIFT_COLUMNS

    return " | ".join(f"{v[c]:.3g}" if v[c] == v[c] else "-" for c in DRIFT_COLUMNS)


def scale_drift_lines(sd: dict) -> list[str]:
    """The exploratory probe at the larger model: its replay of the scale runs and its drift table."""

    if not sd:
        return []
    out = [(f"*Exploratory, not pre-registered* (`--grid scale_mech`, `results/llm/scale_mech/`): the larger "
            f"model's gmc and topr runs at d = 64 again with the mechanism diagnostics on, {sd['runs']} complete. "
            f"Against the scale grid's runs of the same names, every shared column of every update: "
            f"**{sd['replay']}** ({len(sd['replayed'])} runs; the diagnostics never change the update)."), ""]
    if sd["drift"]:
        out += [("| estimator | updates | stable / runs | median abs log w | chi^2 | KL per token | step norm | "
                 "cos with IS | heaviest share | groups capped |"), "|---|---|---|---|---|---|---|---|---|---|"]
        for label, rows in ((f"first {sd.get('first_updates', 20)}", sd.get("drift_first_updates", [])),
                            ("all", sd["drift"])):
            for v in rows:
                out.append(f"| {v['estimator']} | {label} | {v['stable']} / {v['runs']} | {_drift_cells(v)} |")
        out += ["", ("Medians over updates, then over runs; over all updates a collapsed run's medians are mostly "
                     "its state after the collapse, over the first ones they are before any collapse is seen.")]
        out.append("")
    return out


def scale_variant_lines(sv: dict, pick: str | None = None) -> list[str]:
    """The GMC variants at the larger model against TOPR (exploratory)."""
    if not sv:
        return []
    parts = []
    for v, r in sv.items():
        d = r.get("minus_topr") or {}
        parts.append(f"{plain(style.label(v))} {r['stable']}/{r['runs']} stable, mean {r['mean']:.3f}"
                     + (f", minus TOPR {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (n = {d['n']})"
                        if d else ""))
    lead = ("*Exploratory until M3/M4 pick one*" if pick is None else
            f"The variant M5's design adds (the best of M3/M4 by mean final pc at the study model, unclipped Adam, "
            f"d = 64: {plain(style.label(pick))}), and the other two, exploratory")
    return [(f"{lead} (`--grid scale_variants`, `results/llm/scale_variants/`): the "
             "mechanism study's GMC variants at the larger model, d = 64, paired by seed with the scale grid's "
             "TOPR: " + "; ".join(parts) + "."), ""]


def variant_pick(runs, res: dict) -> str | None:
    """M5's added variant: the GMC variant of M3/M4 with the highest mean final pc at d = 64 under
    unclipped Adam, once M3 and M4 are decided (None before)."""
    if any(res["hypotheses"][h]["verdict"] == "NOT DECIDED" for h in ("M3", "M4")):
        return None
    sel = runs[(runs["arm"] == "adam") & (runs["delay"] == 64) & runs["complete"]
               & runs["estimator"].isin(["gmc_cap", "gmc_topr", "topr_gmc"])]
    means = sel.groupby("estimator")["pc_final"].mean()
    return str(means.idxmax()) if len(means) else None


def drift_lines(runs, study: Path, root: Path) -> list[str]:
    """How far each arm's policy drifts from its behaviour policy at d = 64, and what its update does."""
    from grids.mechanism_table import drift_table

    tab = drift_table(runs, study, root)
    if tab.empty:
        return []
    out = [("**How far each optimiser's policy is from the one that sampled its batch** (d = 64; per run the median "
            "over its updates, then the median over runs; `grids.mechanism_table.drift_table`; "
            "the committed runs have no "
            "`mech/` columns). The delay is counted in updates; what an estimator faces is how far those updates "
            "moved the policy."), "",
           ("| arm | estimator | stable / runs | median abs log w | chi^2 | KL per token | step norm | cos with IS | "
            "heaviest share | groups capped |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for _, v in tab.iterrows():
        out.append(f"| {v['arm']} | {v['estimator']} | {v['stable']} / {v['runs']} | {_drift_cells(v)} |")
    return out + ["", ("Measured, not tested by intervention: SGD at the same delay keeps the policy an order of "
                       "magnitude closer to its behaviour policy (log-ratio, chi^2, KL) while gaining as much "
                       "held-out pc at delay 0 (the SGD pilot), so 64 updates are a far smaller off-policy gap under "
                       "SGD than under Adam, and M1 compares the estimators at that smaller gap: "
                       + ("the optimiser intervention alone could not separate the update rule from the size of the "
                          f"drift it causes. {answer}" if (answer := _drift_map_answer()) else
                          "the optimiser intervention does not separate the update rule from the size of the drift "
                          "it causes.")), ""]


def _drift_map_answer() -> str:
    """D1's answer (the drift map's pre-registered test of rule against drift) once it is decided; "" before."""
    from studies.report.verdict_text import d1_sentence, read_verdicts

    return d1_sentence(read_verdicts())


def mechanism_section(report_dir: Path, figures_out: Path, draw_missing: bool,
                      figure_sections) -> tuple[list[str], list[str]]:
    md = ["## Why GMC fails here (the mechanism study)", ""]
    missing: list[str] = []
    try:
        study = STUDY.require()
        md += _facts_lines(study)
    except (MissingResults, ValueError) as e:
        md += [f"*{e}*", ""]
        return md, missing
    md += [("**The interventions** (docs/PREREGISTRATION-MECHANISM.md, `python -m studies.run --grid mechanism`): "
           "the same long-horizon task, warm start, prompts and sampling keys as the staleness study, at d = 64, "
           "with (1) the optimiser changed (SGD with a fixed step, the theory's setting; Adam with the gradient norm "
           "clipped at 1; AdamW + decay 0.01 + clip 1, verl's actor default), (2) a per-trajectory cap after GMC "
           "(gmc_cap), and (3) GMC applied to one sign of the advantage and TOPR to the other (gmc_topr, topr_gmc)."),
           ""]
    try:
        root = MECHANISM.require()
    except MissingResults as e:
        return md + [f"*{e}*", ""], missing
    from grids.mechanism_table import load
    from studies.mechanism.analysis import analyse
    from studies.report.sections.replicate import survival_lines

    runs = load(study, root)
    seeds = runs.attrs["seeds"]
    n_done = int(((runs["source"] == "mechanism") & runs["complete"]).sum())
    md += [(f"**Progress: {len(seeds)} whole seed(s)** ({', '.join(map(str, seeds)) or 'none'}) of the 10 "
           f"planned; {n_done} intervention runs complete (besides the replays below). "
           "Below 6 whole seeds every verdict is NOT DECIDED "
           "and the pre-registered rule's outcome on the seeds so far is shown beside it, deciding nothing."), ""]
    if len(seeds) < 10:
        md += [("The grid continues (`python -m studies.run --grid mechanism --resume`) only on a machine that "
                "computes the warm start its runs record: the same settings give another warm start on a CPU that "
                "rounds differently (docs/LLM.md, \"The runs depend on the CPU\"), "
                "and the grid refuses to add runs there "
                "(`grids.check`), as it did on the AVX-512/AMX machine of 2026-12-02 (long warm start: "
                "held-out pc 0.010 there against 0.514)."), ""]
    if seeds:
        res = analyse(study, root)
        md += _verdict_lines(res) + [""]
        md += survival_lines(("M1", "M2b"))
        md += scale_lines(res["hypotheses"]["M5"])
        md += scale_drift_lines(res.get("scale_drift", {}))
        md += scale_variant_lines(res.get("scale_variants", {}), variant_pick(runs, res))
        md += [(f"Replay of the committed unclipped-Adam runs by the grid's own gmc and topr runs (every column, "
               f"every update): **{res['replay']['verdict']}** ({len(res['replay']['runs'])} runs)."), ""]
    md += drift_lines(runs, study, root)
    lines, missing = figure_sections(FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing
