"""The mechanism study (docs/PREREGISTRATION-MECHANISM.md): why GMC collapses under Adam at d = 64 in
the staleness study, asked by optimiser arms (SGD, Adam with clipping, AdamW with clipping), a
per-trajectory cap, a sign-split correction, a larger model and a pre-registered early warning.
``python -m studies.mechanism`` computes its verdicts (:mod:`studies.mechanism.analysis`)."""
