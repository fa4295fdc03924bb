"""The verdict block: where the correction ranks, where it breaks, what dominates it. The rules are
:data:`RULES`, written once here and printed on every card; :func:`verdict` applies them to the
card's numbers and nothing else."""
from __future__ import annotations

import math

RULES = (
    ("declaration", ("The registration's supremum of a group's mass is wrong when the toolkit's search over ratio "
                    "vectors (simulators.peers.grid_max_mass) finds a larger mass than declared; the card then "
                    "uses the search's value, not the declaration.")),
    ("numerics", ("It breaks numerically when any case of the robustness sweep fails: a NaN value or gradient, a "
                 "padded position that changes the value or gets a gradient, a non-finite value or gradient "
                 "where the registration declares it bounded (policy_loss's refusal of such a value included), "
                 "or an exception other than a ValueError (a "
                 "ValueError naming the input is the toolkit's refusal of input outside a loss's domain: "
                 "reported with its count, not a break).")),
    ("frontier", ("On E1 and E2 at F9's largest delay (Delta = 4) it is dominated by every registered estimator "
                 "with both a smaller-or-equal exact bias norm and second moment, one of them strictly "
                 "(claims.measures.dominators); not dominated = on the frontier.")),
    ("simulator", ("In the asynchronous simulator (H = 16) it breaks in an (optimiser, d) cell where any seed "
                  "collapses (final J below half of J0), and is behind GMC, TIC-trunc or TOPR there when the "
                  "paired 95% t-interval of its final J minus theirs lies below 0 (ahead: above 0).")),
    ("llm_breaks", ("In an LLM cell (horizon, d > 0, optimiser) it breaks when fewer than 80% of its seeds are "
                   "stable (grids.run_table.STABLE_FRACTION with schema.results' stability rule).")),
    ("llm_ranks", ("In an LLM cell it is in the top group when it is stable there and its paired 95% bootstrap "
                  "interval (it minus the best other stable reference among TOPR, GSPO, VESPO and GMC, by mean "
                  "final pc) reaches 0 or above; behind when that interval lies below 0. A reference is beaten "
                  "when the interval against it lies above 0. Cells with fewer than 5 paired seeds are "
                  "reported, not ranked.")),
)
MIN_RANKED_SEEDS = 5


def _cells_text(cells) -> str:
    return "; ".join(cells) if cells else "none"


def verdict(card: dict) -> list[tuple[str, str]]:
    """``[(heading, text)]``: ranks, breaks, dominated by (and what was not decided)."""
    out = []
    breaks, ranks, dominated = [], [], []
    m = card.get("membership", {})
    if m.get("applies") and m.get("declaration_wrong"):
        r = next(x for x in m["rows"] if x["declaration_wrong"])
        breaks.append(f"declared sup of a group's mass {r['declared_sup']:.6g} is wrong: the search found "
                      f"{r['search_max']:.6g} (B = {r['batch_groups']})")
    rob = card.get("robustness", {})
    if rob and not rob.get("passed", True):
        bad = [k for k, v in rob["by_dtype"].items() if v["failures"]]
        breaks.append(f"numerics: {rob['n_failures']} of {rob['cases']} robustness cases fail ({', '.join(bad)})")
    for f in card.get("frontier", []):
        if f["Delta"] == max(x["Delta"] for x in card["frontier"] if x["env"] == f["env"]):
            env = {"bandit": "E1", "token_mdp": "E2"}.get(f["env"], f["env"])
            dominated.append(f"{env} (Delta = {f['Delta']:g}, {f['key']}): "
                             + ("on the frontier" if f["on_frontier"]
                                else "dominated by " + ", ".join(f["dominated_by"])))
    sim = card.get("simulator", {})
    if sim.get("applies"):
        name = card["name"]
        for r in sim["table"]:
            if r["scheme"] == name and r["collapsed"]:
                breaks.append(f"simulator {r['optimizer']}, d = {r['d']}: {r['collapsed']} of {r['n']} seeds collapse")
        behind = [f"{d['vs']} ({d['optimizer']}, d = {d['d']})" for d in sim["differences"]
                  if not math.isnan(d["high"]) and d["high"] < 0]
        ahead = [f"{d['vs']} ({d['optimizer']}, d = {d['d']})" for d in sim["differences"]
                 if not math.isnan(d["low"]) and d["low"] > 0]
        ranks.append("simulator: behind " + _cells_text(behind) + "; ahead of " + _cells_text(ahead))
    llm = card.get("llm", {})
    top, behind_cells, unranked = [], [], []
    for c in llm.get("cells", []):
        s = c.get("self")
        if s is None or c["cell"]["delay"] == 0:
            continue
        if s["n"] and not s["stable_cell"]:
            breaks.append(f"LLM {c['label']}: {s['stable']} of {s['n']} seeds stable")
        refs = {k: v for k, v in c.get("references", {}).items() if v.get("available")}
        stable_refs = {k: v for k, v in refs.items() if v["stable_cell"]}
        if s["n"] < MIN_RANKED_SEEDS or not stable_refs:
            unranked.append(c["label"])
            continue
        best = max(stable_refs, key=lambda k: stable_refs[k]["pc_final"])
        d = stable_refs[best]["difference"]
        beaten = [k for k, v in refs.items() if v["difference"]["low"] > 0]
        if s["stable_cell"] and d["high"] >= 0:
            top.append(f"{c['label']} (minus {best} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
                       + (f"; beats {', '.join(beaten)}" if beaten else "") + ")")
        else:
            behind_cells.append(f"{c['label']} (minus {best} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])")
    if llm:
        ranks.append("LLM top group: " + _cells_text(top) + ". Behind: " + _cells_text(behind_cells)
                     + (". Not ranked (fewer than 5 paired seeds or no stable reference): " + "; ".join(unranked)
                        if unranked else ""))
    out.append(("Where it ranks", " ".join(f"{r}." for r in ranks) if ranks else "no ranked part"))
    out.append(("Where it breaks", _cells_text(breaks)))
    out.append(("What dominates it (F9)", _cells_text(dominated) if dominated else "not applicable"))
    return out
