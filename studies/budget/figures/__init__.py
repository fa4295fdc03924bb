"""The budget study's figure (F27): shown in its report section (:mod:`studies.budget.section`)."""

FIGURES = [f"{__name__}.f27_budget_plane"]
