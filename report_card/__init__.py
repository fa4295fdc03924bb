"""Report cards: ``python -m report_card`` checks one stale-rollout correction (registered, or from a
file outside the package) on the toolkit's exact benchmark, simulators and paired LLM runs, and
writes ``results/cards/<name>/CARD.md`` (README, "Add a correction in three steps")."""
