"""`python -m grokbench.cli ...` is `grokbench ...`."""

import sys

from grokbench.cli import main

sys.exit(main())
