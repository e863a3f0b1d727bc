"""``python -m jobspec``: see ``jobspec.check``."""

import sys

from jobspec.check import main

sys.exit(main())
