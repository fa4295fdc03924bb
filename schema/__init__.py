"""The results contract, torch-free: what producers write and readers read.

* :mod:`schema.results`    the results root (``GMC_RESULTS``), the result sources and the
  command that makes each, the LLM run-folder reader, the stability rule
* :mod:`schema.metrics`    the metric names every LLM trainer logs (``train/``, ``eval/``,
  ``stale/``, ``perf/``): the trainer, the verl plugin and the TRL adapter share them
* :mod:`schema.io`         atomic writes (temporary file + rename), the toolkit's own-file marker
* :mod:`schema.provenance` git commit and package versions, captured once per result

Producers (``simulators``, ``llm_runs``, ``claims``) write through it; ``figures`` reads
through it. It imports neither torch nor any producer.
"""
