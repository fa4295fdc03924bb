"""The early-warning study (docs/PREREGISTRATION-WARNING.md): a statistic whose law does not depend on the
group size G (:mod:`studies.warning.invariance`), a rule chosen on committed runs only
(:mod:`studies.warning.analysis`, frozen in ``frozen.json``) and its verdict on runs made after the freeze
(:mod:`studies.warning.verdict`)."""
