"""``python -m studies.drift``: the drift map and verdicts (:func:`studies.drift.analysis.main`)."""
import sys

from .analysis import main

sys.exit(main())
