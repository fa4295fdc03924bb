"""``python -m studies.staleness``: the staleness study's verdicts (:func:`studies.staleness.analysis.main`)."""
import sys

from .analysis import main

sys.exit(main())
