"""The budget study's figure (F27): shown in its report section (:mod:`studies.report.sections.budget`)."""

FIGURES = [f"{__name__}.f27_budget_plane"]
