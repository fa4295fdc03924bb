"""The report's early-warning section: the frozen rule and its training table, the candidates' law against G on the
exact models and on the frozen pairs' pools, and the confirmation on the budget grid (interim numbers, marked so,
until every planned run is complete; then the verdict by the pre-registration's decision rule, with the ROC per G
when the rule is not confirmed). Everything is read from the committed files; nothing is run."""
from __future__ import annotations

import math
from pathlib import Path

ROC_ROWS = 8
"""Thresholds shown of the verdicts file's ROC (evenly spaced among its points)."""


def _f(x, fmt=".3g") -> str:
    from studies.report.fmt import num

    return num(x, "{:" + fmt + "}")


def _ci(lo_hi) -> str:
    return f"[{_f(lo_hi[0], '.2f')}, {_f(lo_hi[1], '.2f')}]"


def rule_lines(rule: dict) -> list[str]:
    from studies.warning.verdict import MIN_STRATUM

    dec = rule["decision"]
    text = (f"**The frozen rule** (`studies/warning/frozen.json`, chosen on {rule['training_runs']} committed training "
            f"runs): `{rule['statistic']}`, {rule['definition']}; its {rule['summary']} over the last "
            f"{rule['window']} updates from the first update fires at the first update where it is >= "
            f"{rule['threshold']:.6g}. Decision rule on the confirmation set, per G stratum: hit rate >= "
            f"{dec['hit_rate_min']}, false-alarm rate <= {dec['false_alarm_max']} and median lead >= "
            f"{dec['lead_median_min']} updates (point estimates), every stratum with at least {MIN_STRATUM} "
            f"collapsed and {MIN_STRATUM} held runs.")
    return [text, ""]


def table_lines(rows: list[dict], interim: bool = False) -> list[str]:
    """The per-G table (hits, false alarms, median lead, 95% Clopper-Pearson intervals)."""
    tag = " (interim)" if interim else ""
    out = [(f"| G{tag} | hits / collapsed | hit rate [95% CI] | false alarms / held | false-alarm rate [95% CI] "
            "| median lead |"), "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['G']} | {r['hits']} / {r['collapsed']} | {_f(r['hit_rate'], '.2f')} {_ci(r['hit_ci'])} | "
                   f"{r['false_alarms']} / {r['held']} | {_f(r['false_alarm_rate'], '.2f')} "
                   f"{_ci(r['false_alarm_ci'])} | {_f(r['lead_median'], '.0f')} |")
    return out


def law_section(law: dict) -> list[str]:
    """The exact models' law (``selection.json``), iso-samples N = 128, as :func:`studies.warning.invariance.law_lines`
    writes it."""
    from studies.warning.invariance import law_lines

    iso = {k: v for k, v in law.items() if k.endswith("iso")}
    first = next(iter(next(iter(iso.values()))["per_G"].values()))["kl"] if iso else {}
    reps = round((first["sd"] / first["se"]) ** 2) if first.get("se") else None
    text = (f"**The law against G on the exact models** (`selection.json`, `law`: mean (s.d.) over {reps} batches per "
            "G; a batch mean such as `kl` has one mean at every G, the ESS fraction `ess` falls with G):")
    return [text, ""] + law_lines(iso)


def pair_section(doc: dict, inv: dict) -> list[str]:
    """The candidates on the frozen pairs' pools (``pair_warning_candidates.json``) and the invariance test
    (:func:`studies.warning.pairs.invariance`)."""
    from studies.warning.pairs import N_TEST, RULE

    pairs = doc.get("pairs", {})
    if not pairs or not inv:
        return []
    agree = [p["agreement_with_pair_warning_stats"] for p in pairs.values()]
    worst = max((v for a in agree for v in a["max_rel_diff"].values()), default=math.nan)
    kl = inv.get("kl", {})
    out = [(f"**The law against G on the frozen pairs' pools** (`python -m studies.warning --pairs`: "
           f"`results/llm/budget/pair_warning_candidates.csv`; {len(pairs)} pairs, "
           f"{next(iter(pairs.values()))['batches']} batches per cell, the per-token statistics from the pools' "
           f"per-token log-probabilities). The batches are those of `pair_warning_stats.csv` (B = N / G prompts "
           "uniform with replacement, one group of G from each prompt's pool): its three statistics, computed again "
           f"here, agree at {sum(a['passed'] for a in agree)} of {len(agree)} pairs (largest difference "
           f"{_f(worst, '.1e')} of 1 + the value). **Test:** per statistic and pair, the weighted least-squares "
           f"slope of the mean on log2 G at N = {N_TEST} (weights 1 / s.e.^2), two-sided, Holm over the pairs at "
           f"{kl.get('alpha', 0.05)}; the estimand is each pool's own law."), ""]
    out += exact_lines(pairs) + summary_lines(inv) + [""]
    ends = next(iter(kl.get("pairs", {}).values()), {}).get("G", [math.nan])
    out += [("| statistic | pairs | slope on log2 G rejected (Holm) | largest \\|slope\\| per doubling, share of the "
             f"mean [95% CI] | s.d. over batches at G = {ends[-1]} / at G = {ends[0]} (range over pairs) |"),
            "|---|---|---|---|---|"]
    for name, v in ((k, x) for k, x in inv.items() if k != RULE):
        per = [p for p in v["pairs"].values() if math.isfinite(p["rel_slope"])]
        big = max(per, key=lambda p: abs(p["rel_slope"]), default=None)
        size = "n/a" if big is None else f"{big['rel_slope']:+.2%} [{big['rel_ci'][0]:+.2%}, {big['rel_ci'][1]:+.2%}]"
        sp = [p["spread_ratio"] for p in v["pairs"].values() if math.isfinite(p["spread_ratio"])]
        spread = f"{min(sp):.2f} to {max(sp):.2f}" if sp else "n/a"
        rej = ", ".join(v["rejected"]) or "none"
        if v["untested"]:
            rej += f" (not testable: {', '.join(v['untested'])})"
        out.append(f"| `{name}` | {len(v['pairs'])} | {rej} | {size} | {spread} |")
    out += ["", f"The frozen statistic per pair (mean +- s.e. of the batch's per-token KL at N = {N_TEST}):", ""]
    Gs = next(iter(kl.get("pairs", {}).values()), {}).get("G", [])
    rows = {(r["pair"], int(r["G"])): r for p in pairs.values() for r in p["rows"]
            if r["statistic"] == "kl" and int(r["N"]) == N_TEST}
    out += ["| pair | " + " | ".join(f"G = {G}" for G in Gs) + " | slope per doubling [95% CI] | Holm |",
            "|---|" + "---|" * len(Gs) + "---|---|"]
    for pair, t in kl.get("pairs", {}).items():
        cells = [f"{_f(rows[(pair, G)]['mean'], '.4g')} +- {_f(rows[(pair, G)]['se'], '.1g')}" for G in Gs]
        out.append(f"| {pair} | " + " | ".join(cells) + f" | {_f(t['slope'], '.2g')} [{_f(t['ci'][0], '.2g')}, "
                   f"{_f(t['ci'][1], '.2g')}] | {'rejected' if t['holm_rejected'] else 'not rejected'} |")
    return out + [""] + rule_table(inv.get(RULE, {}), pairs) + other_budget(pairs, N_TEST)


def other_budget(pairs: dict, N_test: int) -> list[str]:
    """The same test at the pools' other budgets N (not the pre-stated N = :data:`studies.warning.pairs.N_TEST`)."""
    from studies.warning.pairs import invariance

    rows = [r for p in pairs.values() for r in p["rows"]]
    out = []
    for N in sorted({int(r["N"]) for r in rows} - {N_test}):
        inv = invariance(rows, N=N)
        said = "; ".join(f"`{k}` at {', '.join(v['rejected'])}" for k, v in inv.items() if v["rejected"])
        out.append(f"The same tests at N = {N} (secondary): the null of no change with G rejected (Holm) for "
                   f"{said or 'no statistic'}.")
    return out + [""] if out else []


def rule_table(v: dict, pairs: dict) -> list[str]:
    """The frozen rule at each pool's fixed drift: the share of windows it fires in, per G, and the test of one share
    at every G (:func:`studies.warning.pairs.homogeneity_test`, Holm over the pairs)."""
    from llm_runs.warning import FROZEN
    from studies.warning.pairs import RULE

    if not v.get("pairs"):
        return []
    Gs = next(iter(v["pairs"].values()))["G"]
    n = {(r["pair"], int(r["G"])): r.get("n") for p in pairs.values() for r in p["rows"]
         if r["statistic"] == RULE and int(r["N"]) == v["N"]}
    windows = sorted({x for x in n.values() if x is not None})
    text = (f"**The frozen rule at a fixed drift** (each pool's: the share of {' or '.join(map(str, windows))} "
            f"disjoint windows of {FROZEN['window']} independent batches of N = {v['N']} whose mean per-token KL "
            "reaches the threshold; Pearson's chi^2 test of one share at every G, Holm over the pairs; rejected at "
            f"{', '.join(v['rejected']) or 'no pair'}):")
    out = [text, "",
           "| pair | " + " | ".join(f"G = {G}" for G in Gs) + " | chi^2 p | Holm |",
           "|---|" + "---|" * len(Gs) + "---|---|"]
    for pair, t in v["pairs"].items():
        out.append(f"| {pair} | " + " | ".join(_f(m, ".2f") for m in t["means"]) + f" | {_f(t['p'], '.2g')} | "
                   f"{'rejected' if t['holm_rejected'] else 'not rejected'} |")
    return out + [""]


EXACT_Z = 4.0
"""A Monte Carlo mean within this many of its s.e. of the pool's exact expectation agrees with it."""


def exact_lines(pairs: dict) -> list[str]:
    """The Monte Carlo against each pool's exact expectation of the candidates that are trajectory means
    (:func:`studies.warning.pairs.exact_check`): the largest |z| per statistic, and the pairs beyond :data:`EXACT_Z`."""
    checks = {k: p["exact_check"] for k, p in pairs.items() if p.get("exact_check")}
    if not checks:
        return []
    names = list(next(iter(checks.values())))
    per, off = [], []
    for name in names:
        z = {k: c[name]["max_abs_z"] for k, c in checks.items() if math.isfinite(c[name]["max_abs_z"])}
        ok = [v for v in z.values() if v <= EXACT_Z]
        per.append(f"`{name}` {_f(max(ok, default=math.nan), '.2f')}" + (
            f" at {len(ok)} of {len(z)} pairs" if len(ok) < len(z) else ""))
        off += [f"`{name}` at {k} ({_f(v, '.1f')} s.e.)" for k, v in z.items() if v > EXACT_Z]
    cells = sum(c[k]["cells"] for c in checks.values() for k in c)
    beyond = (f"; beyond {EXACT_Z:g} s.e., where the batches' s.e. does not measure their error: "
              + ", ".join(off)) if off else ""
    return [(f"**Check:** {', '.join(f'`{k}`' for k in names)} are means over the batch's trajectories, whose "
             "expectation is the same at every split of N and known exactly from each pool; over "
             f"{cells} cells ({len(checks)} pairs, every N) the Monte Carlo means lie within this many s.e. of it: "
             + ", ".join(per) + beyond + "."), ""]


def summary_lines(inv: dict) -> list[str]:
    """The pools' answer in words: the frozen statistic's mean against G, its spread, and the rule at a fixed drift."""
    from llm_runs.warning import FROZEN
    from studies.warning.pairs import RULE

    kl, rule = inv.get("kl", {}), inv.get(RULE, {})
    if not kl.get("pairs"):
        return []
    per = kl["pairs"]
    rel = max((abs(p["rel_slope"]) for p in per.values() if math.isfinite(p["rel_slope"])), default=math.nan)
    sp = [p["spread_ratio"] for p in per.values() if math.isfinite(p["spread_ratio"])]
    Gs = next(iter(per.values()))["G"]
    said = (f"**On the pools:** the mean of the frozen statistic changes with G at {len(kl['rejected'])} of {len(per)} "
            f"pairs (Holm; the largest slope {_f(rel * 100, '.2f')}% of the mean per doubling of G). Its spread does "
            f"not stay: at N = {kl['N']} the s.d. over batches at G = {Gs[-1]} is "
            f"{_f(min(sp, default=math.nan), '.2f')} to {_f(max(sp, default=math.nan), '.2f')} times that at "
            f"G = {Gs[0]}, a batch of B = N / G groups "
            "holding fewer prompts (the exact models have no prompts: their spread depends on N alone).")
    if rule.get("pairs"):
        near = ", ".join(f"{k}: mean KL {_f(per[k]['mean'] / FROZEN['threshold'], '.2f')} of the threshold"
                         for k in rule["rejected"] if k in per)
        said += (f" The frozen rule at a fixed drift fires in a share of windows that changes with G at "
                 f"{len(rule['rejected'])} of {len(rule['pairs'])} pairs" + (f" ({near})" if near else "") + ".")
    return [said]


def roc_lines(roc: dict) -> list[str]:
    """The ROC per G (hit rate / false-alarm rate at thresholds of the frozen statistic and window), and per G the
    threshold that would have met the budget there (exploratory)."""
    Gs = [g for g in roc if g != "all"] + (["all"] if "all" in roc else [])
    if not Gs:
        return []
    taus = roc[Gs[0]]["threshold"]
    idx = sorted({round(i * (len(taus) - 1) / max(ROC_ROWS - 1, 1)) for i in range(ROC_ROWS)}) if taus else []
    out = [("**ROC per G** (exploratory; the frozen statistic and window, hit rate / false-alarm rate at each "
            "threshold):"), "", "| threshold | " + " | ".join(f"G = {g}" for g in Gs) + " |",
           "|---|" + "---|" * len(Gs)]
    for i in idx:
        out.append(f"| {taus[i]:.4g} | " + " | ".join(
            f"{_f(roc[g]['hit_rate'][i], '.2f')} / {_f(roc[g]['false_alarm_rate'][i], '.2f')}" for g in Gs) + " |")
    best = []
    for g in Gs:
        b = roc[g].get("best_within_budget")
        best.append(f"G = {g}: " + ("none" if b is None else f"{b['threshold']:.4g} (hit rate {b['hit_rate']:.2f}, "
                                                             f"false alarms {b['false_alarm_rate']:.2f})"))
    return out + ["", "The threshold with the most hits within the false-alarm and lead budget, per G: "
                  + "; ".join(best) + ".", ""]


def confirmation_lines(v: dict | None) -> list[str]:
    """The confirmation's state from the verdicts file (:func:`studies.warning.verdict.verdict`)."""
    cmd = "`python -m studies.warning --verdict budget`"
    if v is None:
        return [(f"**Confirmation** (the budget grid's runs at d = 64): not yet read; {cmd} writes "
                 "`results/llm/budget/warning_verdicts.json`."), ""]
    missing = v.get("missing_statistic") or []
    gone = f" Runs without the statistic, not counted: {', '.join(missing)}." if missing else ""
    if v.get("interim", True):
        done = f"{v.get('complete', 0)} of {v['planned'] if v.get('planned') is not None else '?'}"
        so_far = (f" On them the rule would read {v['interim_verdict']} ({v['interim_why']})."
                  if v.get("interim_verdict") else "")
        out = [(f"**Confirmation: not yet run.** INTERIM: {done} planned runs at d = 64 of the budget grid are "
                "complete; the numbers below are on those runs only and are not a verdict (the pre-registration's "
                f"rule reads the complete grid).{so_far}{gone}"), ""]
        return out + table_lines(v.get("table", []), interim=True) + [""]
    out = [(f"**Confirmation: {v['verdict']}** (the pre-registration's decision rule on the {v.get('runs', 0)} "
            f"complete runs at d = 64 of the budget grid): {v['why']}.{gone}"), ""]
    out += table_lines(v.get("table", [])) + [""]
    if v["verdict"] == "NOT CONFIRMED":
        out += ["Criteria missed, per stratum: " + "; ".join(f"G = {g}: {', '.join(m)}"
                                                             for g, m in v.get("misses", {}).items()) + ".", ""]
        out += roc_lines(v.get("roc", {}))
    return out


def verdicts_path() -> Path:
    from grids import grid_folder
    from studies.warning.verdict import VERDICTS_FILE

    return grid_folder("budget") / VERDICTS_FILE


def warning_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                    figure_sections=None) -> tuple[list[str], list[str]]:
    """The section's lines and the figures not drawn (it has none of its own: the arguments mirror
    :func:`studies.report.sections.group_size.group_size_section`)."""
    import pandas as pd

    from grids import grid_folder
    from schema.results import read_json
    from studies.warning.pairs import CSV_NAME, JSON_NAME, invariance

    head = "## The early warning of collapse"
    lead = ("Pre-registration: [docs/PREREGISTRATION-WARNING.md](../docs/PREREGISTRATION-WARNING.md) (rule, "
            "confirmation set and decision rule committed before the budget grid's first run). `python -m "
            "studies.warning --select` chose the rule (once), `--pairs` measures the candidates on the frozen pairs' "
            "pools, `--verdict budget` applies the rule to the budget grid.")
    from studies.warning.verdict import FROZEN_FILE as frozen

    if not frozen.is_file():
        return [f"{head} (not yet chosen)", "", lead, "", "`studies/warning/frozen.json` does not exist.", ""], []
    rule = read_json(frozen)
    vpath = verdicts_path()
    v = read_json(vpath) if vpath.is_file() else None
    state = ("not yet run" if v is None or v.get("interim", True) else v["verdict"])
    md = [f"{head} ({state})", "", lead, ""] + rule_lines(rule)
    md += ["**Training table** (the frozen rule on the runs it was chosen on; 95% Clopper-Pearson intervals):", ""]
    md += table_lines(rule["training_table"]) + [""]
    sel = frozen.with_name("selection.json")
    if sel.is_file() and "law" in (s := read_json(sel)):
        md += law_section(s["law"])
    folder = grid_folder("budget")
    if (folder / JSON_NAME).is_file() and (folder / CSV_NAME).is_file():
        inv = invariance(pd.read_csv(folder / CSV_NAME).to_dict("records"))
        md += pair_section(read_json(folder / JSON_NAME), inv)
    else:
        md += ["The candidates on the frozen pairs' pools: not yet measured (`python -m studies.warning --pairs`).", ""]
    md += confirmation_lines(v)
    return md, []
