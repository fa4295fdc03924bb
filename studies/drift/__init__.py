"""The drift study (docs/PREREGISTRATION-DRIFT.md): how far the policy drifts from the one that sampled
its batch, by optimiser and step size, and where each correction's stability boundary lies on that
axis (the drift map and D1-D7). ``python -m studies.drift`` computes its map and verdicts
(:mod:`studies.drift.analysis`)."""
