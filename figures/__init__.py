"""Figures, drawn from saved results only (they start no program); they draw, they decide nothing.

The figure protocol. A figure is a module: the toolkit's own are ``figures/fN_<name>.py``, listed in
:data:`figures.registry.FIGURES`; a study's are ``studies/<study>/figures/fN_<name>.py``, listed in that
folder's ``FIGURES`` (the GPU study's one figure as ``GPU_FIGURE``, drawn by the report only); this package's
style and placement serve both. Each has

* ``NAME``: its file stem (``fN_<name>``), under which :func:`figures.style.save` writes the PNG
  and PDF (``figures/out/`` by default);
* ``TITLE``: the caption's title in the report;
* ``load()``: the results it draws, read through :mod:`schema.results` (or :mod:`claims`, which reads the
  LLM's run tables and computes every statistic: a figure renders, it does not decide; this package imports
  no producer, :mod:`llm_runs` or :mod:`simulators`), raising
  :class:`schema.results.MissingResults` naming the command that makes them when they are absent;
* ``plot(data, ax=None)``: a matplotlib figure of ``data`` (on the axes given, if any);
* ``caption(data)``: the report's text under it, with the source (:func:`schema.results.source_note`);
* ``main(out=None)``: ``style.save(plot(load()), NAME, out)``.

``python -m figures`` draws the toolkit's, ``python -m studies.figures`` (``make figures``) every figure (a
missing result is named, the others still drawn);
``python -m studies.report`` writes ``results/REPORT.md`` and ``.html`` from the same modules
(:mod:`figures.registry` places each figure in a section).
"""
