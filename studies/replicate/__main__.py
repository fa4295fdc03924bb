"""``python -m studies.replicate``: the replicate's comparison (:func:`studies.replicate.analysis.main`)."""
import sys

from .analysis import main

sys.exit(main())
