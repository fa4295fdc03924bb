"""``python -m studies.report``: :func:`studies.report.build.main`."""
from studies.report.build import main

raise SystemExit(main())
