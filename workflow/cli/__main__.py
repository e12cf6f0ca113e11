"""`python -m workflow.cli` is `rlsweep`."""

import sys

from workflow.cli import main

sys.exit(main())
