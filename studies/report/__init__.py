"""The report floor: what reads every study and writes for people.

The report (:mod:`studies.report.build`, ``python -m studies.report``), one section per study
(:mod:`studies.report.sections`), the drift family's verdict sentences (:mod:`studies.report.verdict_text`), the
README's findings (:mod:`studies.report.findings`), the narrative's result blocks
(:mod:`studies.report.narrative`), the index of committed verdict files (:mod:`studies.report.verdict_files`) and
the number format they share (:mod:`studies.report.fmt`). A study imports nothing from here; what two studies
share lives in :mod:`studies.common`.
"""
