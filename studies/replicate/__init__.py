"""The second-rounding replicate: the committed study's and mechanism grid's cells rerun with a forced
AVX2 kernel path, asking whether every verdict survives a different floating-point rounding.
``python -m studies.replicate`` writes the comparison (:mod:`studies.replicate.analysis`)."""
