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
import os
import re
import subprocess
import time
from pathlib import Path

from schema.results import (
    ROOT,
    UNSTABLE_RULE,
    MissingResults,
    read_abstract,
    read_claims,
    results_root,
    verify_was_quick,
)

from . import style
from .mdhtml import to_html

FIGURES = ["f1_bias_vs_G", "f2_sqbias_vs_eps", "f3_tuned_delay_vs_G", "f4_second_moment_vs_delay", "f5_async_sgd",
           "f6_llm_accuracy", "f7_llm_final_vs_delay", "f8_llm_diagnostics"]
def fig_module(name: str):
    return importlib.import_module(f"figures.{name}")


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


def _evidence(row: dict) -> str:
    e = " ".join(str(row.get("evidence", "")).split())
    return e if len(e) <= EVIDENCE_CHARS else e[:EVIDENCE_CHARS] + " ... (full evidence in results/verify/claims.md)"


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
