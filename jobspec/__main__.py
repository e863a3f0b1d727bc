"""``python -m jobspec``: see ``jobspec.cli``."""

import sys

from jobspec.cli import main

sys.exit(main())
