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
import sys
import time
from pathlib import Path

from claims.abstract import evidence_excerpt
from figures import style
from figures.mdhtml import plain, to_html
from figures.registry import (
    FIGURES,
    FRAME_FIGURES,
    OPTIMIZER_FIGURES,
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
from studies.report.sections.gpu import gpu_study_section
from studies.report.sections.staleness import (  # noqa: F401  (the staleness study's sections, placed here)
    differences_markdown,
    plain_answer,
    stopping_markdown,
    study_section,
    verdict_numbers,
    verdicts_table,
)

# ----------------------------------------------------------------------------------- sections


def _ledger_line(rows: list[dict]) -> str:
    """" Against THEORY's ledger: ..." once the rows carry it (:mod:`claims.ledger`); "" before."""
    if not rows or not all("matches" in r for r in rows):
        return ""
    from claims.ledger import ledger_summary

    return (f" Against THEORY's ledger (§5's *stated as* and *recorded* columns): {ledger_summary(rows)}; "
            "`make verify-bounds` exits 0 exactly when every outcome matches it.")


def claims_table(rows: list[dict]) -> list[str]:
    from claims.table import brief

    esc = lambda s: " ".join(str(s).split()).replace("|", "\\|").replace("*", "\\*")
    out = ["| id | claim | THEORY | stated as | expected | measured | status | recorded | s |",
           "|---:|---|---|---|---|---|---|---|---:|"]
    for r in sorted(rows, key=lambda r: r["id"]):
        status = r["status"] if r["status"] == "PASS" else f"**{r['status']}**"
        recorded = ("-" if "matches" not in r else
                    f"{r['recorded']}" + ("" if r["matches"] else " (**does not match**)"))
        out.append(f"| {r['id']} | {esc(r.get('title', ''))} | {esc(r.get('theory_ref', ''))} | "
                   f"{esc(r.get('stated_as') or '-')} | {esc(brief(r.get('expected')))} "
                   f"| {esc(brief(r.get('measured')))} "
                   f"| {status} | {recorded} | {float(r.get('seconds', float('nan'))):.2f} |")
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
                         f"{r['acc'].item():.3f} +- {r['se'].item():.3f} "
                         f"({r['n_stable'].item()}/{r['n'].item()} stable)")
        out.append(f"| {style.label(est, mode)} | " + " | ".join(cells) + " |")
    return out


def simulator_ordering_paragraph(df) -> str:
    """The report's paragraph on whether the exact simulators reproduce the LLM study's ordering (final J of GMC
    below TOPR's and TIC-trunc's at the longest horizon and largest delay), optimiser by optimiser, and claim
    17's ordering beside it: the verdict is :func:`claims.optimizers.ordering_verdict`'s, this words it."""
    from claims.optimizers import ordering_table, ordering_verdict

    tab = ordering_table(df)
    v = ordering_verdict(tab)
    H, d = v["H"], v["d"]
    long = tab[tab["H"] == H]
    names = {"sgd": "SGD", "adam": "Adam", "adam_clip": "Adam + clip", "adamw_clip": "AdamW + clip"}

    def iv(r, key, fmt):
        return (f"{getattr(r, key + '_mean'):{fmt}} "
                f"[{getattr(r, key + '_low'):{fmt}}, {getattr(r, key + '_high'):{fmt}}]")

    repro = [names.get(o, o) for o in v["reproduced"]]
    cells = "; ".join(f"{names.get(r.optimizer, r.optimizer)}: GMC - TOPR {iv(r, 'topr_J', '+.3f')}, GMC - TIC-trunc "
                      f"{iv(r, 'trunc_J', '+.3f')}, collapsed GMC {r.collapse_gmc:.0%} / TOPR {r.collapse_topr:.0%} / "
                      f"TIC-trunc {r.collapse_tic_trunc:.0%}" for r in long.itertuples())
    worse = [f"{names.get(o, o)} H={h}" for o, h in v["claim17_fails"]]
    verdict = (f"The exact simulators reproduce the *direction* of the LLM's ordering under {', '.join(repro)}"
               if repro else "The exact simulators do **not** reproduce the LLM's ordering under any optimiser")
    size, coll = v["largest_difference"], v["max_collapse"]
    cell = df[(df["H"] == H) & (df["d"] == d)]
    means = cell.groupby(["optimizer", "scheme"])["final_J"].mean()
    shown = [s for s in ("gmc", "gmc_cap", "gmc_topr", "is", "topr", "tic_trunc", "tic_mask")
             if s in set(cell["scheme"])]
    finals = "; ".join(f"{names.get(o, o)}: " + ", ".join(f"{plain(style.label(s))} {means[(o, s)]:.4f}" for s in shown)
                       for o in [o for o in names if o in set(cell["optimizer"])])
    return (f"{verdict}: at H = {H} and d = {d}, GMC's final J is below both TOPR's and TIC-trunc's (paired 95% "
            f"t-intervals below 0) under {', '.join(repro) or 'no optimiser'}; but the largest difference there is "
            f"{size:.4f} in J, and " + ("no run of GMC, TOPR, TIC-trunc or TIC-mask collapses" if coll == 0 else
                                         f"up to {coll:.0%} of one of these schemes' runs collapse")
            + f" (the LLM study's differences and collapses are in its section above). "
            f"Per optimiser (J(theta_0) = {cell['J0'].iloc[0]:.3f}): {cells}. Mean final J "
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


def frame_disagreements(tab) -> list[str]:
    """The frame's disagreeing cells (:func:`claims.theory_frame.disagreeing_cells`), one markdown line each."""
    from claims.theory_frame import disagreeing_cells
    from figures.f23_theory_frame import OPT_TITLE

    return [f"- {style.label(r['scheme'])} under {OPT_TITLE[r['optimizer']]}: the {r['model']} predicts it "
            f"{r['prediction']} ({r['held']:.0%} of runs held), the LLM was {r['outcome']} ({r['llm_stable']} of "
            f"{r['llm_n']} seeds stable, final pc {r['llm_pc']:.3f}, chi^2 {r['llm_chi2']:.2f})."
            for r in disagreeing_cells(tab)]


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
        dis = frame_disagreements(tab)
    except MissingResults as e:
        md += [f"*{e}*", ""]
    lines, missing = figure_sections(FRAME_FIGURES, report_dir, figures_out, draw_missing)
    return md + lines, missing, dis


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

    from studies.report.sections.drift import progress_section
    from studies.report.sections.mechanism import mechanism_section

    # once decided, the drift map leads: its figure is the report's first
    drift_md, missing, lead = progress_section(report_dir, figures_out, draw_missing, figure_sections)
    md += drift_md if lead else []
    mech_md, mech_missing = mechanism_section(report_dir, figures_out, draw_missing, figure_sections)
    md += mech_md
    missing += mech_missing
    study_md, study_missing = study_section(report_dir, figures_out, draw_missing)
    md += study_md
    missing += study_missing
    md += gpu_study_section(report_dir, figures_out, draw_missing)
    md += [] if lead else drift_md
    from studies.report.sections.group_size import group_size_section

    gs_md, gs_missing = group_size_section(report_dir, figures_out, draw_missing, figure_sections)
    md += gs_md
    missing += gs_missing
    from studies.report.sections.budget import budget_section  # the sample budget's split, after the group-size laws

    budget_md, budget_missing = budget_section(report_dir, figures_out, draw_missing, figure_sections)
    md += budget_md
    missing += budget_missing
    from studies.report.sections.warning import warning_section  # the early warning beside the group-size laws

    md += warning_section(report_dir, figures_out, draw_missing, figure_sections)[0]  # it draws no figure
    from studies.report.sections.corrections_2026 import corrections_2026_section

    md += corrections_2026_section()

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
               "claim is in `results/verify/claims.md`." + _ledger_line(rows), ""]
        md += claims_table(rows) + [""]
        linked = {i for v in verdicts for i in v["claim_ids"]}
        for r in sorted(rows, key=lambda r: r["id"]):
            if r["status"] != "PASS":
                where = "" if r["id"] in linked else " (a supporting claim, not one of the abstract's)"
                if r.get("matches") and r.get("recorded") == "refuted":
                    where += ", refuted as THEORY's ledger records it"
                disagreements.append(f"- Claim {r['id']} {r['status']}{where}: {r['title']}. "
                                     f"Evidence: {evidence_excerpt(r)}")

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
    for name in (n for n in FIGURES if n not in OPTIMIZER_FIGURES and n not in FRAME_FIGURES):
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
    figures_out = Path(figures_out) if figures_out is not None else style.OUT
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
