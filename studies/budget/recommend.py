"""Which split of a sample budget, and which correction, the measured cells and THEORY §9 support.

    python -m studies.budget.recommend --samples 128 --delay 64                 # every measured correction
    python -m studies.budget.recommend --samples 128 --delay 64 --correction gmc

It answers only inside the measured range (the budget design: N = B x G in {16, 32, 64, 128, 256, 512} with B, G in
{4, 8, 16, 32}, delays 0 and 64, Adam + clip 1e-4 on the toolkit's study model): outside it, it says so, names the
nearest measured cells and exits 2, never extrapolating. Inside it, it ranks the measured cells at that budget by
learned share (held share, then mean final held-out pc, breaking ties) with 95% Clopper-Pearson intervals, and
says which cells the intervals do not separate. Where no cell at that budget holds whole seeds yet, it answers from
§9 and the exact model E5 (``studies/budget/predictions.json``) only, and says so.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .grids import BUDGET_ESTIMATORS, DELAY, SEEDS, splits

MEASURED_DELAYS = (0, DELAY)
PREDICTIONS = Path(__file__).resolve().parent / "predictions.json"


def measured_budgets() -> tuple[int, ...]:
    return tuple(sorted({B * G for B, G in splits()}))


class OutOfRange(ValueError):
    """A question outside the measured range: the message names the nearest measured cells."""


def check_question(samples, delay, correction) -> None:
    """``ValueError`` for a malformed question, :class:`OutOfRange` for one outside the measured range."""
    from estimators.losses import loss_names

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive whole number of completions per update, got {samples!r}")
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise ValueError(f"--delay must be a whole number of policy versions >= 0, got {delay!r}")
    if correction is not None and correction not in loss_names():
        raise ValueError(f"unknown correction {correction!r}; registered: {', '.join(loss_names())}")
    Ns = measured_budgets()
    if samples not in Ns:
        near = min(Ns, key=lambda n: (abs(n - samples), n))
        where = "outside the measured range" if not Ns[0] <= samples <= Ns[-1] else "not a measured budget"
        raise OutOfRange(f"N = {samples} samples per update is {where} (measured: N = {', '.join(map(str, Ns))}); "
                         f"no split is extrapolated. Nearest measured cells: N = {near}: "
                         + ", ".join(f"{B} prompts x G = {G}" for B, G in splits() if B * G == near))
    if delay not in MEASURED_DELAYS:
        gap = min(abs(d - delay) for d in MEASURED_DELAYS)
        near = " and ".join(str(d) for d in MEASURED_DELAYS if abs(d - delay) == gap)
        raise OutOfRange(f"delay {delay} was not measured (measured: {', '.join(map(str, MEASURED_DELAYS))}); the "
                         f"nearest measured delay: {near} (ask again with that --delay for its cells)")
    if correction is not None and delay > 0 and correction not in BUDGET_ESTIMATORS:
        raise OutOfRange(f"{correction} was not measured on the budget grid (measured: {', '.join(BUDGET_ESTIMATORS)})")


def measured_cells(samples: int, delay: int, correction: str | None, read=None) -> list[dict]:
    """The design's cells at this budget and delay (Adam + clip 1e-4): per (correction, B, G) the finished runs and
    learned / held counts, mean final pc."""
    from .analysis import _read, design_runs

    df = design_runs(read or _read, keep=lambda r: r["N"] == samples and r["cell"].delay == delay
                     and r["source"] is not None and "_cap" not in r["cell"].arm
                     and not r["cell"].arm.startswith("sgd"))
    if delay > 0 and correction is not None:
        df = df[df["estimator"] == correction]
    out = []
    for (e, B, G), x in df.groupby(["estimator", "B", "G"]):
        f = x[x["finished"]]
        out.append({"correction": e if delay > 0 else "any (d = 0: every ratio is 1)", "B": int(B), "G": int(G),
                    "runs": len(x), "finished": len(f), "learned": int(f["learned"].sum()),
                    "held": int(f["held"].sum()), "pc_final": float(f["pc_final"].mean()) if len(f) else None})
    return out


def rank(cells: list[dict]) -> list[dict]:
    """Whole cells (every seed finished), best first, each with its learned share's 95% interval."""
    from stats import share_ci

    whole = [dict(c) for c in cells if c["finished"] == len(SEEDS)]
    for c in whole:
        c["ci"] = share_ci(c["learned"], c["finished"])
    return sorted(whole, key=lambda c: (-c["learned"], -c["held"], -(c["pc_final"] or 0.0)))


def theory_answer(samples: int, delay: int, correction: str | None) -> list[str]:
    """E5's learned shares at this budget and §9's MSE ranking of the splits on E5 (predictions.json)."""
    pred = json.loads(PREDICTIONS.read_text())
    rows = [r for r in pred["e5_cells"]["rows"] if r["N"] == samples and r["optimizer"] == "adam"
            and r["estimator"] == ("d0" if delay == 0 else r["estimator"])
            and r["estimator"] not in ("gmc_cap",) and (delay == 0 or r["estimator"] != "d0")
            and (correction is None or delay == 0 or r["estimator"] == correction)]
    rows.sort(key=lambda r: (-r["learned_share"], -r["final_J"]))
    lines = ["E5 (exact model, 20 seeds) learned share at this budget, best first: "
             + "; ".join(f"{r['estimator']} {r['B']}x{r['G']} {r['learned_share']:.2f}" for r in rows)]
    if delay > 0:
        p = max(pred["e5_mse"]["pairs"], key=lambda x: x["chi2"])
        order = p["order_by_N"]
        ests = [correction] if correction else list(order)
        lines.append(f"§9 on E5 (chi^2 {p['chi2']:.3g}; one prompt, so no between-prompt term), splits by MSE, "
                     "best first: "
                     + "; ".join(f"{e}: {' > '.join(order[e][str(samples)])}" for e in ests if e in order))
    return lines


def answer(samples: int, delay: int, correction: str | None = None, read=None) -> str:
    check_question(samples, delay, correction)
    cells = measured_cells(samples, delay, correction, read)
    ranked = rank(cells)
    head = f"N = {samples} samples per update, delay {delay}" + (f", {correction}" if correction else "")
    if not ranked:
        return "\n".join([head + ": no cell at this budget has all its seeds on the LLM grid yet, so this answer "
                          "comes from THEORY §9 and the exact model E5 only, not from a measurement.",
                          *theory_answer(samples, delay, correction)])
    best = ranked[0]
    tied = [c for c in ranked[1:] if c["ci"][1] >= best["ci"][0] and best["ci"][1] >= c["ci"][0]]
    lines = [f"{head}: {best['B']} prompts x G = {best['G']}"
             + (f" with {best['correction']}" if delay > 0 else "")
             + f" (learned in {best['learned']} of {best['finished']} seeds, 95% interval "
               f"[{best['ci'][0]:.2f}, {best['ci'][1]:.2f}]; held {best['held']}; final pc {best['pc_final']:.3f})",
             "measured cells (Adam + clip 1e-4, study model; learned / held of seeds, interval, final pc):"]
    for c in ranked:
        lines.append(f"  {c['correction']:10s} {c['B']:>2} x {c['G']:<2}: learned {c['learned']}/{c['finished']} "
                     f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}], held {c['held']}/{c['finished']}, pc {c['pc_final']:.3f}")
    partial = [c for c in cells if c["finished"] < len(SEEDS)]
    if partial:
        lines.append(f"  ({len(partial)} cell(s) at this budget not yet whole: left out)")
    if tied:
        lines.append(f"the intervals do not separate it from {len(tied)} other cell(s): "
                     + ", ".join(f"{c['correction']} {c['B']}x{c['G']}" for c in tied))
    lines += ["§9 and the exact model, beside the measurement:", *theory_answer(samples, delay, correction)]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.budget.recommend", description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, required=True, help="completions per update, N = B x G")
    p.add_argument("--delay", type=int, required=True, help="rollout delay d in policy versions")
    p.add_argument("--correction", default=None, help="a registered correction (default: every measured one)")
    args = p.parse_args(argv)
    try:
        print(answer(args.samples, args.delay, args.correction))
    except OutOfRange as exc:
        print(f"outside the measured range: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
