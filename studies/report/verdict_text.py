"""The drift map's verdicts (``results/llm/drift/verdicts.json``, made by ``python -m studies.drift``) in words:
one sentence per verdict, which the drift section (:mod:`studies.report.sections.drift`), the other studies'
sections and the README's findings quote. It only reads the verdicts; what a verdict says is decided there."""
from __future__ import annotations

import math
from pathlib import Path

from grids.run_table import MARGIN
from schema.results import read_json
from studies.report.fmt import num as _num

OPTIMIZER_NAMES = {"sgd": "SGD", "adamclip": "Adam + clip 1.0"}
D7_ESTIMATORS = ("gmc", "is", "tic_mask", "tic_trunc", "topr")  # the pre-registration's five (D7)


def verdicts_path() -> Path:
    """The drift map's ``verdicts.json``, in the folder the grid table names."""
    from grids.run_table import grid_folder

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


def stable_of(x: dict | None) -> str:
    return "n/a" if x is None else f"{round(x['stable_share'] * x['n'])} of {x['n']}"


def _delay0_share(x: dict) -> float | None:
    """The stable share of the level's own delay-0 runs (None: none, or verdicts written before they were kept)."""
    share = x.get("delay0_stable_share")
    return float(share) if x.get("delay0_n") and share is not None and math.isfinite(float(share)) else None


def delay0_of(x: dict) -> str:
    """The level's own delay-0 runs, "k of n stable"."""
    share = _delay0_share(x)
    return "n/a" if share is None else f"{round(share * x['delay0_n'])} of {x['delay0_n']} stable"


def fails_at_delay0(x: dict) -> bool:
    """The level fails without staleness: its delay-0 runs are below the map's stable share."""
    from studies.common.drift_map import SHARE

    share = _delay0_share(x)
    return share is not None and share < SHARE


def _boundary(b: list) -> str:
    """``[estimate, low, high, censored]`` as "0.016 [0.013, 0.043]"."""
    est, lo, hi, cens = (list(b) + [None] * 4)[:4]
    side = {"right": "beyond ", "left": "below "}.get(cens, "")
    return f"{side}{_num(est)} [{_num(lo)}, {_num(hi)}]"


def rate_words(level: str) -> str:
    """``adamclip1e-05`` -> "lr 1e-05" (the optimiser's name is said beside it)."""
    return next((f"lr {level[len(opt):]}" for opt in OPTIMIZER_NAMES if level.startswith(opt)), level)


def d1_sentence(v: dict | None) -> str:
    """What D1 (drift, not rule) found, in one sentence from the verdicts; "" until it is decided."""
    d1 = (v or {}).get("D1", {})
    if d1.get("verdict") not in ("CONFIRMED", "REFUTED"):
        return ""
    high = [(lv, level_entry(v, "gmc", lv) or {}) for lv in d1.get("sgd_levels_at_or_above_it", [])]
    at = [f"stable in {stable_of(x or None)} seeds at {rate_words(lv)} (early KL {_num(x.get('drift'))}; the same step "
          f"at delay 0: {delay0_of(x)})" for lv, x in high]
    reach = (f" Under SGD at the steps whose drift reaches the Adam study's (early KL "
             f"{_num(d1.get('adam_study_drift'))}), GMC is " + "; ".join(at) + "." if at else
             f" No SGD level reaches the Adam study's drift (early KL {_num(d1.get('adam_study_drift'))}).")
    if any(fails_at_delay0(x) for _, x in high):
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
        from studies.common.d5 import d5_rule

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
                            key=lambda lv: float(rate_words(lv).split()[-1]))
            per = []
            for lv in levels:
                ok = [name(g["estimator"]) for g in gains if g["optimizer"] == opt and g["level"] == lv
                      and g["held"] and g["learned"]]
                per.append(f"at {rate_words(lv)}, " + (", ".join(ok) if ok else "none"))
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
    shares = {e: stable_of(level_entry(v, e, level)) for e in D7_ESTIMATORS}
    names = ", ".join(name(e) for e in D7_ESTIMATORS[:-1]) + f" and {name(D7_ESTIMATORS[-1])}"
    held = (f"each stable in {next(iter(shares.values()))} seeds" if len(set(shares.values())) == 1 else
            "stable in " + ", ".join(f"{s} ({name(e)})" for e, s in shares.items()) + " seeds")
    return (f"Lower the step first (D7 CONFIRMED, docs/PREREGISTRATION-DRIFT.md): under Adam + clip 1.0 at "
            f"{rate_words(level)}, the smallest rate that gains as much held-out pc at delay 0 as the staleness "
            f"study's "
            f"setting ({d7['delay0_gain']:+.3f} against {d7['study_gain']:+.3f} over 200 updates), {names} are "
            f"{held} at d = 64. The staleness study's ranking of the corrections is a ranking at its larger step.")


def verdict_cell(v: dict, h: str) -> str:
    """A hypothesis's verdict as the table and the README's drift line show it: the verdict, the reason it is
    not yet run, and for D5, when the pre-registration's two readings of its training runs disagree, both."""
    r = v.get(h, {})
    text = r.get("verdict", "n/a") + (f" ({r['why']})" if "why" in r else "")
    dev = r.get("deviation") if h == "D5" else None
    if dev and "signals" in r:
        from studies.common.d5 import d5_rule

        other = d5_rule(dev["signals"])
        if other != r["verdict"]:
            def hits(sig):
                x = sig["stale/ess"]
                return f"ESS fraction hits {x['hits'][0]}/{x['hits'][1]}, Fisher p = {_num(x['p_fisher'])}"

            text += (f" on the {r['train_runs']} training runs the rule selects ({hits(r['signals'])}); {other} on "
                     f"the {dev['train_runs']} its text counts ({hits(dev['signals'])})")
    return text
