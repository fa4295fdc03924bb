"""The verdict on each claim of the abstract, computed: ``results/verify/abstract.json``.

``python -m claims.abstract`` reads the claims table (``results/verify/claims.json``) and the
results of the simulator sweeps, the LLM staleness study and the LLM sweep (through
:mod:`schema.results`) and writes one verdict per claim of THEORY §0's abstract, with the
numbers behind it. The LLM claim's verdict is the pre-registered study's hypothesis H2
(docs/PREREGISTRATION.md), read from the study's verdicts file (``results/llm/study/verdicts.json``,
made by ``python -m studies.staleness --json``: the analysis sits in the studies layer, above this
one, so its verdicts are read here, never recomputed). ``python -m claims`` writes it after a full
run too. The report (``python -m studies.report``) only renders this file. Every tolerance is the one
of the claim it belongs to.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grids.folders import STUDY
from schema.io import check_output, write_json
from schema.metrics import estimator_label as label
from schema.provenance import provenance
from schema.results import (
    ABSTRACT as ABSTRACT_SOURCE,
)
from schema.results import TUNED, MissingResults, Sim, read_claims, read_llm_runs, read_sim

from . import measures as M
from .common import REL_EXACT
from .table import ABSTRACT_FORMAT

Z_LLM = 2.0
"""GMC counts as better than another estimator only if the gap in mean final accuracy exceeds
Z_LLM combined standard errors over seeds."""
EVIDENCE_CHARS = 600


def _fmt(x, spec=".3g") -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x + 0.0, spec)


# ----------------------------------------------------------------------------------- data checks
# Each returns (ok, text): ok True/False from the data, None when the data say nothing decisive.


def _check_async() -> tuple[bool | None, str]:
    tc = M.theorem_check(M.load_async())
    return (tc["n_le_D"] == tc["n_checked"] and tc["n_step_violations"] == 0,
            (f"Async SGD (F5, {tc['settings']} (env, eps) settings): realised mean squared bias <= Theorem 2's D in "
            f"{tc['n_le_D']} of {tc['n_checked']} runs where D is defined; runs with a step whose bias exceeds the §3 "
            f"bound: {tc['n_step_violations']} of {tc['n_runs'] - tc['n_no_bound']} (runs of schemes without a §3 "
             f"bound, e.g. SNIS: {tc['n_no_bound']})."))


def _check_second_moment() -> tuple[bool | None, str]:
    s = M.second_moment_summary(M.load_second_moment())
    ok = all(r["class_max_ratio"] <= 1 for r in s.values())
    txt = "; ".join(f"{M.ENV_TITLE.get(e, e)}: class members reach at most {r['class_max_ratio']:.3f} x "
                    f"(1+eps)^2 M^2 over Delta in [0, {r['Delta_max']:g}], while IS's second moment grows "
                    f"{r['is_last'] / r['is_first']:.3g}-fold to {r['is_over_bound']:.2f} x that bound"
                    for e, r in s.items())
    return ok, f"Static delay (F4): {txt}."


def _check_eps() -> tuple[bool | None, str]:
    sl = M.sqbias_slopes(read_sim(Sim("sqbias_vs_eps")))
    if not {"gmc", "tic_mask"} <= set(sl):
        return None, "F2 lacks GMC or TIC-mask."
    ok = sl["tic_mask"]["slope"] < sl["gmc"]["slope"]
    return ok, (f"Extremal laws (F2): squared-bias slope in eps {sl['tic_mask']['slope']:.2f} for TIC-mask (theory -4) "
                f"and {sl['gmc']['slope']:.2f} for GMC (theory -2)"
                + (f", {sl['tic_trunc']['slope']:.2f} for TIC-trunc (theory -2)" if "tic_trunc" in sl else "")
                + f", fitted over eps in [{sl['gmc']['eps_lo']:.3g}, {sl['gmc']['eps_hi']:.3g}] (the -4 is an eps -> 0 "
                "limit; finite-eps factors flatten it). Data check: TIC-mask's slope is steeper than GMC's: "
                + ("yes." if ok else "NO."))


def _check_tuned() -> tuple[bool | None, str]:
    sl = M.tuned_slopes(read_sim(TUNED))["G"]
    ex = M.tuned_exponents()["G"]
    tol = float(M.claim_row(12)["tolerance"]["numeric slope"])  # claim 12's tolerance, as it ran
    ok = all(abs(v["tuned"] - ex[s]) <= tol for s, v in sl.items() if s in ex)
    return ok, ("Numerically tuned step size (F3): slope of the tuned delay term in G "
                + ", ".join(f"{label(s)} {round(v['tuned'], 4) + 0.0:.4f}" for s, v in sl.items())
                + " (theory " + ", ".join(f"{label(s)} {ex[s]:g}" for s in sl if s in ex) + f"; tolerance {tol:g}).")


def _check_bias_G() -> tuple[bool | None, str]:
    s = M.bias_vs_G_summary(read_sim(Sim("bias_vs_G")))
    tol = REL_EXACT  # claim 7's tolerance on TIC's relative change in G
    ok = all(r.get("gmc_monotone", False) and r.get("tic_mask_spread", 0) <= tol and r.get("tic_trunc_spread", 0) <= tol
             for r in s.values())
    txt = "; ".join(f"'{i}': GMC {_fmt(r.get('gmc_first'))} at G = {r['G_min']} -> {_fmt(r.get('gmc_last'))} at "
                    f"G = {r['G_max']}, TIC-mask constant at {_fmt(r.get('tic_mask'))} (relative spread "
                    f"{_fmt(r.get('tic_mask_spread'), '.1e')}), TIC-trunc at {_fmt(r.get('tic_trunc'))}"
                    for i, r in s.items())
    return ok, f"E1 exact bias (F1): {txt}."


def _llm_verdict() -> tuple[str, str]:
    """(verdict word, text) for the LLM claim, from the final accuracies of the sweep."""
    df = read_llm_runs()
    tab = M.llm_table(df)
    if not len(tab):
        return "not checked", "No complete LLM run."
    dmax = tab["delay"].max()
    v = M.verdict_at(tab, dmax)
    quick = df.attrs.get("quick")
    n_seeds = int(tab[tab["delay"] == dmax]["n"].max())
    steps = int(df["steps"].max()) if df["steps"].notna().any() else None
    scale = (f"Setting: tiny-cpu Qwen3-architecture model on the arithmetic task, {steps} updates, {n_seeds} seed(s) "
             f"per cell{', quick sweep' if quick else ''}; the paper's setting (Qwen3 models, reasoning benchmarks) "
             "is not reproduced here.")
    rank = "; ".join(f"{label(e, m)} {a:.3f} +- {s:.3f} (n={n})" for e, m, a, s, n in v["ranking"])
    uns = "; ".join(f"{label(e, m)} ({k}/{n} runs unstable)" for e, m, k, n in v["unstable"]) or "none"
    base = f"At the largest delay d = {dmax:g}, controlled-delay runs, stable estimators by mean final held-out " \
           f"accuracy (+- standard error over seeds): {rank or 'none'}. Estimators with an unstable run there: {uns}. "
    va = M.verdict_at(tab, dmax, "async")
    if va["ranking"] or va["unstable"]:
        base += ("Async-mode runs at maximum staleness d (a separate experiment, not ranked with the above): "
                 + "; ".join(f"{label(e, m)} {a:.3f} (n={n})" for e, m, a, s, n in va["ranking"])
                 + "".join(f"; {label(e, m)} {k}/{n} unstable" for e, m, k, n in va["unstable"]) + ". ")
    if not v["gmc_present"]:
        return "not checked", base + "No GMC run at this delay. " + scale
    if not v["gmc_stable"]:
        return "not confirmed", base + "GMC itself had an unstable run at this delay. " + scale
    if "gmc_rank" not in v:
        return "not checked", base + "No other stable estimator to compare with. " + scale
    be, bm = v["best_other"]
    gap = (f"GMC ranks {v['gmc_rank']} of {v['n_stable']} stable estimators; gap to the best other, "
           f"{label(be, bm)}: {v['gap']:+.3f}")
    if v["min_n"] < 2:
        return "inconclusive", base + gap + " with one seed per cell, so no standard error and no test. " + scale
    gap += f" ({v['gap_z']:+.1f} combined standard errors; the threshold is {Z_LLM:g}). "
    if v["gmc_rank"] == 1 and v["gap_z"] >= Z_LLM:
        word = "confirmed in this setting"
    elif v["gmc_rank"] == 1 or v["gap_z"] > -Z_LLM:
        word = "not distinguishable"
    else:
        word = "not confirmed"
    return word, base + gap + scale


STUDY_WORDS = {"CONFIRMED": "confirmed in this setting", "REFUTED": "refuted in this setting",
               "INCONCLUSIVE": "inconclusive", "NOT DECIDED": "not decided"}
"""The verdict on the LLM claim for each outcome of the study's H2 (NOT DECIDED: fewer whole
seeds than the stopping rule needs)."""


def _interval_text(r: dict) -> str:
    return f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}], n = {r['n']}"


def _study_verdict() -> tuple[str, str]:
    """(verdict word, text) for the LLM claim: the staleness study's H2 (and H1 beside it), from its
    verdicts file; whether GMC itself is stable there, from the study's runs."""
    from grids.folders import VERDICTS
    from grids.run_table import PRIMARY, read_runs, stable_in_cell
    from schema.results import read_json

    runs = read_runs(STUDY.require(), PRIMARY)
    res = read_json(VERDICTS.require())
    h1, h2 = res["H1"], res["H2"]
    seeds, d = h2["seeds"], h2["delay"]
    word = STUDY_WORDS[h2["verdict"]]
    text = (f"Pre-registered staleness study (docs/PREREGISTRATION.md; {len(seeds)} whole paired seeds; tiny "
            f"Qwen3-architecture model on the scratchpad task, completions of H = 18 tokens, 200 updates; largest "
            f"delay d = {d}). H2 (GMC at least as good as every stable baseline, non-inferiority margin "
            f"{h2['margin']:g}, Holm): {h2['verdict']}")
    if h2["verdict"] == "NOT DECIDED":
        text += f" ({h2['reason']}; the rule's outcome so far: {h2['interim_verdict']})"
    base = h2["baselines"]
    text += (". GMC minus each stable baseline (final held-out pc, mean [95% bootstrap interval]): "
             + ("; ".join(f"{label(e)} {_interval_text(r)}" + (" (GMC worse, Holm)" if r["worse"] else "")
                          for e, r in base.items()) or "no stable baseline")
             + f". Unstable there (excluded): {', '.join(label(e) for e in h2['unstable_excluded']) or 'none'}")
    gmc_ok = stable_in_cell(runs[runs["seed"].isin(seeds)], "long", d, "gmc")
    text += f"; GMC itself {'stable' if gmc_ok else 'unstable'} in that cell. "
    text += f"H1 (GMC above TIC-mask there): {h1['verdict']}, {_interval_text(h1['gmc_minus_tic_mask'])}. "
    text += "The paper's setting (Qwen3 models, reasoning benchmarks) is not reproduced."
    return word, text


def evidence_excerpt(row: dict) -> str:
    """A claim's evidence on one line, cut at EVIDENCE_CHARS."""
    e = " ".join(str(row.get("evidence", "")).split())
    return e if len(e) <= EVIDENCE_CHARS else e[:EVIDENCE_CHARS] + " ... (full evidence in results/verify/claims.md)"


@dataclass(frozen=True)
class AbstractClaim:
    text: str
    claim_ids: tuple[int, ...]
    check: Callable[[], tuple[bool | None, str]] | None


ABSTRACT = [
    AbstractClaim("A convergence bound for GRPO-style algorithms trades the gradient estimator's second moment "
                  "against its bias.", (16, 17), _check_async),
    AbstractClaim("For trajectory-level importance-weighted estimators, once the second moment is uniformly "
                  "controlled, delay enters the bound only through the bias introduced by clipping or rescaling.",
                  (2, 13, 16), _check_second_moment),
    AbstractClaim("GMC-GRPO minimises a ratio-based bias bound within a class of weighted estimators that share "
                  "one second-moment guarantee.", (1, 3, 4), None),
    AbstractClaim("The fourth-order delay term improves from O(eps^-4) (TIC-GRPO) to O(eps^-2) (GMC-GRPO), where "
                  "1+eps is the ratio threshold.", (5, 10, 11), _check_eps),
    AbstractClaim("Under local policy overlap, the delay-dependent term decreases as G^-2/5 after tuning the step "
                  "size.", (12,), _check_tuned),
    AbstractClaim("For fixed behaviour and current policies, the bias introduced by group rescaling vanishes as "
                  "G -> infinity, whereas the bias from trajectory-wise clipping can persist.", (7, 8, 9),
                  _check_bias_G),
    AbstractClaim("Experiments on Qwen3 models and reasoning benchmarks: GMC-GRPO is the best of the stable "
                  "baselines under large rollout delays.", (), None),
]
"""THEORY §0's seven claims of the abstract, the §5 claims that test each, and the data check."""


def theory_verdict(ac: AbstractClaim, claims: dict | None) -> tuple[str, str]:
    """(verdict word, text) from the linked claims' statuses and the data check."""
    notes = []
    if claims is None:
        word = "not checked"
        notes.append("results/verify/claims.json is missing.")
        failing = []
    else:
        missing = [i for i in ac.claim_ids if i not in claims]
        failing = [i for i in ac.claim_ids if i in claims and claims[i]["status"] != "PASS"]
        notes.append("Claims " + ", ".join(f"{i} {claims[i]['status']}" if i in claims else f"{i} absent"
                                           for i in ac.claim_ids) + ".")
        for i in failing:
            notes.append(f"Failing: claim {i} ({claims[i]['title']}): {evidence_excerpt(claims[i])}")
        word = "not checked" if missing else "not confirmed" if failing else "confirmed"
    if ac.check is not None:
        try:
            ok, txt = ac.check()
            notes.append(txt)
            if ok is False and word == "confirmed":
                word = "not confirmed by the simulations"
        except MissingResults as e:
            notes.append(f"Simulation data missing: {e}")
    return word, " ".join(notes)


def verdicts() -> list[dict]:
    """One ``{"k", "text", "claim_ids", "verdict", "evidence"}`` per claim of the abstract."""
    try:
        claims = {r["id"]: r for r in read_claims()}
    except MissingResults:
        claims = None
    out = []
    for k, ac in enumerate(ABSTRACT, 1):
        if ac.claim_ids:
            word, text = theory_verdict(ac, claims)
        else:
            try:
                word, text = _study_verdict()
            except MissingResults as e:
                word, text = "not checked", f"LLM staleness study missing: {e}."
            try:
                sweep_word, sweep_text = _llm_verdict()
                text += f" Earlier delay sweep (H <= 3, not pre-registered): {sweep_word}. {sweep_text}"
            except MissingResults:
                pass
        out.append({"k": k, "text": ac.text, "claim_ids": list(ac.claim_ids), "verdict": word, "evidence": text})
    return out


def write_abstract(path: Path | None = None) -> Path:
    """Compute :func:`verdicts` and write them to ``path`` (default ``results/verify/abstract.json``)."""
    path = Path(path) if path is not None else ABSTRACT_SOURCE_PATH()
    check_output(path)  # a file the toolkit did not write is never replaced
    doc = {"format": ABSTRACT_FORMAT, "provenance": provenance(), "claims": verdicts()}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, doc)


def ABSTRACT_SOURCE_PATH() -> Path:
    from schema.results import results_root

    return results_root() / ABSTRACT_SOURCE.candidates[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m claims.abstract", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="where to write (default results/verify/abstract.json)")
    a = p.parse_args(argv)
    try:
        path = write_abstract(a.out)
    except (OSError, ValueError) as e:
        print(f"python -m claims.abstract: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
