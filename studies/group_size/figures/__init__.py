"""The group-size study's figures (F25, F26): shown in its report section (:mod:`studies.group_size.section`)."""

FIGURES = [f"{__name__}.f25_pair_bias_vs_g", f"{__name__}.f26_boundary_vs_g"]
