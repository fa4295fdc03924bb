"""The toolkit's messages go through :mod:`logging`, one logger per module (``logging.getLogger(__name__)``),
so a host program (a verl or TRL job, a notebook) filters or routes them as it does its own:
``logging.getLogger("llm_runs").setLevel(logging.WARNING)``. A warning reaches stderr even where nothing is
configured (Python's last-resort handler); the commands (``python -m ...``) call :func:`cli_logging` so that
their progress lines show too."""
from __future__ import annotations

import logging
import sys

PACKAGES = ("schema", "simulators", "llm_runs", "claims", "figures", "report_card", "studies", "bounds",
            "estimators", "execution", "stats")
"""The toolkit's top-level packages: the loggers :func:`cli_logging` configures."""


class _Stderr(logging.Handler):
    """Writes to ``sys.stderr`` as it is when a message is emitted, not as it was when the handler was made (a
    command run in-process, by a test or a notebook, may have replaced it since, as logging's last resort does)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


def cli_logging(level: int = logging.INFO) -> None:
    """For a command's ``main``: the toolkit's messages at ``level`` and above to stderr, one bare line each.
    Only the toolkit's loggers get the handler (a library's own logging is left as it was), and a logger the
    host already gave a handler is left alone."""
    for name in PACKAGES:
        lg = logging.getLogger(name)
        if lg.handlers:
            continue
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        lg.addHandler(handler)
        lg.setLevel(level)
        lg.propagate = False
