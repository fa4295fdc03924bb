"""Assemble a card's numbers (:func:`compute`) and write ``CARD.md``, ``CARD.html`` and ``card.json``
(:func:`write`); a correction refused by the validation battery gets a card that says why
(:func:`write_refusal`)."""
from __future__ import annotations

import json
from pathlib import Path

import estimators
from estimators.losses import TOKEN_LOSSES
from estimators.params import params_of

from . import exact, llm, llm_cells, robustness, simulate
from .load import EPS, Correction
from .store import Store
from .verdict import RULES, verdict

LABEL = {"bandit": "E1", "token_mdp": "E2"}


def definition(corr: Correction) -> dict:
    knobs = [{"name": p.name, "default": p.default, "symbol": p.symbol, "doc": p.doc} for p in params_of(corr.name)]
    if corr.level == "trajectory":
        s = estimators.get_scheme(corr.name)
        flags = {"family": s.family, "declared in C_eps": s.in_class, "reads advantages": s.needs_advantages,
                 "bounded": s.bounded, "surrogate": s.surrogate, "couples the groups of a batch": s.batch_coupled}
        doc = s.doc
    else:
        t = TOKEN_LOSSES[corr.name]
        flags = {"extra options": list(t.options) or "none", "bounded": t.bounded,
                 "couples the groups of a batch": t.batch_coupled}
        doc = t.doc
    return {"level": corr.level, "source": corr.source, "doc": doc, "knobs": knobs, "flags": flags}


_POINTS: dict = {}


def theory8(corr: Correction, G: int = 8, groups: int = 16) -> dict:
    """THEORY §8's normalising-optimiser quantities from ``bounds.normalised`` (absent: pending): the
    per-trajectory share bound ``c_max / (B G)`` (:func:`bounds.normalised.trajectory_share_bound`) at
    the study's batch (B = 16 groups of G = 8) and for one group, where §8.3's table has the scheme;
    and at the exact points of claims 20-22 (:func:`claims.normalised.points`, quick set) the exact
    per-coordinate probability that the estimate's sign is not grad J's
    (:func:`simulators.normalised.coordinate_sign_law`, ``p_le0``) beside §8.3's sign-error bound
    (:func:`bounds.normalised.sign_error_bound`, mass form) where the table has one."""
    try:
        from bounds import normalised
    except ImportError:
        return {"available": False}
    if not all(hasattr(normalised, n) for n in ("trajectory_share_bound", "sign_error_bound", "SIGN_TABLE")):
        return {"available": False}
    row = normalised.SIGN_TABLE.get(corr.name)
    out = {"available": True, "row": row is not None, "schemes": sorted(normalised.SIGN_TABLE), "G": G,
           "groups": groups, "points": []}
    if row is not None:
        out["share_batch"] = float(normalised.trajectory_share_bound(corr.name, G, EPS, groups))
        out["share_group"] = float(normalised.trajectory_share_bound(corr.name, G, EPS, 1))
    if corr.level != "trajectory" or estimators.get_scheme(corr.name).batch_coupled:
        return out
    import numpy as np

    from claims.normalised import points
    from simulators.normalised import coordinate_sign_law

    if "quick" not in _POINTS:
        _POINTS["quick"] = points(quick=True)
    for p in _POINTS["quick"]:
        law = coordinate_sign_law(p["lr"], p["lpb"], p["rew"], p["S"], p["grad"], p["G"], EPS, [corr.name])[corr.name]
        nz = p["grad"] != 0
        rec = {"point": p["name"], "G": p["G"], "coordinates": int(nz.sum()),
               "p_sign_median": float(np.median(law["p_le0"][nz])), "p_sign_max": float(law["p_le0"][nz].max())}
        if row is not None and row.get("mass_sq") is not None:
            with np.errstate(invalid="ignore"):
                b = np.asarray(normalised.sign_error_bound(corr.name, np.abs(p["grad"]), p["M"], p["sigma2"], p["G"],
                                                           EPS, "mass", p["mu4"]), float)[nz]
            if np.isfinite(b).any():
                rec["bound_median"] = float(np.nanmedian(b))
                rec["bound_below_1"] = float(np.mean(b < 1))
        out["points"].append(rec)
    return out


def compute(corr: Correction, card_dir: Path, *, quick: bool, jobs: int = 2, new_runs: bool = True,
            llm_overrides: dict | None = None, llm_seeds: tuple[int, ...] | None = None,
            sim_seeds: list[int] | None = None, command: str = "", log=print) -> dict:
    """Every part of the card, in order (``llm_overrides``, ``llm_seeds`` and ``sim_seeds``: a test's
    smaller settings, stated on the card)."""
    store = Store(card_dir)
    card = {"name": corr.name, "level": corr.level, "quick": quick, "new_runs": new_runs, "eps": EPS,
            "command": command or llm.command(corr, quick), "definition": definition(corr),
            "validation": corr.validation}
    log("membership ...")
    card["membership"] = exact.membership(corr)
    log("robustness sweep ...")
    card["robustness"] = robustness.sweep(corr.name)
    log("exact bias and second moment (E1, E2) ...")
    committed = exact.committed_peers()
    mine = exact.moments(corr, committed) if not corr.is_new else None
    if mine is None:
        key = {"digest": corr.digest, "part": "peers"}
        mine = store.get("peers", key)
        if mine is None:
            mine = exact.moments(corr, committed)
            store.put("peers", key, mine.drop(columns=["bias_vec"], errors="ignore"))
    card["moments_source"] = str(mine["source"].iloc[0]) if "source" in mine else "computed"
    card["moments"] = [{k: (float(r[k]) if k not in ("env", "key") else r[k])
                        for k in ("env", "Delta", "key", "bias_norm", "bias_norm_se", "second_moment",
                                  "second_moment_se", "max_norm_ratio")} for _, r in mine.iterrows()]
    card["frontier"] = exact.frontier_place(mine, committed)
    card["figures"] = {"frontier": exact.frontier_figure(mine, committed, card_dir, corr.name)}
    card["theory8"] = theory8(corr)
    log("asynchronous simulator (H = 16) ...")
    card["simulator"] = simulate.run(corr, store, sim_seeds)
    log("LLM study ...")
    card["llm"] = llm.part(corr, card_dir, quick=quick, jobs=jobs, new_runs=new_runs, overrides=llm_overrides,
                           seeds=llm_seeds, log=log)
    card["verdict"] = verdict(card)
    return card


# --------------------------------------------------------------------------- rendering


def _n(x, fmt=".3f") -> str:
    from figures.mdhtml import num

    return num(x, fmt)


def _iv(d: dict) -> str:
    from figures.mdhtml import interval

    return interval(d)


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


def render(card: dict) -> str:
    name = card["name"]
    d = card["definition"]
    L = [f"# Report card: `{name}`", "",
         f"A {card['level']}-level correction ("
         f"{'from ' + d['source'] if d['source'] != 'registered' else 'registered in the toolkit'}), "
         f"eps = {card['eps']:g} throughout. Made by `{card['command']}`"
         + (" (`--quick`: the exact and simulator parts in full, the LLM part's own runs only a 2-seed smoke)"
            if card["quick"] else "")
         + (" (`--no-new-runs`: committed LLM runs only)" if not card.get("new_runs", True) else "")
         + ". Every number below comes from the toolkit's own machinery, named in each "
         "section; nothing is typed in.", ""]
    L += ["## Verdict", "", "| | |", "|---|---|"]
    L += [f"| {h} | {t} |" for h, t in card["verdict"]]
    L += ["", "Rules (written once in `report_card.verdict.RULES`):", ""]
    L += [f"- *{k}*: {t}" for k, t in RULES]
    doc = " ".join((d["doc"] or "(no docstring)").replace("``", "`").split())
    L += ["", "## 1. Definition and knobs", "", f"Its registration's docstring: {doc}", ""]
    L += [f"- {k}: {v}" for k, v in d["flags"].items()]
    L += [f"- knob `{k['name']}` ({k['symbol']}) = {k['default']:g}: {k['doc']}" for k in d["knobs"]] or ["- no knobs"]
    L += ["", "Validation battery (`report_card.load.validate`, before any other part):", ""]
    L += [f"- {r['check']}: {r['evaluated']} evaluated, {r['result']}" for r in card["validation"]]
    m = card["membership"]
    L += ["", "## 2. Membership in C_eps", ""]
    if not m["applies"]:
        L += [f"Not applicable: {m['why']}."]
    else:
        L += [("The registration's declared supremum of a group's mass `(1/G) sum_i c_i` "
              "(`Scheme.group_mass_sup`) against the toolkit's search over ratio vectors "
              "(`simulators.peers.grid_max_mass`: every G = 3 tuple of ratios from a grid with the scheme's "
              "thresholds, every advantage sign pattern). Member of C_eps iff the supremum is <= 1+eps = "
              f"{1 + card['eps']:g}."), "",
              ("| groups per batch | declared sup | search max | declaration | member (declared sup) "
               "| member (search) |"),
              "|---|---|---|---|---|---|"]
        for r in m["rows"]:
            L.append(f"| {r['batch_groups']} | {r['declared_sup']:.6g} | {r['search_max']:.6g} | "
                     f"{'**WRONG**: the search exceeds it' if r['declaration_wrong'] else 'not contradicted'} | "
                     f"{'yes' if r['member_declared_sup'] else 'no'} | {'yes' if r['member_by_search'] else 'no'} |")
        L += ["", f"Declared `in_class` = {m['in_class_declared']}"
              + (" **disagrees** with its own declared supremum." if m["in_class_flag_wrong"] else
                 ", consistent with its declared supremum.")]
    rob = card["robustness"]
    L += ["", "## 3. Finite in value and gradient", "",
          ("The suite's robustness sweep (tests/test_loss_robustness.py), run on this correction by "
          "`report_card.robustness.sweep` through `estimators.losses.policy_loss`: the three padding "
          "conventions (-inf, NaN, huge) in each dtype, and 200 seeded cases of extreme ratios (per-token "
          "log-ratios up to +-1e4), random masks and advantages (0 included), "
          f"""{'bounded: value and gradient must be finite' if rob['bounded']
               else 'declared unbounded: +inf or a ValueError naming the overflow, never NaN'}."""),
          "", "| dtype | cases | failures |", "|---|---|---|"]
    L += [f"| {k} | {v['cases']} | {v['failures']} |" for k, v in rob["by_dtype"].items()]
    L += ["", f"**{'Passed' if rob['passed'] else 'FAILED'}**: {rob['n_failures']} failure(s) in {rob['cases']} cases"
          + (f"; {rob['refused']} case(s) refused by name with a ValueError (not counted as failures), e.g. "
             + "; ".join(f"`{m}`" for m in rob["refusals"]) if rob["refused"] else "")
          + "."]
    L += [f"- {f}" for f in rob["failures"]]
    L += ["", "## 4. Exact bias and second moment (E1, E2) and F9's frontier", "",
          (f"Source: {card['moments_source']}. `simulators.peers.exact_moments` (enumeration of every group; "
          "Monte Carlo `mc_moments` with +-1 s.e. where a batch statistic couples groups) on F9's instances "
          "(E1: bandit 'mild', G = 8; E2: token tree MDP 'threshold', H = 4, G = 4), static delay Delta. "
          "Frontier: `claims.measures.frontier` and `dominators` among every committed estimator of the panel "
          "(results/sim/peers)."), "",
          "| env | Delta | bias norm | second moment | max norm / ((1+eps) M) |", "|---|---|---|---|---|"]
    for r in card["moments"]:
        se = f" +- {r['bias_norm_se']:.2g}" if r["bias_norm_se"] else ""
        L.append(f"| {LABEL.get(r['env'], r['env'])} ({r['key']}) | {r['Delta']:g} | {r['bias_norm']:.4g}{se} | "
                 f"{r['second_moment']:.4g} | {r['max_norm_ratio']:.3g} |")
    L += ["", "| env | Delta | on the frontier | dominated by |", "|---|---|---|---|"]
    L += [f"| {LABEL.get(f['env'], f['env'])} | {f['Delta']:g} | {'yes' if f['on_frontier'] else 'no'} | "
          f"{', '.join(f['dominated_by']) or '-'} |" for f in card["frontier"]]
    if card["figures"].get("frontier"):
        L += ["", f"![F9 with {name}]({card['figures']['frontier']})"]
    from simulators.peers import LENGTH_KNOB

    t8 = card["theory8"]
    L += ["", "## 5. Normalising-optimiser quantities (THEORY §8)", ""]
    if not t8["available"]:
        L += [("Pending: THEORY §8's per-trajectory share bound and sign-error bound are not in `bounds/` yet "
              "(`bounds.normalised`); this section fills in once they land.")]
    else:
        if t8["row"]:
            L += [(f"Per-trajectory share bound `c_max / (B G)` (`bounds.normalised.trajectory_share_bound`, eps = "
                  f"{card['eps']:g}): {t8['share_batch']:.4g} of the batch's nominal mass at the study's batch "
                  f"(B = {t8['groups']} groups of G = {t8['G']}), {t8['share_group']:.4g} of one group's.")]
        else:
            L += [(f"§8.3's table (`bounds.normalised.SIGN_TABLE`) has no row for {name} (it has "
                  f"{', '.join(t8['schemes'])}): no share or sign-error bound is stated for it.")]
        if t8["points"]:
            L += ["", ("Sign errors at the exact points of claims 20-22 (`claims.normalised.points`): over the "
                  "coordinates j with grad_j J != 0, the exact probability that the estimate's coordinate does not "
                  "have grad J's sign, P(sign(grad_j J) g_j <= 0) (`simulators.normalised.coordinate_sign_law`), "
                  "and §8.3's Cantelli bound on it (`bounds.normalised.sign_error_bound`, mass form; 1 is trivial) "
                  "where the table has one."), "",
                  ("| point | G | coordinates | P(sign error), median | max | bound, median "
                   "| share of coordinates with bound < 1 |"),
                  "|---|---|---|---|---|---|---|"]
            L += [f"| {r['point']} | {r['G']} | {r['coordinates']} | {r['p_sign_median']:.3f} "
                  f"| {r['p_sign_max']:.3f} | "
                  f"{_n(r.get('bound_median'))} | {_n(r.get('bound_below_1'), '.2f')} |" for r in t8["points"]]
        else:
            L += ["", ("Sign errors: not evaluated "
                  "(a token-level or batch-coupled correction has no per-group sign law "
                  "in `simulators.normalised`).")]
    sim = card["simulator"]
    L += ["", "## 6. Asynchronous simulator (H = 16)", ""]
    if not sim["applies"]:
        L += [f"Not applicable: {sim['why']}."]
    else:
        st = sim["setting"]
        L += [(f"Source: {sim['source']}. `simulators.async_factorised` on the factorised token MDP (V = {st['V']}, "
              f"H = 16, reward 1 when every token is right, p0 = {st['p0']}, J0 = p0^16), G = {st['G']}, "
              f"T = {st['T']} steps, {len(sim['seeds'])} paired seeds; SGD lr {st['optimizers']['sgd']['lr']:g}, "
              f"Adam / Adam + clip / AdamW + clip lr {st['optimizers']['adam']['lr']:g}, clip at the "
              f"{st['clip']} of the setting's unclipped Adam norms. Collapse: final J < {st['collapse_frac']:g} J0. "
              "Differences: paired 95% t-intervals of final J (`claims.optimizers.paired_interval`). The scheme "
              "runs at its default knobs" + (f" ({name}'s length knob stays at its default, not the simulator's "
                                             "H = 16: a trajectory scheme does not see lengths)"
                                             if name in LENGTH_KNOB else "") + "."), "",
              "| optimiser | d | scheme | mean final J | collapsed | mean ‖∇J‖² |", "|---|---|---|---|---|---|"]
        L += [f"| {r['optimizer']} | {r['d']} | {'**' + r['scheme'] + '**' if r['scheme'] == name else r['scheme']} | "
              f"{r['final_J']:.4f} | {r['collapsed']} / {r['n']} | {r['avg_grad_sq']:.3g} |" for r in sim["table"]]
        L += ["", f"| optimiser | d | {name} minus | final J, mean [95% t-interval] (n) |", "|---|---|---|---|"]
        L += [f"| {x['optimizer']} | {x['d']} | {x['vs']} | {_iv(x)} |" for x in sim["differences"]]
    L += _render_llm(card)
    return "\n".join(L) + "\n"


def _render_llm(card: dict) -> list[str]:
    lp = card["llm"]
    name = card["name"]
    eq = lp["delay0"]
    L = ["", "## 7. LLM study", "",
         "Committed runs read as `grids.run_table.read_runs` reads them (each folder audited by "
         "`grids.check.audit`, each run of the card's cells by `grids.run_table.run_row`): "
         "results/llm/study and "
         "results/llm/study_2025 under the study's Adam, results/llm/mechanism's adamwclip arm under AdamW + decay "
         "0.01 + clip 1.0. A correction's "
         "own runs made by `grids.sweep.run_sweep` on the committed grid's settings, after "
         "`grids.check.check_warm_starts` (refused where this machine's warm start is not the committed "
         "one). Stable: `schema.results`' rule per run, a cell stable when at least "
         f"{lp['stable_fraction']:.0%} of its seeds are. Differences: final held-out pc, {name} minus the reference, "
         "paired by seed, 95% percentile bootstrap (`grids.run_table.paired`, `grids.run_table.bootstrap`). "
         f"Delay 0: {name}'s gradient at ratio 1 is IS's "
         + {"same": "exactly", "scaled": f"times {eq['scale']:.4g}",
            "different": "NOT (it needs its own delay-0 runs)"}[eq["kind"]]
         + " (`report_card.llm.delay0_equivalence`).", ""]
    if lp["smoke_overrides"]:
        L += [(f"Smoke settings (a test's): {json.dumps(lp['smoke_overrides'])}: not the study's, so these runs are "
              "not paired with the committed ones and no difference is formed."), ""]
    L += ["| cell | state | stable seeds | mean final pc | source |", "|---|---|---|---|---|"]
    for c in lp["cells"]:
        s = c.get("self")
        if s is None:
            L.append(f"| {c['label']} | {c['state']} | - | - | - |")
        else:
            L.append(f"| {c['label']} | {c['state']} | {s['stable']} / {s['n']} | {_n(s['pc_final'])} | "
                     f"{s['source']}{' (' + s['note'] + ')' if s.get('note') else ''} |")
    rows = []
    for c in lp["cells"]:
        for r, v in c.get("references", {}).items():
            if not v.get("available"):
                rows.append(f"| {c['label']} | {r} | no committed runs in this cell | - | - |")
                continue
            few = " (fewer than 5 seeds: shown, not ranked)" if v["difference"]["n"] < 5 else ""
            rows.append(f"| {c['label']} | {r} | {v['stable']} / {v['n']}, {_n(v['pc_final'])} | "
                        f"{_iv(v['difference'])}{few} | {'stable' if v['stable_cell'] else 'unstable'} |")
    if rows:
        L += ["", (f"| cell | reference | its stable seeds, mean final pc | {name} minus it (final pc) "
                   "| reference in the cell |"),
              "|---|---|---|---|---|"] + rows
    missing = [c for c in lp["cells"] if c["state"] in ("not computed", "refused")]
    if missing:
        L += ["", "Not computed here (no committed run of this correction in these cells):", ""]
        for c in missing:
            why = f" Refused: {c['why']}" if c["state"] == "refused" else ""
            L.append(f"- {c['label']}: {len(c.get('runs_needed', []))} runs of seeds "
                     f"{', '.join(map(str, llm_cells.FULL_SEEDS))} ({', '.join(c.get('runs_needed', [])[:2])}, ...), "
                     f"about {_minutes(c.get('cost_s', 0.0))} at 2 runs at a time (the study's measured step "
                     f"costs, `grids.runner.estimate_seconds`), plus the warm start if this machine has none "
                     f"cached.{why}")
        L += ["", f"Command: `{lp['command']}` (resumable; `--dry-run` prices it)."]
    drows = [c for c in lp["cells"] if c.get("drift")]
    if drows:
        L += ["", ("Drift (`llm_runs.drift.summary`: per run the median over updates d .. d + 19 of the KL per token "
              "and of the trajectory chi^2, then the median over the cell's runs) and its place on the drift map "
              "(`llm_runs.drift.place`, read from the drift study's map):"), "",
              "| cell | early KL per token (runs logging it) | early chi^2 (runs) | drift map |", "|---|---|---|---|"]
        for c in drows:
            d = c["drift"]
            where = d["map"] if d["map"] != "placed" else (
                "held at the nearest level: " + (", ".join(d["held_at_nearest_level"]) or "none")
                + "; below the boundary of: " + (", ".join(d["below_boundary"]) or "none"))
            inf = {k: f"; {d[k + '_overflowed']} more overflowed (inf)" if d.get(k + "_overflowed") else ""
                   for k in ("kl", "chi2")}
            L.append(f"| {c['label']} | {_n(d['kl_early'], '.4g')} ({d['kl_runs']}{inf['kl']}) | "
                     f"{_n(d['chi2_early'], '.3g')} ({d['chi2_runs']}{inf['chi2']}) | {where} |")
    return L


def write(card: dict, card_dir: Path) -> list[Path]:
    from figures.mdhtml import to_html

    card_dir.mkdir(parents=True, exist_ok=True)
    md = render(card)
    paths = [card_dir / "CARD.md", card_dir / "CARD.html", card_dir / "card.json"]
    paths[0].write_text(md)
    paths[1].write_text(to_html(md, f"Report card: {card['name']}"))
    paths[2].write_text(card_json(card))
    return paths


def plain(x):
    """``x`` with numpy scalars and arrays as Python numbers and lists, tuples as lists (JSON's values)."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return plain(x.tolist())
    return x


def card_json(card: dict) -> str:
    """``card.json``'s text: strict JSON in the toolkit's one format (:func:`schema.io.dumps_json`: a
    non-finite number is the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, never a bare token a strict
    parser refuses; :func:`schema.io.loads_json` reads it back as the float)."""
    from schema.io import dumps_json

    return dumps_json(plain(card), indent=1, sort_keys=True) + "\n"


def write_refusal(name: str, source: str, error: str, card_dir: Path,
                  when: str = "before any work started") -> tuple[Path, list[str]]:
    """The card of a correction that was refused (the validation battery) or whose card failed to compute:
    what is wrong, nothing else. It replaces every file of an earlier card in ``card_dir`` (``CARD.md``,
    ``CARD.html``, ``card.json``, the figures), so no earlier pass stays beside a refusal. The path of
    ``CARD.md`` and the names of the earlier card's files it replaced or removed."""
    from figures.mdhtml import to_html

    card_dir.mkdir(parents=True, exist_ok=True)
    earlier = sorted(f.name for f in card_dir.iterdir()
                     if f.is_file() and (f.name in ("CARD.md", "CARD.html", "card.json")
                                         or f.suffix in (".png", ".svg", ".pdf")))
    for f in card_dir.iterdir():
        if f.is_file() and f.suffix in (".png", ".svg", ".pdf"):
            f.unlink()
    md = (f"# Report card: `{name}`\n\n**Refused {when}.** The validation battery "
          f"(`report_card.load.validate`: the correction evaluated on a small battery of ratio vectors or batches) "
          f"and the card's computation found:\n\n> {error}\n\nSource: {source}. No other section is computed for a "
          f"correction that fails: fix it and run the same command again.\n")
    p = card_dir / "CARD.md"
    p.write_text(md)
    (card_dir / "CARD.html").write_text(to_html(md, f"Report card: {name} (refused)"))
    doc = {"name": name, "source": source, "refused": True, "passed": False, "error": error, "when": when}
    (card_dir / "card.json").write_text(card_json(doc))
    return p, earlier
