"""The research campaigns built on the toolkit: one folder per study.

Each study holds its analysis and verdicts, its report section, its narrative (``README.md``), a link
to its pre-registration and the table of its result folders. Studies import the toolkit (estimators,
bounds, schema, simulators, llm_runs, claims, figures); nothing in the toolkit imports a study.
"""
