import sys

from .analysis import main

sys.exit(main())
