"""The group-size study's figures (F25, F26): shown in its report section
(:mod:`studies.report.sections.group_size`)."""

FIGURES = [f"{__name__}.f25_pair_bias_vs_g", f"{__name__}.f26_boundary_vs_g"]
