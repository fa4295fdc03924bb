"""Draw every figure, the toolkit's and the studies', from the results present (``make figures``).

``python -m studies.figures [--only f1,f10] [--out DIR]``: the toolkit's figures (:data:`figures.registry.FIGURES`:
the theory, the simulators, the first LLM sweep) and each study's (its folder's ``figures/``); PNG and PDF to
``figures/out/``. Exit code 1 if a figure could not be drawn, after drawing all the others. The GPU study's
figure is drawn by the report, where its results exist."""
from __future__ import annotations

from figures.__main__ import main as draw
from figures.registry import FIGURES as TOOLKIT_FIGURES
from studies.budget.figures import FIGURES as BUDGET_FIGURES
from studies.drift.figures import FIGURES as DRIFT_FIGURES
from studies.group_size.figures import FIGURES as GROUP_SIZE_FIGURES
from studies.mechanism.figures import FIGURES as MECHANISM_FIGURES
from studies.staleness.figures import FIGURES as STALENESS_FIGURES

FIGURES = [*TOOLKIT_FIGURES, *STALENESS_FIGURES, *MECHANISM_FIGURES, *DRIFT_FIGURES, *GROUP_SIZE_FIGURES,
           *BUDGET_FIGURES]
"""Every figure ``python -m studies.figures`` draws: toolkit figures by name, the studies' by module path."""


def main(argv=None) -> int:
    return draw(argv, FIGURES, prog="python -m studies.figures", doc=__doc__, elsewhere=None)


if __name__ == "__main__":
    raise SystemExit(main())
