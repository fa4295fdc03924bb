"""The findings, rendered from the committed verdict files: the README's "What it found" (one line per study, its
headline verdict and a link to the study, :func:`render_summary`) and the full block with every number behind
them in docs/RESULTS-NARRATIVE.md (:func:`render`).

No number in either is typed by hand: each is read from the file named beside it
(``results/verify/claims.json``, ``results/llm/study/verdicts.json`` and the study grids'
``summary.csv``, ``results/llm/mechanism/verdicts.json``, ``results/llm/drift/verdicts.json``,
``results/llm/replicate_avx2/comparison.json``, ``results/llm/group_size/verdicts.json``). README.md holds the
summary between :data:`SUMMARY_START` and :data:`SUMMARY_END`, docs/RESULTS-NARRATIVE.md the full block between
:data:`START` and :data:`END`; ``tests/test_readme.py`` asserts each equals its renderer's, and that the
README's section stays within :data:`SECTION_LIMIT` characters.

    python -m studies.report.findings            # print both blocks
    python -m studies.report.findings --write    # rewrite both pages' blocks
    python -m studies.report.findings --check    # exit 1 if a page's block is not the rendered one
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

from claims.llm_pairs import not_yet_run
from schema.io import write_text
from schema.metrics import estimator_label
from studies.grids import GRIDS
from studies.report.sections.budget import readme_line
from studies.report.verdict_files import RESULTS, cell_rows, load, stable_count
from studies.report.verdict_text import (
    D7_ESTIMATORS,
    d1_sentence,
    d5_sentence,
    level_entry,
    rate_words,
    stable_of,
    step_control_sentence,
    step_size_lead,
    verdict_cell,
)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
NARRATIVE = REPO / "docs" / "RESULTS-NARRATIVE.md"
START = ("<!-- findings:start (python -m studies.report.findings --write; generated from the verdict files, "
         "do not edit) -->")
END = "<!-- findings:end -->"
SUMMARY_START = "<!-- findings-summary:start (python -m studies.report.findings --write) -->"
SUMMARY_END = "<!-- findings-summary:end -->"
SECTION = "## What it found"
SECTION_LIMIT = 1750
"""The README's findings section (its heading to the next one) holds at most this many characters."""

OPTIMISERS = {"sgd": "SGD with a small fixed step", "adam": "Adam (the study's)",
              "adamclip": "Adam + gradient clipping",
              "adamwclip": "AdamW + decay + clipping (verl's actor default)"}


def _ci(r: dict) -> str:
    return f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"


def _share(pair) -> str:
    return f"{pair[0]} of {pair[1]}"


def _stable(rows: list[dict], horizon: str, delay: int) -> dict[str, tuple[int, int]]:
    """{estimator: (stable runs, runs)} of a grid's summary at one horizon and delay."""
    cell = cell_rows(rows, horizon, delay)
    names = dict.fromkeys(r["estimator"] for r in cell)
    return {e: stable_count([r for r in cell if r["estimator"] == e]) for e in names}


def theory(claims: dict) -> str:
    rows = claims["claims"]
    passed = [r for r in rows if r["status"] == "PASS"]
    failed = [r for r in rows if r["status"] != "PASS"]
    from claims.registry import CLAIMS  # the registered claims: the committed table must cover them all

    covered = "" if len(rows) == len(CLAIMS) and claims.get("complete") else (
        f" (the committed table covers {len(rows)} of the {len(CLAIMS)} registered claims: rerun it)")
    text = (f"**Theory.** `make verify-bounds` checks the {len(rows)} claims of [THEORY](docs/THEORY.md) §5 against "
            f"exact computation, simulation and sympy: {len(passed)} PASS{covered}")
    if all("matches" in r for r in rows):  # checked against THEORY's ledger (claims.ledger)
        from claims.ledger import ledger_summary

        ok = all(r["matches"] for r in rows)
        return (text + f"; against THEORY's ledger, {ledger_summary(rows)}, so `python -m claims` exits "
                + ("0 (every outcome as recorded)" if ok else "1 (an outcome the ledger does not record)")
                + " ([`results/verify/claims.md`](results/verify/claims.md) has the evidence).")
    if not failed:
        return text + "."
    fails = "; ".join(f"claim {r['id']} {r['status']}s (*{r['title']}*: {r['measured']})" for r in failed)
    return (text + f", and {fails}, so `python -m claims` exits 1 "
            "([`results/verify/claims.md`](results/verify/claims.md) has the evidence).")


def staleness(study: dict, runs: list[dict], peers: list[dict], mechanism: dict) -> str:
    h = study
    delay, seeds = h["H1"]["delay"], h["H1"]["seeds"]
    long_ = _stable(runs, "long", delay)
    new = _stable(peers, "long", delay)
    holds = (f"TOPR ({_share(long_['topr'])}), GSPO ({_share(long_['gspo'])}) "
             f"and VESPO ({_share(new['vespo'])}; run after")
    h2 = "; ".join(f"GMC - {estimator_label(b)} {_ci(v)}" for b, v in h["H2"]["baselines"].items())
    h4 = h["H4"]
    m5 = mechanism["hypotheses"]["M5"]
    scale = ", ".join(f"{estimator_label(e)} {_share(m5['stable_shares'][e])}" for e in ("gmc", "topr", "gspo"))
    return (f"**GMC collapses with long completions under Adam** (the pre-registered staleness study, "
            f"{len(seeds)} whole seeds, long horizon, d = {delay}): GMC is stable in {_share(long_['gmc'])} seeds, "
            f"while {holds} the study, exploratory) hold. "
            f"H1 {h['H1']['verdict']} (GMC - TIC-mask {_ci(h['H1']['gmc_minus_tic_mask'])}), "
            f"H2 {h['H2']['verdict']} ({h2}), H3 {h['H3']['verdict']} (the gap shrinks with the horizon: "
            f"{_ci(h['H3']['long_gap_minus_short_gap'])}), H4 {h4['verdict']} ({h4['warned_before_collapse']} of "
            f"{h4['collapsed_runs']} collapses warned first) but no warning a user can act on (it also fired in "
            f"{h4['false_alarms']} of {h4['non_collapsed_runs']} runs that held). "
            f"At a larger model (M5 {m5['verdict']}, {len(m5['scale_seeds'])} seeds): {scale}.")


def optimiser(mechanism: dict, drift: dict) -> str:
    hyp, shares = mechanism["hypotheses"], mechanism["stable_shares"]
    m1 = hyp["M1"]
    arms = "; ".join(f"{OPTIMISERS[a]} {_share(shares[f'{a}/gmc'])}" for a in ("adam", "adamclip", "adamwclip"))
    topr = sorted({tuple(shares[f"{a}/topr"]) for a in OPTIMISERS})
    topr_text = (f"{_share(topr[0])} under every optimiser" if len(topr) == 1 else
                 ", ".join(f"{OPTIMISERS[a]} {_share(shares[f'{a}/topr'])}" for a in OPTIMISERS))
    m2b = hyp["M2b"]["baselines"]
    delays = "/".join(str(d) for d in GRIDS["mechanism"].delays)
    why = d1_sentence(drift)
    head = "The optimiser decides, through the drift it causes" if drift.get("D1", {}).get(
        "verdict") == "CONFIRMED" else "The optimiser decides"
    return (f"**{head}** (the pre-registered mechanism study, {len(mechanism['seeds'])} seeds, long "
            f"horizon, d = {delays}): under {OPTIMISERS['sgd']} GMC is stable in {_share(m1['gmc_stable'])} "
            "and ahead of "
            f"TIC-mask ({_ci(m1['gmc_minus_tic_mask'])}) and IS ({_ci(m1['gmc_minus_is'])}), as the theory says "
            f"(M1 {m1['verdict']}); under {arms} (M2 {hyp['M2']['verdict']}, M2b {hyp['M2b']['verdict']}: "
            f"GMC - TOPR {_ci(m2b['topr'])} under AdamW), while TOPR is stable in {topr_text}."
            + (f" {why}" if why else ""))


def mechanism_rest(mechanism: dict, drift: dict) -> str:
    hyp = mechanism["hypotheses"]
    m4, m6 = hyp["M4"], hyp["M6"]
    analysed, named = sorted(drift["M6_disclosure"], key=int)  # the runs analysed; all the pre-registration names
    d220 = drift["M6_disclosure"][named]
    return (f"**What does not fix it, and no warning:** a per-trajectory cap after GMC is stable in "
            f"{_share(hyp['M3']['gmc_cap_stable'])} (M3 {hyp['M3']['verdict']}); TOPR's weight on positive-advantage "
            f"trajectories with GMC's rescaling on the negative ones (`topr_gmc`) holds in "
            f"{_share(m4['topr_gmc']['stable'])} but `topr_gmc` - TOPR is {_ci(m4['topr_gmc'])}, beyond the "
            f"{m4['margin']} margin, "
            f"and the reverse split (`gmc_topr`) holds in {_share(m4['gmc_topr']['stable'])} (M4 {m4['verdict']}). "
            f"The early-warning signal chosen beforehand warned before {m6['hit_rate']['k']} of {m6['hit_rate']['n']} "
            f"held-out collapses and in {m6['false_alarm_rate']['k']} of {m6['false_alarm_rate']['n']} runs that held "
            f"(Fisher p = {m6['p_fisher']:.3f}, M6 {m6['verdict']} on the {analysed} runs analysed; a disclosed "
            f"deviation: on all {named} the pre-registration names, {d220['hits'][0]} of {d220['hits'][1]} against "
            f"{d220['false_alarms'][0]} of {d220['false_alarms'][1]}, p = {d220['p_fisher']:.3f}, {d220['verdict']}): "
            "watch the held-out reward." + (f" {d5}" if (d5 := d5_sentence(drift)) else ""))


def in_progress(drift: dict, replicate: dict) -> str:
    hyps = sorted((k for k in drift if k.startswith("D") and k[1:].isdigit()), key=lambda k: int(k[1:]))
    verdicts = sorted({drift[k]["verdict"] for k in hyps})
    planned = len(GRIDS["drift"].seeds)
    cells = replicate["cells"]
    agree = sum(bool(c["shares_agree"]) for c in cells)
    pc = [abs(c["pc_difference"]["mean"]) for c in cells]
    state = "provisional" if replicate.get("provisional") else "final"
    signs = replicate["signs"]
    same_sign = sum(bool(s["agree_in_sign"]) for s in signs)
    lead = step_size_lead(drift, name=estimator_label)
    undecided = [k for k in hyps if drift[k].get("why", "").startswith("not yet run")]
    decided = [f"{k} {verdict_cell(drift, k)}" for k in hyps if k not in undecided]
    if lead:
        control = step_control_sentence(drift)
        head = (lead.replace("Lower the step first", "**Lower the step first**", 1) + (f" {control}" if control else "")
                + " The drift map ([pre-registration](docs/PREREGISTRATION-DRIFT.md)): "
                f"{', '.join(decided)}.")
    elif decided:
        head = f"**The drift map** ([pre-registration](docs/PREREGISTRATION-DRIFT.md)): {', '.join(decided)}."
    else:
        head = (f"**In progress, no verdict yet.** The drift map ([pre-registration](docs/PREREGISTRATION-DRIFT.md)): "
                f"{hyps[0]}-{hyps[-1]} {' / '.join(verdicts)}, {len(drift['seeds_drift'])} of its {planned} seeds "
                "whole.")
    if lead or decided:
        n_decisive = len(GRIDS["drift_decisive"].seeds)
        head += (f" Not yet run: {', '.join(undecided)} ({len(drift.get('seeds_decisive', []))} of the {n_decisive} "
                 "decisive seeds whole)." if undecided else "")
    return (f"{head} The second-rounding replicate ([pre-registration](docs/PREREGISTRATION-REPLICATE.md), {state}, "
            f"{len(replicate['seeds_whole'])} of {len(GRIDS['replicate_avx2'].seeds)} seeds whole): "
            f"{agree} of {len(cells)} cells have the committed stability outcome, {same_sign} of {len(signs)} "
            f"GMC-minus-baseline differences the committed sign, and a cell's final held-out pc differs from the "
            "committed one by a median "
            f"of {statistics.median(pc):.1g} (at most {max(pc):.1g})." + machines_sentence(replicate))


def machines_sentence(replicate: dict) -> str:
    """The replicate's departure from its pre-registration's single machine, when its runs record more than one."""
    made = replicate.get("machines", [])
    if len(made) < 2:
        return ""
    return (f" Its runs come from {len(made)} machines, where the pre-registration names one; the report's replicate "
            "section names them and what replays of its runs across them found.")


def group_size(v: dict) -> str:
    """The group-size study's line: its verdicts so far, the pairs measured (GMC's bias at the smallest and the
    largest G against TIC-trunc's) and the grid's runs."""
    from studies.grids import GRIDS

    hyps = [f"G{i}" for i in range(1, 8)]
    pending = [h for h in hyps if not_yet_run(v[h])]
    done = [f"{h} {v[h]['verdict']}" for h in hyps if h not in pending and h != "G7"]
    planned = sum(len(GRIDS[g].cells()) for g in ("group_size", "group_size_decisive"))
    state = (f"in progress: {', '.join(done) + '; ' if done else ''}not yet run: {', '.join(pending)}" if pending
             else f"decided: {', '.join(done)}")
    head = f"**The group-size laws** ([pre-registration](docs/PREREGISTRATION-GROUP-SIZE.md), {state})."
    pairs = v.get("pairs_summary", [])
    ok = [p for p in pairs if p["gates_passed"]]
    text = f" Frozen pairs measured: {len(pairs)} of 8"
    if pairs:
        text += f" ({len(ok)} passed their gates)"
    shown = sorted({min(ok, key=lambda p: p["chi2"])["pair"], max(ok, key=lambda p: p["chi2"])["pair"]}) if ok else []
    for i, p in enumerate(q for q in ok if q["pair"] in shown):
        text += (f"; at {p['pair']} (KL {p['kl']:.3g} per token, chi^2 {p['chi2']:.3g}, ESS "
                 f"fraction {p['ess']:.2g}) GMC's squared relative bias falls from {p['gmc_low']:.2g} at "
                 f"G = {p['G_low']} to {p['gmc_high']:.2g} (s.e. {p['gmc_high_se']:.2g}) at G = {p['G_high']}, while "
                 f"TIC-trunc's stays {p['tic_trunc']:.2g} at every G")
    return head + text + f". The iso-samples G grid: {v['runs']} of its {planned} runs complete" + _g3_line(v) + "."


def _g3_line(v: dict) -> str:
    """G3's cells in words once it is decided: each correction's stable runs per G, and the fixed-prompts block."""
    from studies.group_size.grids import group

    g3 = v["G3"]
    if "shares_gmc" not in g3:
        return ""
    n = g3["seeds"]
    held = {est: ", ".join(str(round(x * n)) for x in g3[f"shares_{est}"]) for est in ("gmc", "tic_trunc")}
    text = (f"; at Adam + clip 1e-4 and d = 64, with {n} seeds, GMC held in {held['gmc']} of {n} runs at G = 4, "
            f"8, 16, 32 and TIC-trunc in {held['tic_trunc']} (GMC's slope on log2 G {g3['slope_gmc']:.2g}, "
            f"95% interval [{g3['slope_gmc_ci'][0]:.2g}, {g3['slope_gmc_ci'][1]:.2g}])")
    iso = group(32)["prompts_per_step"]  # the iso-samples cell's prompts per update at G = 32
    fixed = [c for c in v.get("cells", []) if c["estimator"] == "gmc" and c["level"] == "adamclip0.0001"
             and c["G"] == 32 and c["B"] != iso]
    for c in fixed:
        text += (f"; with {c['B']} prompts per update at G = 32 instead of {iso} ({c['B'] / iso:g} times the samples), "
                 f"GMC held in {round(c['stable_share'] * c['n'])} of {c['n']}")
    return text


def theory_line(claims: dict) -> str:
    """The README's line on the theory: how many claims pass, and whether every outcome is the ledger's."""
    rows = claims["claims"]
    passed = sum(r["status"] == "PASS" for r in rows)
    if rows and all(r.get("matches") for r in rows):
        rest = f", the other {len(rows) - passed} refuted as its ledger records" if passed < len(rows) else ""
    else:
        rest = ", not every outcome as its ledger records" if all("matches" in r for r in rows) else ""
    return (f"**Theory** ([claims](results/verify/claims.md)): {passed} of the {len(rows)} claims of "
            f"[THEORY](docs/THEORY.md) §5 PASS{rest}.")


def staleness_line(study: dict, runs: list[dict]) -> str:
    """The README's line on the staleness study: GMC's and the stable baselines' seeds at the long horizon, and
    H2 (GMC at least as good as every stable baseline, the abstract's claim)."""
    delay = study["H1"]["delay"]
    long_ = _stable(runs, "long", delay)
    return (f"**Staleness** ([study](studies/staleness/README.md)): with long completions under Adam at d = {delay}, "
            f"GMC is stable in {_share(long_['gmc'])} seeds, TOPR in {_share(long_['topr'])}, GSPO in "
            f"{_share(long_['gspo'])}; GMC as good as every stable baseline (H2): {study['H2']['verdict']}.")


def mechanism_line(mechanism: dict, drift: dict) -> str:
    """The README's line on the mechanism study: GMC's stable seeds under SGD (M1) and under the Adam arms."""
    hyp, shares = mechanism["hypotheses"], mechanism["stable_shares"]
    through = " through the drift it causes" if drift.get("D1", {}).get("verdict") == "CONFIRMED" else ""
    adam = ", ".join(f"{_share(shares[f'{a}/gmc'])} under {name}" for a, name in
                     (("adam", "Adam"), ("adamclip", "Adam + clip")))
    return (f"**Mechanism** ([study](studies/mechanism/README.md)): the optimiser decides{through}: GMC is stable "
            f"in {_share(hyp['M1']['gmc_stable'])} seeds under SGD (M1 {hyp['M1']['verdict']}), {adam}.")


def drift_line(drift: dict) -> str:
    """The README's line on the drift map: D7's answer where it is CONFIRMED (the step size first), and the
    count of its verdicts."""
    hyps = [k for k in drift if re.fullmatch(r"D\d+", k)]
    counts = {}
    for k in hyps:
        v = "not yet run" if str(drift[k].get("why", "")).startswith("not yet run") else drift[k]["verdict"]
        counts[v] = counts.get(v, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    d7 = drift.get("D7", {})
    lead = ""
    if d7.get("verdict") == "CONFIRMED":
        shares = sorted({stable_of(level_entry(drift, e, d7["level"])) for e in D7_ESTIMATORS})
        held = shares[0] if len(shares) == 1 else " to ".join((shares[0], shares[-1]))
        lead = (f"lower the step first: under Adam + clip at {rate_words(d7['level'])} the {len(D7_ESTIMATORS)} "
                f"corrections "
                f"D7 tests are each stable in {held} seeds at d = 64 (D7 CONFIRMED); ")
    return f"**Drift map** ([study](studies/drift/README.md)): {lead}of its {len(hyps)} verdicts, {tally}."


def group_size_line(v: dict) -> str:
    """The README's line on the group-size study: its pre-registered verdicts so far (G7 is exploratory) and those
    not yet run."""
    hyps = [f"G{i}" for i in range(1, 7)]
    pending = [h for h in hyps if not_yet_run(v[h])]
    done = [f"{h} {v[h]['verdict']}" for h in hyps if h not in pending]
    state = "in progress" if pending else "decided"
    return (f"**Group size** ([study](studies/group_size/README.md), {state}): "
            f"{', '.join(done) or 'no verdict yet'}" + (f"; not yet run: {', '.join(pending)}." if pending else "."))


def render_summary(root: Path = RESULTS) -> str:
    """The README's block, markers included: one line per study (:data:`SECTION_LIMIT` bounds the section)."""
    s = load(root)
    lines = (theory_line(s["claims"]), staleness_line(s["study"], s["study_runs"]),
             mechanism_line(s["mechanism"], s["drift"]), drift_line(s["drift"]), group_size_line(s["group_size"]),
             readme_line(root))
    return "\n".join((SUMMARY_START, *(f"* {b}" for b in lines), SUMMARY_END))


def relative_links(text: str, page: Path) -> str:
    """``text``'s markdown links, written from the repository's root, rewritten from ``page``'s folder."""
    def one(m):
        target = m.group(1)
        if "://" in target or target.startswith(("#", "/")):
            return m.group(0)
        return "](" + os.path.relpath(REPO / target, page.parent).replace(os.sep, "/") + ")"

    return re.sub(r"\]\(([^)\s]+)\)", one, text)


def render(root: Path = RESULTS, page: Path = NARRATIVE) -> str:
    """The full block, markers included, with its links written from ``page``'s folder."""
    s = load(root)
    bullets = (theory(s["claims"]), staleness(s["study"], s["study_runs"], s["peers_2025_runs"], s["mechanism"]),
               optimiser(s["mechanism"], s["drift"]), mechanism_rest(s["mechanism"], s["drift"]),
               in_progress(s["drift"], s["replicate"]), group_size(s["group_size"]))
    return relative_links("\n".join((START, *(f"* {b}" for b in bullets), END)), page)


def page_block(text: str, start: str = START, end: str = END, name: str = "README.md") -> str:
    """The block between the markers (markers included) of ``text``; a ValueError naming the page when absent."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{name} has no findings block ({start!r} ... {end!r})")
    return text[i:j + len(end)]


def readme_section(text: str) -> str:
    """The README's findings section: from its heading (:data:`SECTION`) to the next heading of its level."""
    i = text.index(SECTION)
    j = text.find("\n## ", i + len(SECTION))
    return text[i:] if j < 0 else text[i:j + 1]


def block_arguments(prog: str, doc: str, what: str, argv=None) -> argparse.Namespace:
    """The command line of a generator of documentation blocks: print them (default), ``--write`` them into
    their page, or ``--check`` them (exit 1 when the page's differ); ``what`` names the blocks in the help."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help=f"rewrite {what}")
    g.add_argument("--check", action="store_true", help=f"exit 1 if {what} differ(s) from the rendered")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = block_arguments("python -m studies.report.findings", __doc__,
                           "README.md's and RESULTS-NARRATIVE.md's findings", argv)
    try:  # a missing or torn verdict file is one line naming it
        pages = ((README, SUMMARY_START, SUMMARY_END, render_summary()),
                 (NARRATIVE, START, END, render(page=NARRATIVE)))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (args.write or args.check):
        print("\n\n".join(block for *_, block in pages))
        return 0
    stale = 0
    for page, start, end, block in pages:
        text = page.read_text()
        old = page_block(text, start, end, page.name)
        if args.check:
            if old != block:
                print(f"{page.name}'s findings block is out of date: run python -m studies.report.findings --write",
                      file=sys.stderr)
                stale += 1
            continue
        if old != block:
            write_text(page, text.replace(old, block))
        print(f"{page}: findings block {'rewritten' if old != block else 'already up to date'}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
