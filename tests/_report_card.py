"""What the report card's test modules share (tests/test_report_card*.py): the fixtures' folder, the
checkout's root, the ``loaded`` fixture (a correction file loaded, unloaded after the test; import
``loaded_fixture`` to use it) and one cell of a card's LLM part."""
from __future__ import annotations

from pathlib import Path

import pytest

from report_card.load import load_correction, unload

FIX = Path(__file__).resolve().parent / "card_fixtures"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(name="loaded")
def loaded_fixture():
    paths = []

    def load(name):
        paths.append(FIX / f"{name}.py")
        return load_correction(paths[-1])

    yield load
    for p in paths:
        unload(p)


def _cell(part, horizon, delay, arm):
    return next(c for c in part["cells"] if c["cell"] == {"horizon": horizon, "delay": delay, "arm": arm})
