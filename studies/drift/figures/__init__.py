"""The drift map's figure (F24): shown in the drift study's section (:mod:`studies.report.sections.drift`)."""

FIGURES = [f"{__name__}.f24_drift_map"]
