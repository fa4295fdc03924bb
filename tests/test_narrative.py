"""The research narrative's generated blocks (studies.report.narrative): each is the one its renderer writes from the
committed results, and the block machinery finds, refuses and rewrites blocks as it says."""
from __future__ import annotations

import pytest

from studies.report import narrative


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return narrative.render()


def test_every_block_of_the_page_is_the_rendered_one(rendered):
    found = narrative.page_blocks(narrative.PAGE.read_text())
    assert set(found) == set(narrative.BLOCKS)
    for name, body in rendered.items():
        assert found[name] == body, f"{name} is stale: python -m studies.report.narrative --write"


def test_the_table_holds_every_correction_and_cell(rendered):
    table = rendered["peers-2025"].strip().splitlines()
    assert len(table) == 2 + len(narrative.PEERS_2025) + len(narrative.STUDY_ROWS)
    assert all(row.count("|") == len(narrative.CELLS) + 2 for row in table)
    assert table[2].count("**") == 2  # the best correction's long, d = 64 cell


def test_a_cell_is_counted_from_the_summary_rows():
    rows = [{"estimator": "gmc", "horizon": "long", "delay": "64", "stable": s, "pc_final": pc}
            for s, pc in (("True", "0.5"), ("False", "0.1"), ("True", "0.3"))]
    assert narrative.cell_outcome(rows, "gmc", "long", 64) == (2, 3, pytest.approx(0.3))
    with pytest.raises(ValueError, match="no run of 'topr' at horizon 'long', delay 64"):
        narrative.cell_outcome(rows, "topr", "long", 64)


def test_blocks_are_found_refused_and_rewritten():
    text = ("a <!-- delay0-gain:start (x) -->old<!-- delay0-gain:end --> b\n"
            "<!-- short-horizon:start -->s<!-- short-horizon:end --><!-- peers-2025:start -->\n|t|\n"
            "<!-- peers-2025:end --><!-- warning-auc:start -->1<!-- warning-auc:end -->")
    assert narrative.page_blocks(text)["delay0-gain"] == "old"
    new = narrative.rewrite(text, {"delay0-gain": "+0.1 to +0.2"})
    assert new.startswith("a <!-- delay0-gain:start (x) -->+0.1 to +0.2<!-- delay0-gain:end --> b\n")
    with pytest.raises(ValueError, match="no 'delay0-gain' block"):
        narrative.page_blocks(text.replace("delay0-gain", "other"))


@pytest.mark.parametrize(("tear", "message"), [
    (lambda p: p.write_text(p.read_text()[:40]), "not readable JSON"),
    (lambda p: p.unlink(), "a source of the README's findings is missing"),
])
def test_a_torn_or_missing_verdict_file_is_named(tmp_path, tear, message):
    """The findings and the narrative read the committed verdict files: a torn or missing one is named by its path,
    never a bare JSON error or a traceback of the commands."""
    import shutil

    from studies.report.verdict_files import RESULTS, SOURCES, load, source_path

    for key in SOURCES:
        dest = source_path(key, tmp_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source_path(key, RESULTS), dest)
    assert set(load(tmp_path)) == set(SOURCES)
    torn = source_path("drift", tmp_path)
    tear(torn)
    with pytest.raises((ValueError, FileNotFoundError), match=message) as e:
        load(tmp_path)
    assert str(torn) in str(e.value)
