"""``python -m figures.report``: ``results/REPORT.md`` and ``results/REPORT.html``.

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
import importlib
import math
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import style
from .data import (
    ROOT,
    UNSTABLE_RULE,
    MissingResults,
    read_claims,
    results_root,
    verify_was_quick,
)
from .mdhtml import to_html

FIGURES = ["f1_bias_vs_G", "f2_sqbias_vs_eps", "f3_tuned_delay_vs_G", "f4_second_moment_vs_delay", "f5_async_sgd",
           "f6_llm_accuracy", "f7_llm_final_vs_delay", "f8_llm_diagnostics", "f9_peers_frontier"]
Z_LLM = 2.0
"""GMC counts as better than another estimator only if the gap in mean final accuracy exceeds
Z_LLM combined standard errors over seeds."""


def fig_module(name: str):
    return importlib.import_module(f"figures.{name}")


def _fmt(x, spec=".3g") -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x + 0.0, spec)


_PLAIN = {r"\epsilon": "ε", r"\Delta": "Δ", r"\sigma": "σ", r"\eta": "η", r"\theta": "θ", r"\to": "→",
          r"\mathcal{D}": "D", r"\frac": "", "{": "", "}": ""}


def plain(text: str) -> str:
    """Mathtext segments (``$...$``, for the figures) as plain text for the report: epsilon -> ε, no braces."""
    def convert(m):
        t = m.group(1)
        for k, v in _PLAIN.items():
            t = t.replace(k, v)
        return t

    return re.sub(r"\$([^$]*)\$", convert, text)


EVIDENCE_CHARS = 600


# ----------------------------------------------------------------------------------- data checks
# Each returns (ok, text): ok True/False from the data, None when the data say nothing decisive.


def _check_async() -> tuple[bool | None, str]:
    tc = fig_module("f5_async_sgd").theorem_check(fig_module("f5_async_sgd").load())
    return (tc["n_le_D"] == tc["n_checked"] and tc["n_step_violations"] == 0,
            (f"Async SGD (F5, {tc['settings']} (env, eps) settings): realised mean squared bias <= Theorem 2's D in "
            f"{tc['n_le_D']} of {tc['n_checked']} runs where D is defined; runs with a step whose bias exceeds the §3 "
            f"bound: {tc['n_step_violations']} of {tc['n_runs'] - tc['n_no_bound']} (runs of schemes without a §3 bound, "
             f"e.g. SNIS: {tc['n_no_bound']})."))


def _check_second_moment() -> tuple[bool | None, str]:
    f4 = fig_module("f4_second_moment_vs_delay")
    s = f4.summary(f4.load())
    ok = all(r["class_max_ratio"] <= 1 for r in s.values())
    txt = "; ".join(f"{f4.ENV_TITLE.get(e, e)}: class members reach at most {r['class_max_ratio']:.3f} x "
                    f"(1+eps)^2 M^2 over Delta in [0, {r['Delta_max']:g}], while IS's second moment grows "
                    f"{r['is_last'] / r['is_first']:.3g}-fold to {r['is_over_bound']:.2f} x that bound"
                    for e, r in s.items())
    return ok, f"Static delay (F4): {txt}."


def _check_eps() -> tuple[bool | None, str]:
    f2 = fig_module("f2_sqbias_vs_eps")
    sl = f2.slopes(f2.load())
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
    f3 = fig_module("f3_tuned_delay_vs_G")
    sl = f3.slopes(f3.load())["G"]
    tol = 1e-3
    ok = abs(sl["gmc"]["tuned"] + 0.4) <= tol and all(abs(sl[s]["tuned"]) <= tol for s in sl if s != "gmc")
    return ok, ("Numerically tuned step size (F3): slope of the tuned delay term in G "
                + ", ".join(f"{style.label(s)} {round(v['tuned'], 4) + 0.0:.4f}" for s, v in sl.items())
                + f" (theory GMC -0.4, TIC 0; tolerance {tol:g}).")


def _check_bias_G() -> tuple[bool | None, str]:
    f1 = fig_module("f1_bias_vs_G")
    s = f1.summary(f1.load())
    tol = 1e-10  # claim 7's tolerance on TIC's relative change in G
    ok = all(r.get("gmc_monotone", False) and r.get("tic_mask_spread", 0) <= tol and r.get("tic_trunc_spread", 0) <= tol
             for r in s.values())
    txt = "; ".join(f"'{i}': GMC {_fmt(r.get('gmc_first'))} at G = {r['G_min']} -> {_fmt(r.get('gmc_last'))} at "
                    f"G = {r['G_max']}, TIC-mask constant at {_fmt(r.get('tic_mask'))} (relative spread "
                    f"{_fmt(r.get('tic_mask_spread'), '.1e')}), TIC-trunc at {_fmt(r.get('tic_trunc'))}"
                    for i, r in s.items())
    return ok, f"E1 exact bias (F1): {txt}."


def _llm_verdict() -> tuple[str, str]:
    """(verdict word, text) for the LLM claim, from the final accuracies of the sweep."""
    f7 = fig_module("f7_llm_final_vs_delay")
    df = f7.load()
    tab = f7.table(df)
    if not len(tab):
        return "not checked", "No complete LLM run."
    dmax = tab["delay"].max()
    v = f7.verdict_at(tab, dmax)
    quick = df.attrs.get("quick")
    n_seeds = int(tab[tab["delay"] == dmax]["n"].max())
    steps = int(df["steps"].max()) if df["steps"].notna().any() else None
    scale = (f"Setting: tiny-cpu Qwen3-architecture model on the arithmetic task, {steps} updates, {n_seeds} seed(s) "
             f"per cell{', quick sweep' if quick else ''}; the paper's setting (Qwen3 models, reasoning benchmarks) "
             "is not reproduced here.")
    rank = "; ".join(f"{style.label(e, m)} {a:.3f} +- {s:.3f} (n={n})" for e, m, a, s, n in v["ranking"])
    uns = "; ".join(f"{style.label(e, m)} ({k}/{n} runs unstable)" for e, m, k, n in v["unstable"]) or "none"
    base = f"At the largest delay d = {dmax:g}, controlled-delay runs, stable estimators by mean final held-out " \
           f"accuracy (+- standard error over seeds): {rank or 'none'}. Estimators with an unstable run there: {uns}. "
    va = f7.verdict_at(tab, dmax, "async")
    if va["ranking"] or va["unstable"]:
        base += ("Async-mode runs at maximum staleness d (a separate experiment, not ranked with the above): "
                 + "; ".join(f"{style.label(e, m)} {a:.3f} (n={n})" for e, m, a, s, n in va["ranking"])
                 + "".join(f"; {style.label(e, m)} {k}/{n} unstable" for e, m, k, n in va["unstable"]) + ". ")
    if not v["gmc_present"]:
        return "not checked", base + "No GMC run at this delay. " + scale
    if not v["gmc_stable"]:
        return "not confirmed", base + "GMC itself had an unstable run at this delay. " + scale
    if "gmc_rank" not in v:
        return "not checked", base + "No other stable estimator to compare with. " + scale
    be, bm = v["best_other"]
    gap = (f"GMC ranks {v['gmc_rank']} of {v['n_stable']} stable estimators; gap to the best other, "
           f"{style.label(be, bm)}: {v['gap']:+.3f}")
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


def _evidence(row: dict) -> str:
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
                  "G -> infinity, whereas the bias from trajectory-wise clipping can persist.", (7, 8, 9), _check_bias_G),
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
            notes.append(f"Failing: claim {i} ({claims[i]['title']}): {_evidence(claims[i])}")
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


# ----------------------------------------------------------------------------------- sections


def claims_table(rows: list[dict]) -> list[str]:
    from bounds.verify import brief

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


def _png_stale(png: Path, module) -> bool:
    if not png.exists():
        return True
    srcs = [s.find() for s in module.SOURCES]
    return any(p is not None and p.stat().st_mtime > png.stat().st_mtime for p in srcs if p.is_file())


def figure_section(name: str, report_dir: Path, figures_out: Path, draw_missing: bool) -> tuple[list[str], str | None]:
    m = fig_module(name)
    png = figures_out / f"{name}.png"
    try:
        df = m.load()
    except MissingResults as e:
        return [f"### {plain(m.TITLE)}", "", f"*Not drawn: {e}*"], f"{plain(m.TITLE)}: results missing"
    if draw_missing and _png_stale(png, m):
        style.save(m.plot(df), name, figures_out)
    rel = os.path.relpath(png, report_dir)
    lines = [f"### {plain(m.TITLE)}", ""]
    lines += [f"![{name}]({rel})", ""] if png.exists() else ["*PNG missing: run `python -m figures`.*", ""]
    lines += [plain(m.caption(df))]
    return lines, None


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def build(report_dir: Path, figures_out: Path, draw_missing: bool = True) -> str:
    try:
        rows = read_claims()
        claims = {r["id"]: r for r in rows}
    except MissingResults as e:
        rows, claims, claims_missing = [], None, str(e)
    quick_verify = verify_was_quick() if claims is not None else None
    md = ["# GMC-GRPO toolkit: theory against measurement", "",
          (f"Generated by `python -m figures.report` on {time.strftime('%Y-%m-%d %H:%M')} at commit {_git_commit()}. "
          "Every number and verdict below is computed from the results files when the report is made. The bounds "
          "are THEORY.md's reconstruction ([R]) of the paper (only its abstract is public), not the paper's text."), ""]

    md += ["## Verdicts on the abstract's claims", ""]
    disagreements = []
    for k, ac in enumerate(ABSTRACT, 1):
        if ac.claim_ids:
            word, text = theory_verdict(ac, claims)
        else:
            try:
                word, text = _llm_verdict()
            except MissingResults as e:
                word, text = "not checked", f"LLM results missing: {e}"
        md += [f"{k}. *{ac.text}*", "", f"**Verdict: {word}.** {plain(text)}", ""]
        if word != "confirmed" and not word.startswith("confirmed"):
            disagreements.append(f"- Abstract claim {k} ({word}): {ac.text}")

    md += ["## Claims of THEORY.md §5 (`make verify-bounds`)", ""]
    if claims is None:
        md += [f"*{claims_missing}*", ""]
    else:
        counts = {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}
        md += ["From `results/verify/claims.json`" + (" (made with `--quick`)" if quick_verify else "") + ": "
               + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(rows)} claims. Evidence for each "
               "claim is in `results/verify/claims.md`.", ""]
        md += claims_table(rows) + [""]
        linked = {i for ac in ABSTRACT for i in ac.claim_ids}
        for r in sorted(rows, key=lambda r: r["id"]):
            if r["status"] != "PASS":
                where = "" if r["id"] in linked else " (a supporting claim, not one of the abstract's)"
                disagreements.append(f"- Claim {r['id']} {r['status']}{where}: {r['title']}. Evidence: {_evidence(r)}")

    md += ["## Figures", ""]
    missing = []
    for name in FIGURES:
        lines, miss = figure_section(name, report_dir, figures_out, draw_missing)
        md += lines + [""]
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
    out_dir.mkdir(parents=True, exist_ok=True)
    md = build(out_dir, figures_out, draw_missing)
    md_path, html_path = out_dir / "REPORT.md", out_dir / "REPORT.html"
    md_path.write_text(md + "\n")
    html_path.write_text(to_html(md, "GMC-GRPO toolkit report"))
    return md_path, html_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.report", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for REPORT.md/.html (default results/)")
    p.add_argument("--figures", type=Path, default=None, help="folder of the figure PNGs (default figures/out/)")
    p.add_argument("--no-draw", action="store_true", help="do not draw missing or out-of-date figures")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    md, html = write_report(a.out, a.figures, draw_missing=not a.no_draw)
    print(f"wrote {md} and {html} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
