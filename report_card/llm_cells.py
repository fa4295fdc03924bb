"""The LLM part's cells (:data:`CELLS`: horizon, delay, optimiser arm), its reference corrections, its seeds and
where each arm's committed runs are (:data:`COMMITTED`); :mod:`report_card.llm` reads and runs them."""
from __future__ import annotations

from dataclasses import dataclass

from grids import grid_relpath


@dataclass(frozen=True)
class LLMCell:
    horizon: str
    delay: int
    arm: str

    @property
    def label(self) -> str:
        return f"{self.horizon}, d = {self.delay}, {ARMS[self.arm]}"


ARMS = {"adam": "Adam (the study's)", "adamwclip": "AdamW + decay 0.01 + clip 1.0"}
CELLS = (LLMCell("long", 0, "adam"), LLMCell("long", 64, "adam"), LLMCell("short", 64, "adam"),
         LLMCell("long", 0, "adamwclip"), LLMCell("long", 64, "adamwclip"))
QUICK_CELLS = (LLMCell("short", 64, "adam"),)
REFERENCES = ("topr", "gspo", "vespo", "gmc")
FULL_SEEDS = (0, 1, 2, 3, 4)
QUICK_SEEDS = (0, 1)
COMMITTED = {"adam": (grid_relpath("primary"), grid_relpath("peers_2025")), "adamwclip": (grid_relpath("mechanism"),)}
"""Where each arm's committed runs are (under the results root, :func:`grids.grid_relpath`);
the first folder is the one a new run must share the warm start with, and whose recorded grid
(:func:`grids.recorded_grid`) gives the arm's settings."""
