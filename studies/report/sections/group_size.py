"""The report's group-size section: G1-G7 as ``python -m studies.group_size`` decided them, the frozen
pairs' table and gates, the grid's cells with their drift read before and after collapse, and the costs."""
from __future__ import annotations

from pathlib import Path

HYPOTHESES = {
    "G1": "GMC's bias at a fixed pair falls from G = 2 to G = 128 (and reaches 0 at low drift by G = 32)",
    "G2": "the G at which GMC's squared bias is half of TIC-trunc's follows the exact model's law in chi^2",
    "G3": "GMC's stable share rises with G, more than TIC-trunc's (Adam + clip 1e-4, d = 64)",
    "G4": "GMC's boundary on the early-KL axis moves outward from G = 4 to G = 32; TIC-trunc's does not",
    "G5": "at d = 0 the final held-out pc does not depend on G beyond 0.03",
    "G6": "the ESS-fraction early warning (threshold 0.578, frozen) on runs no threshold has seen",
    "G7": "exploratory: the best d = 64 score per G against the abstract's G^(-2/5)",
}


def verdicts_path() -> Path:
    from grids import grid_folder

    return grid_folder("group_size") / "verdicts.json"


def _f(x, fmt=".3g") -> str:
    from studies.report.fmt import num

    return num(x, "{:" + fmt + "}")


def _ci(lo_hi) -> str:
    return f"[{_f(lo_hi[0])}, {_f(lo_hi[1])}]"


def _why_g1(r: dict) -> str:
    return f"the drop held at {len(r['qualifying'])} qualifying pairs ({', '.join(r['qualifying'])})"


def _why_g2(r: dict) -> str:
    law = r["law"]
    return f"G_half = a chi^2^b, b = {_f(law['b'])} [{_f(law['low'])}, {_f(law['high'])}] against the predicted " \
           f"{_f(r['predicted_b'])}"


def _why_g3(r: dict) -> str:
    return (f"slope of the stable share on log2 G: GMC {_f(r['slope_gmc'])} {_ci(r['slope_gmc_ci'])}, "
            f"GMC - TIC-trunc {_f(r['difference'])} {_ci(r['difference_ci'])}")


def _why_g4(r: dict) -> str:
    def one(est: str) -> str:
        e = r[est]
        ends = ", ".join(f"G = {G[1:]} {_f(e[G]['boundary'])}" + (f" ({e[G]['censored']}-censored)"
                                                                   if e[G]["censored"] else "") for G in ("G4", "G32"))
        return f"{est} {ends}; G = 32 - G = 4: {_f(e['difference'])} {_ci(e['ci'])}"
    return "boundary (early KL): " + "; ".join(one(est) for est in ("gmc", "tic_trunc") if est in r)


def _why_g5(r: dict) -> str:
    return "d = 0 final pc minus G = 8's: " + ", ".join(
        f"G = {G} {_f(x['mean'])} {_ci(x['ci'])}" for G, x in r["per_G"].items()) + f" (margin {r['margin']})"


def _why_g6(r: dict) -> str:
    return (f"fired before {r['hits'][0]} of {r['hits'][1]} collapses and in {r['false_alarms'][0]} of "
            f"{r['false_alarms'][1]} runs that held (Fisher p = {_f(r['p_fisher'])}); median lead "
            f"{_f(r['lead_median'])} updates")


def _why_g7(r: dict) -> str:
    slopes = [f"{est} {_f(c['slope'])}" for est, c in r["corrections"].items() if c.get("slope") is not None]
    none = "fewer than three G with a positive delay cost (the d = 0 score minus the best d = 64 score): no slope"
    return ("log-log slope of the delay cost on G, over the G where it is positive: " + ", ".join(slopes)
            + "; the others: " + none) if slopes else none


WHY = {"G1": ("qualifying", _why_g1), "G2": ("law", _why_g2), "G3": ("slope_gmc", _why_g3),
       "G4": ("gmc", _why_g4), "G5": ("per_G", _why_g5), "G6": ("hits", _why_g6), "G7": ("corrections", _why_g7)}
"""Per hypothesis: the key its numbers sit under in verdicts.json, and how the row words them."""


def verdict_rows(v: dict) -> list[str]:
    out = ["| | hypothesis | verdict | why / numbers |", "|---|---|---|---|"]
    for h, text in HYPOTHESES.items():
        r = v.get(h, {})
        key, words = WHY[h]
        why = words(r) if r.get(key) and not r.get("why") else r.get("why", "")
        out.append(f"| {h} | {text} | {r.get('verdict', 'n/a')} | {why} |")
    return out


def pair_lines(doc: dict) -> list[str]:
    head = ("| pair | run | KL/token | chi^2 | ESS fraction | top-1% mass | M | gates "
            "| GMC rel. bias^2 at G = 2 / 8 / 128 | TIC-trunc | IS (G = 8) | cost (s) |")
    out = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in sorted(doc.get("pairs", {}).items()):
        g = {int(r["G"]): r for r in p["rows"] if r["estimator"] == "gmc"}
        t = {int(r["G"]): r for r in p["rows"] if r["estimator"] == "tic_trunc"}
        i = {int(r["G"]): r for r in p["rows"] if r["estimator"] == "is"}
        gm = " / ".join(f"{_f(g[G]['rel_bias_sq'])} +- {_f(g[G]['se'], '.2g')}" if G in g else "n/a"
                        for G in (2, 8, 128))
        gates = "passed" if p["gates"]["passed"] else "FAILED (" + ", ".join(
            k for k in ("a_is_unbiased", "b_tic_invariant") if not p["gates"][k]) + ")"
        out.append(f"| {name} | {p['run']} | {_f(p['drift_kl'])} | {_f(p['drift_chi2'])} | {_f(p['drift_ess'])} | "
                   f"{_f(p['drift_top1_share'])} | {p['M']} | {gates} | {gm} | "
                   f"{_f(t.get(8, {}).get('rel_bias_sq'))} | {_f(i.get(8, {}).get('rel_bias_sq'))} | "
                   f"{_f(p['cost_s']['total'], '.0f')} |")
    return out


def cell_lines(cells: list[dict]) -> list[str]:
    head = ("| level | G x B | correction | runs | stable | mean final pc | early KL (pre-collapse) "
            "| early KL (whole window) | runs read after collapse |")
    out = [head, "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        fb = " (the level's)" if c["drift_fallback"] else ""
        out.append(f"| {c['level']} | {c['G']} x {c['B']} | {c['estimator']} | {c['n']} "
                   f"| {_f(c['stable_share'], '.2f')} | {_f(c['pc_final'], '.3f')} "
                   f"| {_f(c['kl_early_pre_collapse'])}{fb} | {_f(c['kl_early_all'])} | "
                   f"{c['read_after_collapse']} |")
    return out


def g5_reading(v: dict) -> list[str]:
    """What G5's verdict allows G3 and G4 to be read as (the pre-registration's rule), with the d = 0 control's
    stable runs per G beside it (data, not a pre-registered test)."""
    r = v.get("G5", {})
    if "per_G" not in r:
        return []
    held = r.get("d0_held", {})
    counts = ", ".join(f"{k} of {n} at G = {G}" for G, (k, n) in held.items())
    control = f" The d = 0 control's runs held (did not collapse) in {counts}." if held else ""
    if r["verdict"] == "CONFIRMED":
        return [f"G5 is CONFIRMED, so G3's and G4's differences are read as staleness effects.{control}", ""]
    return [(f"G5 is {r['verdict']}: as pre-registered, G3's and G4's differences are not read as staleness effects "
             f"alone, since the group size changes learning at d = 0 too (the d = 0 final held-out pc minus G = 8's "
             f"in the row above).{control}"), ""]


def group_size_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                       figure_sections=None) -> tuple[list[str], list[str]]:
    """The section's lines (with its figure where ``figure_sections`` places figures) and the figures not drawn."""
    from claims.llm_pairs import not_yet_run
    from grids import grid_folder
    from schema.results import read_json
    from studies.group_size.figures import FIGURES

    lead = ("Pre-registration: [docs/PREREGISTRATION-GROUP-SIZE.md](../docs/PREREGISTRATION-GROUP-SIZE.md) "
            "(committed before any run, with the exact models' predictions). `python -m studies.group_size` "
            "decides; the frozen pairs are measured by `python -m studies.group_size.pairs`, the grid run by "
            "`python -m studies.run --grid group_size`.")
    head = "## The group-size laws on the LLM's policies"
    path = verdicts_path()
    if not path.is_file():
        return [f"{head} (in progress)", "", lead, "",
                "Not yet decided: `results/llm/group_size/verdicts.json` does not exist.", ""], []
    v = read_json(path)
    pending = [h for h in HYPOTHESES if not_yet_run(v.get(h, {}))]
    md = [f"{head} (in progress: {', '.join(pending)} not yet run)" if pending else head, "", lead, ""]
    md += verdict_rows(v) + [""] + g5_reading(v)
    missing: list[str] = []
    if figure_sections is not None:
        lines, missing = figure_sections(FIGURES, report_dir, figures_out, draw_missing)
        md += lines
    pairs = grid_folder("group_size") / "pairs.json"
    if pairs.is_file():
        doc = read_json(pairs)
        md += [f"Frozen pairs measured: {len(doc['pairs'])} of 8.", ""] + pair_lines(doc) + [""]
    g8 = v.get("g8_against_committed", [])
    if g8:
        same = sum(r["identical"] for r in g8)
        line = (f"The rerun G = 8 cells against the committed drift-map runs with their settings: {same} of "
                f"{len(g8)} identical in every metric but the timings (the pre-registration reran them on the premise "
                "that the committed runs round otherwise; on a machine that replays them they must agree, and this "
                "checks it).")
        md += [line, ""]
    if v.get("cells"):
        ms = v.get("machines", [])
        one = ("one machine's rounding" if len(ms) == 1 else
               f"{len(ms)} machines' roundings (the pre-registration asks for one: a departure)")
        cost = v.get("grid_cost") or {}
        spent = ("" if not cost.get("timed") else
                 f" They cost about {cost['timed'] * cost['wall_s_median'] / 3600:.1f} h of one core "
                 f"({cost['timed']} timed runs at a median {_f(cost['wall_s_median'], '.0f')} s each, one torch "
                 f"thread per run; the sum of their wall times, {cost['wall_s_total'] / 3600:.1f} h, also counts "
                 "time a run was paused or shared a core).")
        so_far = " so far" if pending else ""
        intro = (f"The grid's cells at d = 64 ({v['runs']} complete runs{so_far}, made with {one}; the drift read "
                 "before collapse as pre-registered, beside the whole window):" + spent)
        md += [intro, ""] + cell_lines(v["cells"]) + [""]
    return md, missing
