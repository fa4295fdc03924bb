"""The report's lines on the second-rounding replicate, read from its comparison
(``results/llm/replicate_avx2/comparison.json``, made by ``python -m studies.replicate``): the table of
its cells beside the committed ones, the machines that made it, and, for the staleness and mechanism
sections, whether each of their verdicts survived the change of rounding. What a verdict says is
decided in :mod:`studies.replicate.analysis`."""
from __future__ import annotations

from pathlib import Path

from schema.results import read_json
from studies.replicate.analysis import SEEDS_NEEDED
from studies.report.fmt import num as _num


def comparison_path() -> Path:
    """The replicate's ``comparison.json``, in the folder the grid table names."""
    from grids import grid_folder

    return grid_folder("replicate_avx2") / "comparison.json"


def survival_lines(hypotheses: tuple[str, ...], path: Path | None = None) -> list[str]:
    """One paragraph for a study's section: each of ``hypotheses`` as the replicate re-decided it beside
    the committed verdict; nothing before the comparison exists."""
    path = path or comparison_path()
    if not path.is_file():
        return []
    v = read_json(path)
    redecided = {h: r for h, r in v.get("verdicts", {}).items() if h in hypotheses}
    whole = len(v.get("seeds_whole", []))
    head = (f"**Under a different rounding** (the replicate, docs/PREREGISTRATION-REPLICATE.md: the cells rerun on "
            f"AVX2 kernels from the committed warm start; {whole} of {SEEDS_NEEDED} seeds whole")
    if not redecided:
        return [head + "): too few whole seeds to re-decide " + ", ".join(hypotheses) + ".", ""]
    changed = "differs so far" if v.get("provisional") else "CHANGED"
    said = "; ".join(f"{h} {r['replicate']} in the replicate against {r['committed']} committed"
                     f" ({'the same' if r['same'] else changed})" for h, r in redecided.items())
    if v.get("provisional"):
        tail = " Provisional: no verdict is said to survive or not before every seed is whole."
    else:
        kept = all(r["same"] for r in redecided.values())
        tail = f" These verdicts {'survive' if kept else 'do NOT all survive'} the change of rounding."
    return [head + "): " + said + "." + tail, ""]


def replicate_lines(path: Path) -> list[str]:
    if not path.is_file():
        return [(f"*No replicate comparison yet ({path}): `python -m studies.replicate` "
                 "after `python -m studies.run "
                "--grid replicate_avx2`.*"), ""]
    v = read_json(path)
    state = "provisional (no verdict said to survive or not)" if v.get("provisional") else (
        "the verdicts survive" if v.get("survives") else "the verdicts do NOT all survive")
    md = [(f"Pre-registered in `docs/PREREGISTRATION-REPLICATE.md`; every run on AVX2 kernels from the committed warm "
          f"start. Whole seeds: {len(v.get('seeds_whole', []))} of {SEEDS_NEEDED}: {state}."), "",
          ("| arm | correction | stable, replicate | stable, committed | difference (Newcombe 95%) | pc replicate | "
          "pc committed |"), "|---|---|---|---|---|---|---|"]
    for c in v.get("cells", []):
        lo, hi = c["share_difference"]
        md.append(f"| {c['arm']} | {c['estimator']} | {c['replicate_stable'][0]}/{c['replicate_stable'][1]} | "
                  f"{c['committed_stable'][0]}/{c['committed_stable'][1]} | [{_num(lo, '{:+.2f}')}, "
                  f"{_num(hi, '{:+.2f}')}] | {_num(c['pc_replicate'], '{:.3f}')} | "
                  f"{_num(c['pc_committed'], '{:.3f}')} |")
    md.append("")
    for h, r in v.get("verdicts", {}).items():
        md.append(f"- {h}: replicate {r['replicate']}, committed {r['committed']}")
    md += machine_lines(v.get("machines", []), sorted(path.parent.glob("replay-*.json")))
    return md + [""]


def _machine(m: dict) -> str:
    forced = ", ".join(f"{k}={x}" for k, x in (m.get("kernel_env") or {}).items())
    path = f"forced {forced}" if forced else "native path"
    return f"{m.get('cpu_capability')} (CPU flags {m.get('cpu_flags')}, {path})"


def machine_lines(made: list[dict], replays: list[Path]) -> list[str]:
    """The machines that made the replicate (when more than one) and what the committed replays of its
    runs on another machine found (``replay-*.json``, written by ``python -m llm_runs.replay --json``)."""
    if len(made) < 2:
        return []
    text = (f"Made on {len(made)} machines, as the runs record them: "
            + "; ".join(f"{m['runs']} runs on {_machine(m)}" for m in made)
            + ". The pre-registration names one (the AVX-512 machine with AVX2 forced).")
    if not replays:
        return ["", text + " No replay of its runs across the machines is committed: whether they round alike "
                           "is not checked."]
    done = []
    for f in replays:
        r = read_json(f)
        cols = r["columns_differing"]
        done.append(f"`{Path(r['run']).name}` ({r['steps']} updates) replayed on {_machine(r['machine'])}: "
                    f"{len(r['identical_columns'])} of {r['columns_compared']} columns byte-identical"
                    + (f", {r['fields_differing']} fields differing in {', '.join(f'`{c}`' for c in cols)}"
                       if cols else ""))
    return ["", text + " Replays of committed replicate runs across them (`python -m llm_runs.replay RUN --steps N "
                       "--anyway --json`, with the run's kernel variables set): " + "; ".join(done) + "."]
