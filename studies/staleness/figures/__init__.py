"""The staleness study's figures (F10-F13), drawn by ``python -m studies.figures`` with every other and shown in
the report's first section (:func:`studies.report.sections.staleness.study_section`)."""

FIGURES = [f"{__name__}.{m}" for m in ("f10_study_differences", "f11_study_pc_vs_delay", "f12_chi2_vs_horizon",
                                       "f13_theory_in_the_loop")]
