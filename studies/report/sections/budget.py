"""The report's budget section: B1-B5 as :mod:`studies.budget.analysis` decides them from the runs present (or how
far each is from being decided, with interim numbers), the grid's cells, the frozen pairs' table and its checks, the
grid's cost estimated and measured, and where the data so far stand beside two published claims on batch
composition. Every number is computed from the results when the report is made."""
from __future__ import annotations

from pathlib import Path

from studies.budget import progress, rules
from studies.budget.grids import BUDGET_ESTIMATORS, CAP_KAPPAS, MECHANISM_CELLS, SEEDS

HYPOTHESES = {
    "B1": "at fixed B, GMC's learned share rises with G (d = 64)",
    "B2": f"at fixed N, GMC's learned share rises with B while TOPR's is flat (within +-{rules.FLAT:g} per doubling)",
    "B3": "gmc_cap (kappa " + " or ".join(f"{k:g}" for k in CAP_KAPPAS) + ") learns where gmc does not, at "
          + ", ".join(f"{B} x {G}" for B, G in MECHANISM_CELLS),
    "B4": f"at d = 0 the final held-out pc depends on N only (slope on log2 G within +-{rules.MARGIN:g})",
    "B5": "the frozen pairs' MSE ordering of the splits predicts the grid's ordering",
}
ISOCOMPUTE = "IsoCompute (arXiv 2603.12151)"
CBS = "\"Critical Batch Size for LLM Policy Optimization\" (ICML 2026 workshop)"


def _f(x, fmt=".3g") -> str:
    from studies.report.fmt import num

    return num(x, "{:" + fmt + "}")


def _ci(c, d: int | None = None) -> str:
    return f"[{_f(c[0]) if d is None else _r(c[0], d)}, {_f(c[1]) if d is None else _r(c[1], d)}]"


def _r(x, d: int = 2) -> str:
    """A slope or difference to ``d`` decimals (shares: 2, a final pc: 3), a rounding residue shown as 0."""
    from studies.report.fmt import num

    try:
        x = round(float(x), d) + 0.0
    except (TypeError, ValueError):
        return "n/a"
    return num(x, "{:." + str(d) + "f}")


def _of(kn) -> str:
    return f"{kn[0]} of {kn[1]}"


def decided_numbers(h: str, r: dict) -> str:
    """A decided hypothesis' numbers from its rule's record."""
    if h == "B1":
        return f"slope of GMC's learned share on log2 G within B {_r(r['slope'])} {_ci(r['ci'], 2)}, p = {_f(r['p'])}"
    if h == "B2":
        return (f"slope on log2 B within N: GMC {_r(r['slope_gmc'])} {_ci(r['ci_gmc'], 2)}, TOPR "
                f"{_r(r['slope_topr'])} {_ci(r['ci_topr'], 2)}; p = {_f(r['p'])}")
    if h == "B3":
        per = "; ".join(f"kappa {k}: gmc_cap - gmc {_r(v['difference'])} {_ci(v['ci'], 2)}" for k, v in
                        r["per_kappa"].items())
        test = "" if r["testable"] else " (not testable: gmc learned there)"
        return f"{per}; gmc's learned share there {_f(r['gmc_share'], '.2f')}{test}; p = {_f(r['p'])}"
    if h == "B4":
        return (f"slope of the d = 0 final pc on log2 G within N {_r(r['slope'], 3)} {_ci(r['ci'], 3)}, TOST "
                f"p = {_f(r['p'])}")
    return f"rho {_f(r['rho'])} over {r['strata']} strata, permutation p = {_f(r['p'])}"


def interim_numbers(h: str, x: dict) -> str:
    """What a hypothesis' statistic reads on the runs finished so far (no test: cells lack seeds)."""
    def sl(v, d=2):
        return "too few cells run" if v is None else _r(v, d)

    if h == "B1":
        return f"GMC's learned-share slope on log2 G within B {sl(x['slope'])}"
    if h == "B2":
        return f"slopes on log2 B within N: GMC {sl(x['slope_gmc'])}, TOPR {sl(x['slope_topr'])}"
    if h == "B3":
        caps = ", ".join(f"kappa {k:g} {_of(v) if v[1] else 'none finished'}" for k, v in x["cap"].items())
        return f"learned: gmc {_of(x['gmc'])}, gmc_cap {caps}"
    if h == "B4":
        return f"slope of the d = 0 final pc on log2 G within N {sl(x['slope'], 3)}"
    rho = x["rho"]
    if rho is None:
        return "needs the pair table"
    return "no stratum with two splits run yet" if rho[1] == 0 else f"rho {_r(rho[0])} over {rho[1]} strata"


def verdict_lines(doc: dict, df, inter: dict) -> list[str]:
    out = ["| | hypothesis | verdict | numbers |", "|---|---|---|---|"]
    for h, text in HYPOTHESES.items():
        v = doc["verdicts"][h]
        if v == "not yet run":
            k, n = progress.hypothesis_runs(df, h)
            extra = "" if doc["missing"][h] != "the pair table" else "; the pair table is missing"
            v = f"not yet run: {k} of {n} runs of its cells finished{extra}"
            nums = f"*interim*: {interim_numbers(h, inter[h])}"
        else:
            nums = decided_numbers(h, doc["records"][h])
        out.append(f"| {h} | {text} | {v} | {nums} |")
    return out


def cell_lines(doc: dict) -> list[str]:
    """The Adam + clip cells: learned / finished (held) per correction at d = 64, and the d = 0 control."""
    from studies.budget.grids import LEVEL

    cells = {(c["estimator"], c["delay"], c["B"], c["G"]): c for c in doc["cells"]
             if c["level"] == LEVEL and not c["kappa"]}

    def one(key):
        c = cells.get(key)
        if c is None or not c["finished"]:
            return "-"
        return f"{c['learned']}/{c['finished']} ({c['held']})"
    head = "| B x G | N | " + " | ".join(BUDGET_ESTIMATORS) + " | d = 0 control | d = 0 mean final pc |"
    out = [head, "|---" * (len(BUDGET_ESTIMATORS) + 4) + "|"]
    for B, G in progress.plane_splits():
        d0 = cells.get(("gmc", 0, B, G))
        pc = _f(d0["pc_final"], ".3f") if d0 and d0["finished"] else "-"
        out.append(f"| {B} x {G} | {B * G} | " + " | ".join(one((e, progress.DELAY, B, G)) for e in BUDGET_ESTIMATORS)
                   + f" | {one(('gmc', 0, B, G))} | {pc} |")
    return out


def pair_lines(s: dict) -> list[str]:
    """The frozen pairs: their checks, the pair whose target cannot be measured, and the N = 128 table."""
    if s["missing"]:
        files = ", ".join(f"`{m}`" for m in s["missing"])
        return [(f"The frozen-pair table is missing ({files} does not exist): make it with "
                 f"`{progress.PAIRS_COMMAND}`; B5 stays not yet run without it."), ""]
    pairs, ok = s["pairs"], s["passed"]
    names = sorted({k for p in pairs.values() for k in p["checks"]})
    per_check = ", ".join(f"{k} {sum(bool(p['checks'].get(k)) for p in pairs.values())}" for k in names)
    text = [(f"Frozen pairs measured: {len(pairs)}; {len(ok)} passed every validity check ({', '.join(ok) or 'none'}; "
             f"pairs passing each check: {per_check}).")]
    from studies.budget.pairs_checks import MC_Z

    mc = [c for n in ok for c in pairs[n]["direct_mc"]]
    zs = []
    for e, G in dict.fromkeys((c["estimator"], c["G"]) for c in mc):
        z = [c["z"] for c in mc if (c["estimator"], c["G"]) == (e, G)]
        zs.append(f"{e} at G = {G}, z from {_f(min(z))} to {_f(max(z))}, below the pool's value in "
                  f"{sum(v < 0 for v in z)} of {len(z)} pairs")
    if zs:
        text.append(f"The direct Monte Carlo of one group's second moment against the pool's (agreement: |z| <= "
                    f"{MC_Z:g}): " + "; ".join(zs) + ".")
    for n, p in pairs.items():
        if p["target_zero"]:
            text.append(f"Pair {n} ({p['run']}, KL {_f(p['kl'])} per token, ESS fraction {_f(p['ess'], '.2g')}): every "
                        "on-policy group has equal rewards, so grad J's estimate is 0 and no term relative to it "
                        "exists (its relative terms NaN, no check run); it is left out of B5, as in the group-size "
                        "table.")
        elif p["passed"] is False:
            failed = ", ".join(k for k, v in p["checks"].items() if v is False)
            text.append(f"Pair {n} FAILED its checks ({failed}): left out of B5.")
    small, large = s["small"], s["large"]
    splits_ = progress.plane_splits(progress.PLANE_N)
    head = ("| correction | median rel. MSE at " + " / ".join(f"{B} x {G}" for B, G in splits_)
            + f" | MSE({small[0]}x{small[1]}) / MSE({large[0]}x{large[1]}): median [min, max] | between-prompt share "
            f"of the variance at {small[0]} x {small[1]} / {large[0]} x {large[1]} | S_w(G = 32) / S_w(G = 4) |")
    out = [" ".join(text), "", head, "|---|---|---|---|---|"]
    for e, r in s["per"].items():
        med = " / ".join(_f(r["median"].get(c)) for c in splits_)
        ratio = f"{_f(r['ratio'][0])} [{_f(r['ratio'][1])}, {_f(r['ratio'][2])}]" if r["ratio"] else "n/a"
        between = " / ".join(_f(r["between"][c], ".2f") for c in (small, large))
        out.append(f"| {e} | {med} | {ratio} | {between} | {_f(r['sw_ratio'])} |")
    note = (f"(N = {progress.PLANE_N}; medians over the {len(ok)} pairs that passed; rel. MSE = E||g - grad J||^2 / "
            "||grad J||^2, THEORY §9's bias, between-prompt and within-group terms.)")
    return [*out, "", note, ""]


def cost_line(c: dict, pairs_cost: dict | None) -> str:
    h = 3600.0
    line = (f"Cost: the pre-registration estimated {c['estimated_s'] / h:.1f} CPU-hours for the budget grid's "
            f"{c['runs']} runs (`studies.budget.plan.run_seconds`, linear in N through the group-size grids' medians). "
            f"{c['finished']} have finished; ")
    if c["timed"]:
        line += (f"the {c['timed']} whose summaries record a wall time took {c['measured_s'] / h:.1f} h in all "
                 f"against {c['estimated_timed_s'] / h:.1f} h estimated for them "
                 f"({c['measured_s'] / c['estimated_timed_s']:.2f} times; a wall time also counts time a run shared "
                 "its core).")
    else:
        line += "none records a wall time yet."
    if pairs_cost:
        line += (f" The frozen-pair table took {pairs_cost.get('wall', float('nan')) / h:.1f} h wall, "
                 f"{pairs_cost.get('cpu', float('nan')) / h:.1f} h CPU.")
    return line


def stability_reading(doc: dict, b2: dict) -> str:
    """B2's verdict, or what its interim slopes say so far."""
    v = doc["verdicts"]["B2"]
    if v != "not yet run":
        return f"B2 is {v}"
    g, t = b2["slope_gmc"], b2["slope_topr"]
    if g is None or t is None:
        return "too few cells run to say"
    return (f"so far GMC's learned share {'rises' if g > 0 else 'does not rise'} with B at fixed N and TOPR's slope "
            f"is {'within' if abs(t) <= rules.FLAT else 'outside'} +-{rules.FLAT:g} (unequal seeds per cell: no test)")


def performance_reading(doc: dict, b4: dict) -> str:
    v = doc["verdicts"]["B4"]
    if v != "not yet run":
        return f"B4 is {v}"
    if b4["slope"] is None:
        return "too few cells run to say"
    big = abs(b4["slope"]) > rules.MARGIN
    return (f"so far the slope's size is {'above' if big else 'within'} the margin {rules.MARGIN:g}: the split "
            f"{'appears to drive' if big else 'does not appear to drive'} final pc without staleness (no test yet)")


def _state(doc: dict, h: str, inter_text: str) -> str:
    v = doc["verdicts"][h]
    return f"{h} {v}" if v != "not yet run" else f"{h} not yet run (interim: {inter_text})"


def placement_lines(doc: dict, df, inter: dict, s: dict) -> list[str]:
    """Point by point beside IsoCompute and the critical-batch-size paper: what the data show so far."""
    from stats import newcombe
    from studies.budget.grids import LEVEL, SGD_LEVEL

    b2, b4 = inter["B2"], inter["B4"]
    out = [("**Beside published claims** (what the data show so far; the B verdicts decide, the rest is "
            "descriptive):"), ""]
    out.append(f"- {ISOCOMPUTE}: prompts per batch are \"a stability constraint rather than a performance driver\". "
               f"Stability: {_state(doc, 'B2', interim_numbers('B2', b2))}; GMC's held share per doubling of B at "
               f"fixed N so far {_r(b2['held_gmc'])}; {stability_reading(doc, b2)}. Performance without staleness: "
               f"{_state(doc, 'B4', interim_numbers('B4', b4))}; {performance_reading(doc, b4)}.")
    if s.get("per"):
        per = s["per"]
        sm, lg = s["small"], s["large"]
        within = ", ".join(f"{e} {_f(1 - per[e]['between'][lg], '.2f')} at {lg[0]} x {lg[1]} and "
                           f"{_f(1 - per[e]['between'][sm], '.2f')} at {sm[0]} x {sm[1]}"
                           for e in BUDGET_ESTIMATORS if e in per)
        ratios = ", ".join(f"{e} {_f(per[e]['ratio'][0])}" for e in BUDGET_ESTIMATORS if e in per and per[e]["ratio"])
        shares = [1 - per[e]["between"][c] for e in BUDGET_ESTIMATORS if e in per for c in (sm, lg)
                  if per[e]["between"][c] is not None]
        out.append(f"- {CBS}: the gradient noise is mostly within-prompt, so only N should matter. The frozen pairs' "
                   f"within-prompt share of the batch variance at N = {progress.PLANE_N}: {within} (above one half in "
                   f"{sum(x > 0.5 for x in shares)} of these {len(shares)}). At that N, "
                   f"MSE({sm[0]} x {sm[1]}) / MSE({lg[0]} x {lg[1]}) is {ratios} (median over pairs): the split "
                   "matters for the MSE wherever this is far from 1. In training at d = 0: "
                   f"{_state(doc, 'B4', interim_numbers('B4', b4))}.")
    else:
        out.append(f"- {CBS}: the within-prompt share of the noise needs the pair table (`{progress.PAIRS_COMMAND}`).")
    crit = {("d = 0", "any"): progress.critical_n(df, "gmc", 0)}
    crit.update({("d = 64", e): progress.critical_n(df, e, progress.DELAY) for e in BUDGET_ESTIMATORS})
    words = ", ".join(f"{d} {e}: " + (f"N = {n}" if n else "no N yet") for (d, e), n in crit.items())
    out.append(f"- {CBS}: off-policy reuse raises the critical batch size. Descriptive proxy (not the paper's "
               f"definition): the smallest N from which every cell run so far learned in at least "
               f"{progress.CRITICAL_SHARE:g} of its finished runs: {words}.")
    m = progress.mechanism_counts(df)
    ga, gs = m[f"{LEVEL}/gmc"], m[f"{SGD_LEVEL}/gmc"]
    diff = newcombe(gs[0], gs[1], ga[0], ga[1])
    cells = ", ".join(f"{B} x {G}" for B, G in MECHANISM_CELLS)
    b3 = doc["verdicts"]["B3"]
    conc = ("supported by its intervention (B3 CONFIRMED)" if b3 == "CONFIRMED" else
            f"not supported by its intervention (B3 {b3})" if b3 in ("REFUTED", "INCONCLUSIVE") else
            "a hypothesis until B3 is decided")
    out.append(f"- Explanations are hypotheses until an intervention supports them. Concentration (one trajectory "
               f"weighs up to (1+eps)/B of GMC's update): the intervention is gmc_cap at {cells}; "
               f"{interim_numbers('B3', inter['B3'])}; {conc}. Adam's normalised step: the intervention is SGD at the "
               f"same cells (secondary, no verdict): gmc learned {_of(gs)} under SGD against {_of(ga)} under Adam + "
               f"clip (difference {_ci(diff)}, Newcombe 95%), topr {_of(m[f'{SGD_LEVEL}/topr'])} against "
               f"{_of(m[f'{LEVEL}/topr'])}; the SGD level's drift is lower than Adam's, so a difference implicates the "
               "step and its drift together.")
    if s.get("per") and "gmc" in s["per"]:
        out.append(f"- THEORY §9 at the frozen pairs (a measurement, not an intervention): GMC's within-group term "
                   f"S_w(G = 32) / S_w(G = 4) is {_f(s['per']['gmc']['sw_ratio'])} (median over pairs), the per-sample "
                   "schemes' " + ", ".join(f"{e} {_f(s['per'][e]['sw_ratio'])}" for e in ("tic_trunc", "topr", "is")
                                           if e in s["per"]) + " (Proposition 9.2: non-increasing in G).")
    return out + [""]


def budget_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                   figure_sections=None, read=None) -> tuple[list[str], list[str]]:
    """The section's lines (with F27 where ``figure_sections`` places figures) and the figures not drawn. ``read``:
    the run reader (:func:`studies.budget.progress.design_table`'s; default the run table's)."""
    from grids import grid_folder
    from studies.budget import analysis
    from studies.budget.figures import FIGURES

    df = progress.design_table(read)
    folder = grid_folder("budget")
    inputs = analysis.read_pair_inputs(folder)
    pairs = inputs[0]
    doc = analysis.study_doc(df, inputs)
    inter = progress.interim(df, pairs)
    pending = [h for h in HYPOTHESES if doc["verdicts"][h] == "not yet run"]
    head = "## The sample budget under staleness: prompts or group size"
    md = [f"{head} (in progress: {', '.join(pending)} not yet run)" if pending else head, ""]
    md += [("Pre-registration: [docs/PREREGISTRATION-BUDGET.md](../docs/PREREGISTRATION-BUDGET.md) (committed "
            f"before any run or pair measurement). The grid runs with `{progress.GRID_COMMAND}`, the frozen pairs with "
            f"`{progress.PAIRS_COMMAND}`; `{progress.ANALYSIS_COMMAND}` decides. The verdicts below are computed from "
            "the runs present when the report is made; a hypothesis is decided only on whole seeds "
            f"{SEEDS[0]}-{SEEDS[-1]} of every cell it reads, and numbers marked *interim* are its rule's statistic on "
            "the runs finished so far (cells with missing seeds: no test)."), ""]
    own = df[df["source"] == "budget"]
    md += [(f"Progress: {doc['runs']['finished']} of the design's {doc['runs']['design']} runs finished "
            f"({int(own['finished'].sum())} of the {len(own)} the budget grid runs, "
            f"{int(df['finished'].sum() - own['finished'].sum())} of the {len(df) - len(own)} reused from the "
            "group-size grid)."), ""]
    md += verdict_lines(doc, df, inter) + [""]
    missing: list[str] = []
    if figure_sections is not None:
        lines, missing = figure_sections(FIGURES, report_dir, figures_out, draw_missing)
        md += lines
    md += ["Learned / finished runs (held in brackets) per cell, Adam + clip 1e-4:", ""] + cell_lines(doc) + [""]
    md += secondary_lines(doc)
    s = progress.pairs_summary(folder)
    md += pair_lines(s)
    md += [cost_line(progress.costs(df), s.get("cost_s")), ""]
    md += placement_lines(doc, df, inter, s)
    return md, missing


def _held_text(h: str, r: dict) -> str:
    if h == "B3":
        return "; ".join(f"gmc_cap kappa {k} - gmc {v['difference']:+.2f} [{v['ci'][0]:+.2f}, {v['ci'][1]:+.2f}]"
                         for k, v in r["per_kappa"].items())
    if h == "B5":
        return f"rho {r['rho']:.2f} over {r['strata']} strata"
    if h == "B2":
        return (f"slope on log2 B: GMC {r['slope_gmc']:+.3f} [{r['ci_gmc'][0]:+.3f}, {r['ci_gmc'][1]:+.3f}], "
                f"TOPR {r['slope_topr']:+.3f} [{r['ci_topr'][0]:+.3f}, {r['ci_topr'][1]:+.3f}]")
    return f"slope on log2 G {r['slope']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"


def secondary_lines(doc: dict) -> list[str]:
    """Which frozen pairs B5 reads under the registered checks, where the code departs from the registration (with
    B5 both ways), held beside learned, and the mediators' AUC for learned (secondary: no verdict)."""
    md = []
    if "pairs" in doc:
        out = "; ".join(f"{n} ({why})" for n, why in doc["pairs"]["excluded"].items()) or "none"
        used = ", ".join(doc["pairs"]["used"])
        md += [f"B5 reads the frozen pairs that pass the registered checks (a)-(c): {used}; left out: {out}.", ""]
        for d in doc["departures"]:
            if "pairs_whose_status_changes" in d:
                eff = ", ".join(d["pairs_whose_status_changes"]) or "no pair's status changes"
                z = f" (largest |z| {d['largest_abs_z']:.3g})" if d["largest_abs_z"] is not None else ""
                md.append(f"* Departure: {d['what']}: {eff}{z}.")
            elif "pairs_it_would_exclude" in d:
                gone = ", ".join(d["pairs_it_would_exclude"]) or "none"
                md.append(f"* Departure: {d['what']}: it would exclude {gone}.")
            else:
                alt, b5 = d.get("B5_without_sketch_term"), d.get("B5")
                both = (f"; B5 without it: rho {alt['rho']:.3f}, p {alt['p']:.4f} (with it: rho {b5['rho']:.3f}, p "
                        f"{b5['p']:.4f})") if alt and b5 else ""
                md.append(f"* Departure: {d['what']} the pairs are {', '.join(d['pairs_used_without_sketch_term'])} "
                          f"(with it {', '.join(d['pairs_used'])}){both}.")
        md.append("")
    held = {h: r for h, r in doc.get("held_beside", {}).items() if h != "note" and r}
    if held:
        md += ["Held beside learned (each rule's statistic with held in place of learned; no verdict): "
               + "; ".join(f"{h}: {_held_text(h, r)}" for h, r in held.items()) + ".", ""]
    aucs = (doc.get("mediators") or {}).get("auc_for_learned", {})
    if aucs:
        md += ["Mediators (median over updates 64-199; per cell in `verdicts.json`), AUC for learned at d = 64 "
               "(exploratory): " + "; ".join(
                   f"{k}: " + ", ".join(f"{m} {v:.2f}" for m, v in a.items() if v is not None)
                   for k, a in aucs.items() if any(v is not None for v in a.values())) + ".", ""]
    return md


def readme_line(root: Path) -> str:
    """The README's line (:func:`studies.report.findings.render_summary`), from the committed files under ``root``: the
    verdicts of ``verdicts.json`` where ``python -m studies.budget.analysis --write`` has written it (else marked in
    progress), and the frozen pairs' MSE at N = :data:`~studies.budget.progress.PLANE_N`, fewest prompts against
    most, for GMC and TOPR."""
    from schema.results import read_json
    from studies.grids import GRIDS

    folder = GRIDS["budget"].default_out(root)
    if (folder / "verdicts.json").is_file():
        doc = read_json(folder / "verdicts.json")
        v = doc["verdicts"]
        pending = [h for h in HYPOTHESES if v[h] == "not yet run"]
        done = ", ".join(f"{h} {v[h]}" for h in HYPOTHESES if h not in pending)
        state = (f"in progress, {doc['runs']['finished']} of {doc['runs']['design']} runs: "
                 + (f"{done}; " if done else "") + f"not yet run: {', '.join(pending)}") if pending else \
            f"decided: {done}"
    else:
        state = "in progress: no verdict yet"
    s = progress.pairs_summary(folder)
    per = s.get("per", {})
    if s["missing"] or not all(per.get(e, {}).get("ratio") for e in ("gmc", "topr")):
        pairs = f"the frozen-pair table not yet measured (`{progress.PAIRS_COMMAND}`)"
    else:
        (b1, g1), (b2, g2) = s["small"], s["large"]
        pairs = (f"at the frozen pairs, splitting N = {progress.PLANE_N} as {b1} x {g1} instead of {b2} x {g2} "
                 f"multiplies GMC's MSE by {per['gmc']['ratio'][0]:.2g} and TOPR's by {per['topr']['ratio'][0]:.2g} "
                 f"(median over {len(s['passed'])} pairs)")
    return f"**Budget** ([study](studies/budget/README.md), {state}): {pairs}."
