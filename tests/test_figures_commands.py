"""figures/: the report renders from synthetic inputs; the markdown converter; no figure module imports
torch or a simulator; the drawing commands list and pick every figure."""
from __future__ import annotations

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import pytest
from _figures_data import (  # noqa: F401 (a fixture)
    MODULES,
    ROOT,
    moment_table,
    results_fixture,
    sqbias_table,
    tuned_table,
    write_claims,
    write_llm_runs,
)

# ----------------------------------------------------------------------------------- report


def test_report_renders_from_synthetic_inputs(results, tmp_path):
    from claims.abstract import write_abstract
    from studies.report import build as report

    write_claims(results, failing=(8,))
    write_llm_runs(results / "llm" / "sweep_quick")
    for sub, df in (("bias_vs_G-quick", moment_table("G", [2, 4, 8], ["gmc", "tic_mask", "tic_trunc", "is"])),
                    ("sqbias_vs_eps-quick", sqbias_table()), ("tuned_delay", tuned_table())):
        (results / "sim" / sub).mkdir(parents=True)
        df.to_parquet(results / "sim" / sub / "results.parquet")
    write_abstract()  # the verdicts are computed by claims; the report only renders them
    out = tmp_path / "figs"
    md_path, html_path = report.write_report(figures_out=out, draw_missing=True)
    md, html = md_path.read_text(), html_path.read_text()
    assert md_path == results / "REPORT.md" and html_path == results / "REPORT.html"
    for i in (1, 8, 18):
        assert f"| {i} | claim {i} |" in md
    assert "FAIL" in md and "<table>" in html and "<img" in html
    # figures with results are drawn and shown; those without are named with their command
    assert (out / "f1_bias_vs_G.png").exists() and "f1_bias_vs_G.png" in md
    assert "python -m simulators.sweep async_sgd" in md
    # a verdict per abstract claim; claim 8 failed, so the G-claim is not confirmed
    assert md.count("**Verdict") == 7
    g_claim = md.split("bias introduced by group rescaling")[1].split("**Verdict")[1].split("\n")[0]
    assert "not confirmed" in g_claim.lower() and "claim 8" in g_claim.lower()
    assert "GMC" in md and "unstable" in md


def test_markdown_converter():
    from figures.mdhtml import to_html

    html = to_html("# T\n\nsome *x* and **y** `z` [a](b.md)\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n- one\n- two\n\n"
                   "![alt](p.png)\n")
    assert "<h1" in html and "<em>x</em>" in html and "<strong>y</strong>" in html and "<code>z</code>" in html
    assert "<td>1</td>" in html and "<li>one</li>" in html and '<img src="p.png" alt="alt"' in html
    assert '<a href="b.md">a</a>' in html
    assert "<strong>" not in to_html(r"sigma2\*\*2\*(3\*G - 3))/G\*\*3") and "&#42;" in to_html(r"a\*b")


def test_no_torch_and_no_simulator_imported():
    """The figures import no producer: of the LLM track only its lazy package and the run tables."""
    code = ("import sys; import figures.__main__, figures.registry\n"
            + "".join(f"import {m if '.' in m else 'figures.' + m}\n" for m in MODULES)
            + "tables = ('llm_runs', 'grids.run_table', 'grids.mechanism_table')\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'simulators', 'llm_runs', 'transformers')\n"
            "       and m not in tables]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)



def test_every_figure_module_is_drawn_by_the_command_that_draws_them_all():
    """Each ``fN_*.py`` of the toolkit's figures and of a study's ``figures/`` is in ``python -m studies.figures``'s
    list (the GPU study's, drawn by the report, aside), and the toolkit's command lists none of a study's."""
    from figures.registry import FIGURES as TOOLKIT
    from studies.figures import FIGURES
    from studies.gpu.figures import GPU_FIGURE

    found = {f"figures.{p.stem}" for p in (ROOT / "figures").glob("f[0-9]*_*.py")}
    found |= {".".join(p.relative_to(ROOT).with_suffix("").parts)
              for p in (ROOT / "studies").glob("*/figures/f[0-9]*_*.py")}
    listed = {n if "." in n else f"figures.{n}" for n in FIGURES} | {GPU_FIGURE}
    assert found == listed and len(FIGURES) == len(set(FIGURES))
    assert all("." not in n for n in TOOLKIT)
    from figures.registry import fig_module, fig_name

    names = [fig_name(r) for r in [*FIGURES, GPU_FIGURE]]
    assert len(names) == len(set(names)), "two figures would write the same PNG"
    assert all(fig_module(r).NAME == fig_name(r) for r in [*FIGURES, GPU_FIGURE])


@pytest.mark.parametrize("only, drawn", [("f1", ["f1_bias_vs_G"]), ("f10", ["f10_study_differences"]),
                                         ("f24,f3", ["f3_tuned_delay_vs_G", "f24_drift_map"]),
                                         ("f1_bias", ["f1_bias_vs_G"]), (None, None)])
def test_the_drawing_command_picks_figures_by_number_or_name(only, drawn, monkeypatch, tmp_path):
    import figures.__main__ as cli
    from studies import figures as every

    saved = []
    monkeypatch.setattr(cli, "fig_module", lambda ref: type("M", (), {"load": staticmethod(lambda: None),
                                                                     "plot": staticmethod(lambda df: ref)}))
    monkeypatch.setattr(cli.style, "save", lambda fig, name, out: saved.append((fig, name)) or [tmp_path / name])
    assert every.main(["--out", str(tmp_path)] + (["--only", only] if only else [])) == 0
    assert [n for _, n in saved] == (drawn or [cli.fig_name(r) for r in every.FIGURES])
    assert all(fig == ref for (fig, _), ref in zip(saved, [r for r in every.FIGURES
                                                            if cli.fig_name(r) in [n for _, n in saved]]))


def test_the_drawing_command_names_an_unknown_figure_and_where_study_figures_are(capsys):
    import figures.__main__ as cli

    with pytest.raises(SystemExit) as e:
        cli.main(["--only", "f10"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown figure(s) ['f10']" in err and "python -m studies.figures" in err
