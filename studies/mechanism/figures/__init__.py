"""The mechanism study's figures (F20, F21): shown in its section
(:func:`studies.report.sections.mechanism.mechanism_section`)."""

FIGURES = [f"{__name__}.{m}" for m in ("f20_mechanism_pc", "f21_mechanism_diagnostics")]
