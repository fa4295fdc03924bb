"""The Qwen3-0.6B study on one GPU: its plan (:mod:`studies.gpu.plan`), its grid (:mod:`studies.gpu.grid`), its
device steps (:mod:`studies.gpu.runs`), the command that runs it (``python -m studies.gpu.run``), the GPU check
(``python -m studies.gpu.check``) and its report section (:mod:`studies.report.sections.gpu`)."""
