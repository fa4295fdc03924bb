"""Claim 24 (an addition, the LLM measurement): the abstract's group-size law on the LLM's own frozen pairs.

The paper states that "for fixed behaviour and current policies, the bias introduced by group rescaling
vanishes as G grows, whereas the bias from trajectory-wise clipping can persist". THEORY proves it for
the mass bias (claims 7, 8) and the simulators check it exactly on E1-E3. This claim checks it where no
theorem reaches: on (pi_b, pi) pairs of the toolkit's own GRPO runs on a Qwen3-architecture model,
measured by ``python -m studies.group_size.pairs`` into ``results/llm/group_size/pairs.json`` (the
expected update of each correction at each G over pools of completions, the bias by cross-products of
independent replicates against an independent on-policy target; docs/PREREGISTRATION-GROUP-SIZE.md).

Stated as two parts, read off the committed measurement:

* **GMC's bias vanishes**: the pre-registered test G1, as the study decides
  it (at every pair passing its gates where GMC's cap binds at G = 2, the squared relative bias at
  G = 128 is below the one at G = 2, one-sided, Holm; at the low-drift pairs it is within two standard
  errors of 0 from some G <= 32 on), CONFIRMED;
* **clipping's persists**: at every such pair TIC-trunc's squared relative bias exceeds two standard
  errors at every measured G (it is the same vector at every G: the gates check that).

The check does no measurement of its own (it costs milliseconds) and needs all eight pre-registered pairs:
with fewer it is an ERROR, never a PASS. A rerun of the measurement that moves a verdict shows here as a
mismatch with THEORY's ledger.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from stats import holm, one_sided_drop

from .result import Result

ALPHA = 0.05
CAP_BINDS = 0.01
"""G1: GMC's cap binds at G = 2 when more than this share of its groups has lambda < 1."""
LOW_DRIFT_ESS = 0.5
PAIR_NAMES = tuple(f"p{i}" for i in range(1, 9))


def not_run(why: str) -> dict:
    return {"verdict": "INCONCLUSIVE", "why": f"not yet run: {why}"}


def not_yet_run(decision: dict) -> bool:
    """Whether a decision (a hypothesis of ``verdicts.json``) is :func:`not_run`'s: its design not yet whole."""
    return str(decision.get("why", "")).startswith("not yet run")


def pair_rows(doc: dict, pair: str, est: str) -> dict[int, dict]:
    return {int(r["G"]): r for r in doc["pairs"][pair]["rows"] if r["estimator"] == est}


def g1(doc: dict | None) -> dict:
    """G1 as pre-registered: GMC's squared relative bias falls from G = 2 to G = 128 at every qualifying pair
    (Holm), and reaches 0 (within 2 s.e.) by G = 32 at the low-drift pairs."""
    have = sorted(doc["pairs"]) if doc else []
    missing = [p for p in PAIR_NAMES if p not in have or doc["pairs"][p].get("quick")]
    if missing:
        return not_run(f"pairs {', '.join(missing)} not measured")
    failed = [p for p in have if not doc["pairs"][p]["gates"]["passed"]]
    per, qual = {}, []
    for p in have:
        if p in failed:
            continue
        g = pair_rows(doc, p, "gmc")
        if g[2]["cap_share"] > CAP_BINDS:
            qual.append(p)
            per[p] = {"drop": one_sided_drop(g[2]["rel_bias_sq"], g[2]["se"], g[128]["rel_bias_sq"], g[128]["se"]),
                      "rise": one_sided_drop(g[128]["rel_bias_sq"], g[128]["se"], g[2]["rel_bias_sq"], g[2]["se"])}
    low = {}
    for p in have:
        if p in failed or doc["pairs"][p]["drift_ess"] < LOW_DRIFT_ESS:
            continue
        g = pair_rows(doc, p, "gmc")
        Gs = sorted(g)
        zero_from = next((G for G in Gs if all(abs(g[H]["rel_bias_sq"]) <= 2 * g[H]["se"] for H in Gs if H >= G)), None)
        above = all(g[H]["rel_bias_sq"] > 2 * g[H]["se"] for H in (32, 64, 128) if H in g)
        low[p] = {"zero_from_G": zero_from, "above_at_32_64_128": above}
    if len(qual) < 3:
        return {"verdict": "INCONCLUSIVE", "why": f"{len(qual)} pairs qualify (cap binds at G = 2, gates passed); "
                f"3 needed", "pairs": per, "low_drift": low, "failed_gates": failed}
    drop = holm({p: per[p]["drop"]["p"] for p in qual}, ALPHA)
    rise = holm({p: per[p]["rise"]["p"] for p in qual}, ALPHA)
    for p in qual:
        per[p]["drop_rejected_holm"], per[p]["rise_rejected_holm"] = bool(drop[p]), bool(rise[p])
    drops = all(drop[p] for p in qual)
    zero = all(v["zero_from_G"] is not None and v["zero_from_G"] <= 32 for v in low.values())
    if drops and zero:
        verdict = "CONFIRMED"
    elif any(rise[p] for p in qual) or any(v["above_at_32_64_128"] for v in low.values()):
        verdict = "REFUTED"
    else:
        verdict = "INCONCLUSIVE"
    return {"verdict": verdict, "qualifying": qual, "pairs": per, "low_drift": low, "failed_gates": failed}


HALF = 0.5
"""G2: the group size at which GMC's squared bias is half of TIC-trunc's."""


def g_half(Gs, ratio) -> tuple[float | None, str | None]:
    """The G where ``ratio`` (GMC's squared bias over TIC-trunc's, per G in ``Gs``) first falls to
    :data:`HALF`, interpolated linearly in (log G, log ratio) between the last G above it and the first
    at or below it. ``(Gs[0], "left")`` when the first G is already at or below; ``(Gs[-1], "right")``
    when no G reaches it (censored). Non-positive ratios count as 0 (below)."""
    Gs, ratio = list(Gs), [float(r) for r in ratio]
    for i, (G, r) in enumerate(zip(Gs, ratio)):
        if r <= HALF:
            if i == 0:
                return float(G), "left"
            G0, r0 = Gs[i - 1], ratio[i - 1]
            if r <= 0:
                return float(G), None
            f = (math.log(r0) - math.log(HALF)) / (math.log(r0) - math.log(r))
            return float(math.exp(math.log(G0) + f * (math.log(G) - math.log(G0)))), None
    return float(Gs[-1]), "right"


def fit_law(chi2, Ghalf) -> dict:
    """OLS of log G_half on log chi^2 with the slope's 95% t-interval (the law G_half = a chi2^b)."""
    from scipy import stats

    x, y = np.log(np.asarray(chi2, float)), np.log(np.asarray(Ghalf, float))
    if len(x) < 3:
        return {"n": len(x), "b": None, "low": None, "high": None, "a": None}
    res = stats.linregress(x, y)
    t = stats.t.ppf(0.975, len(x) - 2)
    return {"n": len(x), "b": float(res.slope), "low": float(res.slope - t * res.stderr),
            "high": float(res.slope + t * res.stderr), "a": float(math.exp(res.intercept))}


def g2(doc: dict | None, predicted_b: float) -> dict:
    """G2: the law of G_half against the pair's chi^2, its slope against the exact model's."""
    have = sorted(doc["pairs"]) if doc else []
    missing = [p for p in PAIR_NAMES if p not in have or doc["pairs"][p].get("quick")]
    if missing:
        return not_run(f"pairs {', '.join(missing)} not measured")
    pts, per = [], {}
    for p in have:
        if not doc["pairs"][p]["gates"]["passed"]:
            continue
        g, t = pair_rows(doc, p, "gmc"), pair_rows(doc, p, "tic_trunc")
        Gs = sorted(g)
        trunc = float(np.mean([t[G]["rel_bias_sq"] for G in Gs]))
        ratio = [g[G]["rel_bias_sq"] / trunc if trunc > 0 else math.inf for G in Gs]
        Gh, cens = g_half(Gs, ratio)
        chi2 = doc["pairs"][p]["drift_chi2"]
        per[p] = {"chi2": chi2, "G_half": Gh, "censored": cens, "tic_trunc_mean": trunc}
        if cens is None:
            pts.append((chi2, Gh))
    law = fit_law(*zip(*pts)) if len(pts) >= 3 else fit_law([], [])
    if law["b"] is None:
        return {"verdict": "INCONCLUSIVE", "why": f"{len(pts)} uncensored pairs; 3 needed", "pairs": per,
                "law": law, "predicted_b": predicted_b}
    inside = law["low"] <= predicted_b <= law["high"]
    return {"verdict": "CONFIRMED" if inside else "REFUTED", "pairs": per, "law": law, "predicted_b": predicted_b}


def _decided(path, decide) -> tuple[Path, dict, dict]:
    """The committed measurement at ``path`` (default: the group-size grid's ``pairs.json``) and ``decide``'s
    verdict on it; a measurement short of the eight pre-registered pairs is an error, never a verdict."""
    from grids import grid_folder
    from schema.results import read_json

    path = Path(path) if path is not None else grid_folder("group_size") / "pairs.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no frozen-pair measurement (python -m studies.group_size.pairs)")
    doc = read_json(path)
    dec = decide(doc)
    if not_yet_run(dec):
        raise ValueError(f"{path}: {dec['why']}; the claim is decided on all eight pre-registered pairs")
    return path, doc, dec


def _failures(doc: dict, dec: dict) -> list[dict]:
    """The pairs where a part fails, in pair order: GMC's bias rose or did not fall (Holm), a low-drift pair
    never reached 0 by G = 32, TIC-trunc's bias within two s.e. of 0 at some G."""
    out = []
    low = dec.get("low_drift", {})
    for p in sorted(set(dec.get("qualifying", [])) | set(low)):
        g, t = pair_rows(doc, p, "gmc"), pair_rows(doc, p, "tic_trunc")
        why = []
        if p in dec["pairs"] and not dec["pairs"][p].get("drop_rejected_holm"):
            why.append("gmc no drop")
        zero_from = low[p]["zero_from_G"] if p in low else None
        if p in low and (zero_from is None or zero_from > 32):
            why.append("gmc not 0 by G=32")
        if p in dec["pairs"] and any(t[G]["rel_bias_sq"] <= 2 * t[G]["se"] for G in t):
            why.append("tic_trunc 0")
        if why:
            out.append({"pair": p, "why": why, "gmc_2": g[2]["rel_bias_sq"], "gmc_128": g[128]["rel_bias_sq"],
                        "trunc_min": min(t[G]["rel_bias_sq"] for G in t)})
    return out


def check_24(quick: bool = False, path: Path | str | None = None) -> Result:
    """The group-size law on the LLM's frozen pairs (``quick`` changes nothing: the check reads a file)."""
    path, doc, dec = _decided(path, g1)
    failed = _failures(doc, dec)
    ok = dec["verdict"] == "CONFIRMED" and not failed
    qual = dec.get("qualifying", [])
    rows = "; ".join(
        f"{p} (chi2 {doc['pairs'][p]['drift_chi2']:.3g}): GMC {_g(doc, p, 'gmc', 2):.3f} at G=2 -> "
        f"{_g(doc, p, 'gmc', 128):.3f} at G=128, TIC-trunc {_g(doc, p, 'tic_trunc', 2):.3f}" for p in qual)
    refuted = ()
    if failed:
        f = failed[0]
        refuted = ({"point": f"{f['pair']} ({', '.join(f['why'])})",
                    "values": {"gmc rel_bias_sq G=2": round(f["gmc_2"], 3),
                               "gmc rel_bias_sq G=128": round(f["gmc_128"], 3),
                               "tic_trunc min rel_bias_sq": round(f["trunc_min"], 3)}},)
    return Result.of(
        ok, "G1 CONFIRMED; TIC-trunc's squared relative bias > 2 s.e. at every G, at every qualifying pair",
        f"G1 {dec['verdict']}; {len(qual)} qualifying pairs, {len(failed)} failing a part",
        "one-sided alpha 0.05 (Holm); 2 jackknife s.e.",
        f"{path.name}: gates failed at {', '.join(dec.get('failed_gates', [])) or 'no pair'}; " + rows,
        refuted_at=refuted)


def _g(doc: dict, pair: str, est: str, G: int) -> float:
    return float(pair_rows(doc, pair, est)[G]["rel_bias_sq"])


PREDICTIONS = Path(__file__).resolve().parents[1] / "studies" / "group_size" / "predictions.json"
"""The exact models' predictions, committed with the pre-registration before any pair was measured."""


def check_26(quick: bool = False, path: Path | str | None = None, predictions: Path | str = PREDICTIONS) -> Result:
    """How large G must be on the LLM's pairs: the law G_half = a chi2^b (G_half: the G at which GMC's squared
    relative bias falls to half of TIC-trunc's) has the exponent E3 (the lognormal ratio model) predicts, E3's b
    inside the LLM fit's 95% interval: the pre-registered test G2 (``quick`` changes nothing)."""
    from schema.results import read_json

    predicted = read_json(Path(predictions))["lognormal"]["law"]
    path, _, dec = _decided(path, lambda doc: g2(doc, predicted["b"]))
    law = dec["law"]
    pts = "; ".join(f"{p} chi2 {v['chi2']:.3g}: G_half {v['G_half']:.3g}"
                    + (f" ({v['censored']}-censored)" if v["censored"] else "") for p, v in dec["pairs"].items())
    refuted = ()
    if dec["verdict"] == "REFUTED":
        refuted = ({"point": f"the LLM pairs ({law['n']} uncensored)",
                    "values": {"LLM b": round(law["b"], 3), "LLM b low": round(law["low"], 3),
                               "LLM b high": round(law["high"], 3), "E3 b": round(predicted["b"], 3)}},)
    fit = ("no fit" if law["b"] is None else
           f"b = {law['b']:.3f} [{law['low']:.3f}, {law['high']:.3f}], a = {law['a']:.3g}")
    return Result.of(
        dec["verdict"] == "CONFIRMED",
        f"E3's b = {predicted['b']:.3f} [{predicted['low']:.3f}, {predicted['high']:.3f}] inside the LLM's interval",
        f"G2 {dec['verdict']}: LLM {fit}", "the fit's 95% t-interval",
        f"{path.name}: " + pts, refuted_at=refuted)


__all__ = ["PREDICTIONS", "check_24", "check_26", "fit_law", "g1", "g2", "g_half"]
