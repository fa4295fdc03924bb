"""The drift map's figure (F24): shown in the drift study's section (:mod:`studies.drift.section`)."""

FIGURES = [f"{__name__}.f24_drift_map"]
