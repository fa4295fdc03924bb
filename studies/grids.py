"""Every LLM grid of the studies, by name (:data:`GRIDS`): each study's ``grids.py`` defines its own
(:class:`grids.spec.Grid`, data), and this table collects them for ``python -m studies.run``
and the analyses. Where each grid's runs live is :func:`grids.grid_folder` (``results/llm/<grid name>`` by
convention); a test holds every grid to its folder and to the settings its committed folder records."""
from __future__ import annotations

from .budget.grids import GRIDS as _BUDGET
from .corrections_2025.grids import GRIDS as _CORRECTIONS_2025
from .corrections_2026.grids import GRIDS as _CORRECTIONS_2026
from .drift.grids import GRIDS as _DRIFT
from .group_size.grids import GRIDS as _GROUP_SIZE
from .mechanism.grids import GRIDS as _MECHANISM
from .replicate.grids import GRIDS as _REPLICATE
from .scale.grids import GRIDS as _SCALE
from .staleness.grids import GRIDS as _STALENESS

GRIDS = {**_STALENESS, **_MECHANISM, **_SCALE, **_CORRECTIONS_2025, **_DRIFT, **_REPLICATE, **_GROUP_SIZE,
           **_CORRECTIONS_2026, **_BUDGET}
"""Grid name -> :class:`grids.spec.Grid`, every study's grids."""
