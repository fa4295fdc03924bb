"""``python -m studies.mechanism``: the mechanism study's verdicts (:func:`studies.mechanism.analysis.main`)."""
import sys

from .analysis import main

sys.exit(main())
