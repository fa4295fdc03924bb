"""The report's section on the drift map (``results/llm/drift/verdicts.json``, made by
``python -m studies.drift``), followed by the second-rounding replicate's table
(:mod:`studies.replicate.section`). It only reads those files; what a verdict says is decided there."""
from __future__ import annotations

import math
from pathlib import Path

from grids.run_table import MARGIN
from schema.results import read_json
from studies.fmt import num as _num

OPTIMIZER_NAMES = {"sgd": "SGD", "adamclip": "Adam + clip 1.0"}
D7_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr")  # the pre-registration's five (D7)


def verdicts_path() -> Path:
    """The drift map's ``verdicts.json``, in the folder the grid table names."""
    from grids import grid_folder

    return grid_folder("drift") / "verdicts.json"


def read_verdicts() -> dict | None:
    """The drift map's verdicts (:func:`verdicts_path`), or None before the analysis has run."""
    path = verdicts_path()
    return read_json(path) if path.is_file() else None


def level_entry(v: dict, estimator: str, level: str) -> dict | None:
    """One level of one correction's boundary in the verdicts (drift, stable share, n), or None."""
    for b in v.get("boundaries", []):
        if b["estimator"] == estimator:
            for x in b["levels"]:
                if x["level"] == level:
                    return x
    return None


def _stable_of(x: dict | None) -> str:
    return "n/a" if x is None else f"{round(x['stable_share'] * x['n'])} of {x['n']}"


def _delay0_share(x: dict) -> float | None:
    """The stable share of the level's own delay-0 runs (None: none, or verdicts written before they were kept)."""
    share = x.get("delay0_stable_share")
    return float(share) if x.get("delay0_n") and share is not None and math.isfinite(float(share)) else None


def _delay0_of(x: dict) -> str:
    """The level's own delay-0 runs, "k of n stable"."""
    share = _delay0_share(x)
    return "n/a" if share is None else f"{round(share * x['delay0_n'])} of {x['delay0_n']} stable"


def _fails_at_delay0(x: dict) -> bool:
    """The level fails without staleness: its delay-0 runs are below the map's stable share."""
    from studies.drift.analysis import SHARE

    share = _delay0_share(x)
    return share is not None and share < SHARE


def _boundary(b: list) -> str:
    """``[estimate, low, high, censored]`` as "0.016 [0.013, 0.043]"."""
    est, lo, hi, cens = (list(b) + [None] * 4)[:4]
    side = {"right": "beyond ", "left": "below "}.get(cens, "")
    return f"{side}{_num(est)} [{_num(lo)}, {_num(hi)}]"


def _rate(level: str) -> str:
    """``adamclip1e-05`` -> "lr 1e-05" (the optimiser's name is said beside it)."""
    return next((f"lr {level[len(opt):]}" for opt in OPTIMIZER_NAMES if level.startswith(opt)), level)


def d1_sentence(v: dict | None) -> str:
    """What D1 (drift, not rule) found, in one sentence from the verdicts; "" until it is decided."""
    d1 = (v or {}).get("D1", {})
    if d1.get("verdict") not in ("CONFIRMED", "REFUTED"):
        return ""
    high = [(lv, level_entry(v, "gmc", lv) or {}) for lv in d1.get("sgd_levels_at_or_above_it", [])]
    at = [f"stable in {_stable_of(x or None)} seeds at {_rate(lv)} (early KL {_num(x.get('drift'))}; the same step "
          f"at delay 0: {_delay0_of(x)})" for lv, x in high]
    reach = (f" Under SGD at the steps whose drift reaches the Adam study's (early KL "
             f"{_num(d1.get('adam_study_drift'))}), GMC is " + "; ".join(at) + "." if at else
             f" No SGD level reaches the Adam study's drift (early KL {_num(d1.get('adam_study_drift'))}).")
    if any(_fails_at_delay0(x) for _, x in high):
        reach += (" That step fails without any delay too, so this part of D1 does not isolate the staleness; the "
                  "overlap of the two boundaries carries the verdict.")
    meaning = ("So at matched drift the update rule does not move where GMC fails: the optimiser decides through the "
               "drift it causes (the optimiser and the step were set, the drift was measured)."
               if d1["verdict"] == "CONFIRMED" else "So the update rule matters beyond the drift it causes.")
    return (f"The drift map separates the two (D1 {d1['verdict']}, docs/PREREGISTRATION-DRIFT.md): GMC's failure "
            f"boundary lies at early KL per token {_boundary(d1['boundary_sgd'])} under SGD and "
            f"{_boundary(d1['boundary_adamclip'])} under Adam + clip 1.0 (95% seed-bootstrap intervals).{reach} "
            f"{meaning}")


def d2_sentence(v: dict | None) -> str:
    """D2's numbers (the ordering along the drift) once it is run; "" before."""
    d2 = (v or {}).get("D2", {})
    if "spearman" not in d2:
        return ""
    return (f"D2 {d2['verdict']}: Spearman's rank correlation of the seven corrections' boundaries between the two "
            f"optimisers (censored boundaries at their bound) is {_num(d2['spearman'], '{:.2f}')}, 95% bootstrap "
            f"interval [{_num(d2['low'], '{:.2f}')}, {_num(d2['high'], '{:.2f}')}]; " + _ordering(d2)
            + (f"; TOPR's or VESPO's boundary interval below GMC's: {', '.join(d2['below_gmc'])}"
               if d2.get("below_gmc") else "") + "." + _d2_whole_seeds(v))


def _d2_whole_seeds(v: dict) -> str:
    """Which resampling D2's interval used, and the interval over whole seeds beside it."""
    w = (v.get("beside") or {}).get("d2_whole_seeds")
    if not w:
        return ""
    return (" That interval draws each correction's boundary independently within its own seed-bootstrap "
            "interval (a normal on the log scale), so it resamples corrections, not seeds. The pre-registration "
            "defines one bootstrap, over whole seeds (every run of a seed together, docs/PREREGISTRATION-DRIFT.md, "
            "failure boundary); D2 names no other. Resampling whole seeds (one draw of seeds for every correction "
            f"and both optimisers, {w['n_boot']:,} draws) gives [{_num(w['low'], '{:.2f}')}, "
            f"{_num(w['high'], '{:.2f}')}]" + (
                ", above 0; the verdict stays INCONCLUSIVE because the ordering part does not hold, whichever "
                "interval is read." if w["low"] > 0 and v["D2"]["verdict"] == "INCONCLUSIVE"
                and _ordering(v["D2"]).startswith("short") else "."))


def _ordering(d2: dict) -> str:
    """D2's second part: TOPR's and VESPO's boundaries at or beyond GMC's under both optimisers (point estimates)."""
    short = [f"{e.upper()} under {OPTIMIZER_NAMES[f]} ({_num(d2[f'boundaries_{f}'][e])} against GMC's "
             f"{_num(d2[f'boundaries_{f}']['gmc'])})" for f in ("sgd", "adamclip") for e in ("topr", "vespo")
             if d2[f"boundaries_{f}"][e] < d2[f"boundaries_{f}"]["gmc"]]
    return ("TOPR's and VESPO's boundaries lie at or beyond GMC's under both optimisers" if not short else
            "short of GMC's boundary: " + ", ".join(short))


def _paired(x: dict) -> str:
    return f"{x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]"


def step_control_sentence(v: dict | None) -> str:
    """D3, D4 and D6 (step-size control at Adam + clip, d = 64) in one paragraph once they are run; "" before."""
    v = v or {}
    d3, d4, d6 = (v.get(h, {}) for h in ("D3", "D4", "D6"))
    if "vcpo_minus_topr" not in d3 or "gmcstep" not in d4 or "n" not in d6:
        return ""
    arms = v.get("step_arms", {})

    def share(x):
        return f"{x['stable']} of {x['n']}"

    vcpo = f", itself stable in {share(arms['vcpo-seq_tis'])}" if "vcpo-seq_tis" in arms else ""
    topr = (f" (on TOPR, stable in {share(arms['ess-topr'])}, mean final pc {arms['ess-topr']['pc_final']:.3f})"
            if "ess-topr" in arms else "")
    return (f"Step-size control under Adam + clip 1.0 at the study's rate, d = 64: VCPO's ESS sqrt scaling makes GMC "
            f"and IS stable ({share(d3['ess-gmc'])} and {share(d3['ess-is'])} seeds){topr}, and VCPO's recipe (seq. "
            f"TIS at 8, ESS scaling, OPOB){vcpo}, minus TOPR at the same step is {_paired(d3['vcpo_minus_topr'])} "
            f"in final held-out pc (paired by seed, Holm-adjusted; D3 {d3['verdict']}). GMC's step form of THEORY "
            f"§8 is stable in {share(d4['gmcstep'])}, minus TOPR {_paired(d4['gmcstep_minus_topr'])} (D4 "
            f"{d4['verdict']}). The zero-gradient skip leaves seq_geo_mask under unclipped Adam stable in "
            f"{share(d6)} (D6 {d6['verdict']})." + _step_factors(arms))


def _step_factors(arms: dict) -> str:
    """The step-size factor each arm applied (median over updates after the delay fills, then over runs)."""
    named = (("ess-gmc", "ESS on GMC"), ("ess-is", "ESS on IS"), ("ess-topr", "ESS on TOPR"), ("vcpo-seq_tis", "VCPO"),
             ("gmcstep-gmc", "GMC's step form"))
    have = [(label, arms[k]["lr_scale_median"]) for k, label in named
            if k in arms and math.isfinite(float(arms[k].get("lr_scale_median", math.nan)))]
    if not have:
        return ""
    return (" The factor each control put on the step (median over the updates after the delay fills, then over "
            "runs): " + ", ".join(f"{label} {x:.2f}" for label, x in have) + ". GMC's step form leaves the step "
            "nearly whole, as THEORY §8.4 (item 4) expects when few groups exceed the cap. Whether ESS scaling works "
            "by shortening the step on average (what D7 found sufficient) or by shortening it on the updates whose "
            "ratios are most dispersed, these arms do not separate: a hypothesis either way.")


def d5_sentence(v: dict | None) -> str:
    """D5 (VCPO's predictor) once decided, with the disclosed deviation and the exploratory rule beside it."""
    d5 = (v or {}).get("D5", {})
    if d5.get("verdict") in (None, "INCONCLUSIVE") or "interim_verdict" in d5 or "signals" not in d5:
        return ""

    def counts(x):
        return (f"before {x['hits'][0]} of {x['hits'][1]} held-out collapses and in {x['false_alarms'][0]} of "
                f"{x['false_alarms'][1]} runs that held (Fisher p = {_num(x['p_fisher'])})")

    sig = d5["signals"]
    text = (f"VCPO's predictor (D5 {d5['verdict']}, thresholds chosen on the {d5['train_runs']} study runs the rule "
            f"selects): the group ESS fraction fires {counts(sig['stale/ess'])}, the gradient norm "
            f"{counts(sig['train/grad_norm'])}.")
    dev = d5.get("deviation")
    if dev:
        from studies.drift.analysis import d5_rule

        passes = d5_rule(dev["signals"]) == "CONFIRMED"
        text += (f" Disclosed deviation: chosen on the {dev['train_runs']} runs the pre-registration's text counts, "
                 f"the ESS fraction fires {counts(dev['signals']['stale/ess'])}"
                 + (", which the same rule would call CONFIRMED: the verdict turns on which training runs choose "
                    "the threshold." if passes and d5["verdict"] != "CONFIRMED" else "."))
    x = d5.get("exploratory_from_0", {}).get("stale/ess")
    if x:
        text += (f" Exploratory, not pre-registered (from the first update): {counts(x)}, median lead "
                 f"{_num(x['lead_median'])} updates.")
    return text


def drift_guide(v: dict | None, name=lambda e: e) -> str:
    """Where each correction held on its own drift (its boundary on the early KL its own updates give), and
    the advice: per setting (optimiser and step, which do not depend on the correction), the corrections
    that held and learned there (gain over the warm start above 0); "" while the map is provisional."""
    if not v or v.get("provisional", False) or not v.get("boundaries"):
        return ""
    parts = []
    for opt, label in OPTIMIZER_NAMES.items():
        bs = [b for b in v["boundaries"] if b["optimizer"] == opt and b.get("boundary") is not None]
        failed = sorted((b for b in bs if b.get("censored") != "right"), key=lambda b: b["boundary"])
        held = sorted((b for b in bs if b.get("censored") == "right"), key=lambda b: -b["boundary"])
        text = []
        if failed:
            text.append("; ".join(
                f"{name(b['estimator'])} " + (f"failed already at the smallest drift measured ({_num(b['boundary'])})"
                                              if b.get("censored") == "left" else
                                              f"held below {_num(b['boundary'])} [{_num(b.get('low'))}, "
                                              f"{_num(b.get('high'))}]") for b in failed))
        if held:
            text.append("held at every level measured: " + ", ".join(
                f"{name(b['estimator'])} (up to {_num(b['boundary'])})" for b in held))
        parts.append(f"Under {label}: " + "; ".join(text) + ".")
    study = (v.get("D1") or {}).get("adam_study_drift")
    where = (f" The staleness study's ranking was measured at the Adam study's drift, early KL "
             f"{_num(study)} (GMC's)." if study is not None else "")
    text = ("Where each correction held, on its own drift (the early KL per token: the median over the 20 updates "
            "after the delay fills of the KL between the policy and the one that sampled its batch, measured under "
            "that correction's own updates; `drift/kl` in this toolkit's runs, `python -m llm_runs.drift` reads "
            "verl's and TRL's logs). A drift logged under one correction places a run on that correction's scale "
            "only. " + " ".join(parts) + where)
    gains = (v.get("beside") or {}).get("gains")
    if gains:
        advice = []
        for opt, label in OPTIMIZER_NAMES.items():
            levels = sorted({g["level"] for g in gains if g["optimizer"] == opt},
                            key=lambda lv: float(_rate(lv).split()[-1]))
            per = []
            for lv in levels:
                ok = [name(g["estimator"]) for g in gains if g["optimizer"] == opt and g["level"] == lv
                      and g["held"] and g["learned"]]
                per.append(f"at {_rate(lv)}, " + (", ".join(ok) if ok else "none"))
            advice.append(f"under {label}: " + "; ".join(per))
        text += (" Which correction, at your setting (optimiser and step, at d = 64): use one that held (at least "
                 f"80% of seeds stable) and learned (its gain over the warm start's held-out pc above {MARGIN}, 95% "
                 "interval) there: " + "; ".join(advice) + ".")
    return text


def step_size_lead(v: dict | None, name=lambda e: e) -> str:
    """The plain answer's first sentence when D7 (the step size is the first lever) holds; "" otherwise.
    ``name`` renders an estimator's name."""
    d7 = (v or {}).get("D7", {})
    if d7.get("verdict") != "CONFIRMED":
        return ""
    level = d7["level"]
    shares = {e: _stable_of(level_entry(v, e, level)) for e in D7_ESTIMATORS}
    names = ", ".join(name(e) for e in D7_ESTIMATORS[:-1]) + f" and {name(D7_ESTIMATORS[-1])}"
    held = (f"each stable in {next(iter(shares.values()))} seeds" if len(set(shares.values())) == 1 else
            "stable in " + ", ".join(f"{s} ({name(e)})" for e, s in shares.items()) + " seeds")
    return (f"Lower the step first (D7 CONFIRMED, docs/PREREGISTRATION-DRIFT.md): under Adam + clip 1.0 at "
            f"{_rate(level)}, the smallest rate that gains as much held-out pc at delay 0 as the staleness study's "
            f"setting ({d7['delay0_gain']:+.3f} against {d7['study_gain']:+.3f} over 200 updates), {names} are "
            f"{held} at d = 64. The staleness study's ranking of the corrections is a ranking at its larger step.")


def verdict_cell(v: dict, h: str) -> str:
    """A hypothesis's verdict as the table and the README's drift line show it: the verdict, the reason it is
    not yet run, and for D5, when the pre-registration's two readings of its training runs disagree, both."""
    r = v.get(h, {})
    text = r.get("verdict", "n/a") + (f" ({r['why']})" if "why" in r else "")
    dev = r.get("deviation") if h == "D5" else None
    if dev and "signals" in r:
        from studies.drift.analysis import d5_rule

        other = d5_rule(dev["signals"])
        if other != r["verdict"]:
            def hits(sig):
                x = sig["stale/ess"]
                return f"ESS fraction hits {x['hits'][0]}/{x['hits'][1]}, Fisher p = {_num(x['p_fisher'])}"

            text += (f" on the {r['train_runs']} training runs the rule selects ({hits(r['signals'])}); {other} on "
                     f"the {dev['train_runs']} its text counts ({hits(dev['signals'])})")
    return text


def drift_lines(path: Path) -> list[str]:
    if not path.is_file():
        return [(f"*No drift verdicts yet ({path}): `python -m studies.drift` after `python -m studies.run --grid "
                "drift`.*"), ""]
    v = read_json(path)
    seeds = v.get("seeds_drift", [])
    md = [(f"Pre-registered in `docs/PREREGISTRATION-DRIFT.md`. Whole seeds of the drift grid: {len(seeds)} of 5 "
          f"({', '.join(map(str, seeds)) or 'none'}); of the decisive seeds 5-9: {len(v.get('seeds_decisive', []))}."),
          "", "| hypothesis | verdict |", "|---|---|"]
    for h in ("D1", "D2", "D3", "D4", "D5", "D6", "D7"):
        md.append(f"| {h} | {verdict_cell(v, h)} |")
    md.append("")
    md += [x for text in (d1_sentence(v), d2_sentence(v), step_control_sentence(v), d5_sentence(v), step_size_lead(v),
                          drift_guide(v)) if text for x in (text, "")]
    bounds = v.get("boundaries", [])
    if bounds:
        state = "provisional, on the runs finished so far (not decided)" if v.get("provisional") else "decided"
        md += [(f"The map ({state}): per correction and optimiser, each level's early KL per token (the median over "
               "seeds of the median over updates d..d+19) and its stable share (runs); where a level's own delay-0 "
               "runs are below 80% stable, their share follows (d0: ...): that step fails without staleness."), "",
               "| correction | optimiser | levels: KL, stable (n) | boundary |", "|---|---|---|---|"]
        for b in bounds:
            lv = "; ".join(f"{x['level']}: {_num(x['drift'])}, {x['stable_share']:.0%} ({x['n']})"
                           + (f", d0: {_delay0_of(x)}" if _fails_at_delay0(x) else "") for x in b["levels"])
            cens = {"right": " (none failed: beyond)", "left": " (failed at the smallest)"}.get(b.get("censored"), "")
            md.append(f"| {b['estimator']} | {b['optimizer']} | {lv} | {_num(b['boundary'])}{cens}"
                      f"{_bracket_note(b)} |")
        md.append("")
        md += beside_lines(v)
    d5 = v.get("D5", {})
    for key, label in (("signals", "as pre-registered (rolling median from t = d)"),
                       ("exploratory_from_0", "exploratory, not pre-registered (from the first update)")):
        if d5.get(key):
            md += [f"D5, VCPO's predictor, {label}" + (" (interim)" if "interim_verdict" in d5 else "") + ": "
                   + "; ".join(f"`{c}` ({x['fires']}, threshold {_num(x['threshold'])} chosen on "
                               f"{d5['train_runs']} study runs): hits {x['hits'][0]}/{x['hits'][1]}, false alarms "
                               f"{x['false_alarms'][0]}/{x['false_alarms'][1]} of {d5['held_out_runs']} held-out runs, "
                               f"Fisher p = {_num(x['p_fisher'])}, median lead {_num(x['lead_median'])} updates"
                               for c, x in d5[key].items()) + ".", ""]
    dev = d5.get("deviation")
    if dev:
        md += [f"D5's disclosed deviation: {dev['text']}: "
               + "; ".join(f"`{c}` threshold {_num(x['threshold'])}, hits {x['hits'][0]}/{x['hits'][1]}, false alarms "
                           f"{x['false_alarms'][0]}/{x['false_alarms'][1]}, Fisher p = {_num(x['p_fisher'])}"
                           for c, x in dev["signals"].items()) + ".", ""]
    m6 = v.get("M6_disclosure")
    if m6:
        md += ["The mechanism study's M6 as disclosed beside its verdict: "
               + "; ".join(f"on {k} runs {r['verdict']} (hits {r['hits'][0]}/{r['hits'][1]}, false alarms "
                           f"{r['false_alarms'][0]}/{r['false_alarms'][1]}, Fisher p = {r['p_fisher']:.3f})"
                           for k, r in m6.items()) + ".", ""]
    return md


def _bracket_note(b: dict) -> str:
    """Where an interpolated boundary lies between two tested levels: their drifts and how far apart."""
    br = b.get("bracket")
    if not br:
        return ""
    return (f"; interpolated between the tested KL {_num(br[0])} and {_num(br[1])}, {_factor(br[1] / br[0])} apart, "
            "no level run between")


def _held_learned(g: dict) -> str:
    """A level's last column: held and learned, held without a gain beyond the margin, or did not hold."""
    return "yes" if g["held"] and g["learned"] else f"held, no gain beyond {MARGIN}" if g["held"] else "no"


def _factor(r: float) -> str:
    """A ratio as "5.7x" or "2,088x"."""
    return f"{r:.1f}x" if r < 10 else f"{r:,.0f}x"


def _level_name(opt: str, level: str) -> str:
    return f"{OPTIMIZER_NAMES[opt]} {_rate(level)}"


def beside_lines(v: dict) -> list[str]:
    """What the report shows beside the verdicts (``beside`` in the verdicts, :func:`studies.drift.analysis.beside`):
    the points read after their run's collapse and the map on the pre-collapse window, each level's gain over
    the warm start, and the axis's dependence on the correction. [] for verdicts written without it."""
    bes = v.get("beside")
    if not bes:
        return []
    md = []
    ac = bes["after_collapse"]
    total = sum(x["unstable"] for x in ac.values())
    after = sum(x["after_collapse"] for x in ac.values())
    whole = sum(x["whole_window_after"] for x in ac.values())
    md += [(f"**Drift read after the collapse.** The early window (updates d..d+19) is read after the outcome in "
            f"{after} of the {total} unstable runs on the map (of {sum(x['points'] for x in ac.values())} points): "
            f"their collapse update under the stability rule comes before the window ends ({whole} of them at or "
            "before its first update, so the whole window follows the collapse). "
            + "; ".join(f"{OPTIMIZER_NAMES[o]}: {x['after_collapse']} of {x['unstable']} unstable runs"
                        for o, x in ac.items())
            + ". A drift read there is the collapse's symptom, not its cause. On the pre-collapse window (the 20 "
            "updates ending at the collapse, or at d + 20 when that comes first; the early window for every "
            "other run) the boundaries are:"), "",
           "| correction | optimiser | boundary, early window | boundary, pre-collapse window [95%] | moved |",
           "|---|---|---|---|---|"]
    for b in bes["precollapse_boundaries"]:
        cens = {"right": "beyond ", "left": "below "}.get(b.get("censored"), "")
        moved = ("no" if not b["moved"] else "yes, outside the early interval" if b["outside_early_interval"]
                 else "yes, within the early interval")
        md.append(f"| {b['estimator']} | {b['optimizer']} | {_num(b['early_boundary'])} | {cens}{_num(b['boundary'])} "
                  f"[{_num(b.get('low'))}, {_num(b.get('high'))}] | {moved} |")
    moved = [b for b in bes["precollapse_boundaries"] if b["moved"]]
    out = [b for b in moved if b["outside_early_interval"]]
    md += ["", (f"{len(moved)} of {len(bes['precollapse_boundaries'])} boundaries move on the pre-collapse window"
                + (f"; {len(out)} beyond the early boundary's 95% interval ("
                   + ", ".join(f"{b['estimator']} under {OPTIMIZER_NAMES[b['optimizer']]}" for b in out) + ")"
                   if out else ", none beyond the early boundary's 95% interval") + "."), ""]
    md += [("**Held is not learned.** Each level's gain over the warm start: final held-out pc minus the run's own "
            "first evaluation (the warm start), paired within the run, mean over its seeds with a 95% bootstrap "
            f"interval. *Held*: at least 80% of the seeds stable; *learned*: the gain's interval above {MARGIN} (the "
            "smallest difference in final held-out pc the studies count). The advice below names only corrections "
            "that held and learned."), "",
           ("| optimiser, step | correction | early KL | stable | pc at warm start | gain over warm start [95%] "
            "| held and learned |"), "|---|---|---|---|---|---|---|"]
    for g in bes["gains"]:
        md.append(f"| {_level_name(g['optimizer'], g['level'])} | {g['estimator']} | {_num(g['drift'])} "
                  f"| {g['stable']} of {g['n']} | {g['pc0']:.3f} | {g['gain']:+.3f} [{g['low']:+.3f}, "
                  f"{g['high']:+.3f}] | {_held_learned(g)} |")
    dep = bes["axis_dependence"]
    md += ["", ("**The axis depends on the correction.** The early KL is measured under each correction's own "
                "updates, so one setting (optimiser and step, chosen before any correction acts) sits at different "
                "drifts for different corrections: "
                + "; ".join(f"{_level_name(x['optimizer'], x['level'])}: {_num(x['min'][1])} ({x['min'][0]}) to "
                            f"{_num(x['max'][1])} ({x['max'][0]}), {_factor(x['ratio'])}" for x in dep)
                + ". 'Your drift' is therefore a correction's drift: a run placed by the KL it logged under one "
                "correction is placed on that correction's scale only. The setting itself (optimiser, step, delay) "
                "does not depend on the correction, and the advice is given per setting."), ""]
    return md


def drift_decided(path: Path) -> bool:
    """Whether the drift map is decided (its seeds whole): the report then leads with it."""
    return path.is_file() and not read_json(path).get("provisional", False)


def progress_section(report_dir: Path | None = None, figures_out: Path | None = None, draw_missing: bool = False,
                     figure_sections=None) -> tuple[list[str], list[str], bool]:
    """The drift map (with its figure, when ``figure_sections`` places figures) and the replicate: under
    "Campaigns in progress" while the map is provisional; the map as a section of its own once decided.
    Returns the lines, the figures not drawn and whether the map is decided (the report then leads with it)."""
    from studies.drift.figures import FIGURES as DRIFT_FIGURES
    from studies.replicate.section import comparison_path, replicate_lines

    path = verdicts_path()
    decided = drift_decided(path)
    md = (["## The drift map: where each correction fails as the drift grows", ""] if decided
          else ["## Campaigns in progress", "", "### The drift map", ""])
    missing: list[str] = []
    if figure_sections is not None:
        lines, missing = figure_sections(DRIFT_FIGURES, report_dir, figures_out, draw_missing)
        md += lines
    md += drift_lines(path)
    md += ["### Verdicts under a different rounding (the replicate)", ""]
    md += replicate_lines(comparison_path())
    return md, missing, decided
