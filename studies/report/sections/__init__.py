"""One report section per study (``sections/<study>.py``), each reading its study's committed files only through
that study's public modules; :mod:`studies.report.build` places them."""
