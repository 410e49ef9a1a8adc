"""`python -m figures ...` is `grokbench figures ...`."""

import sys

from grokbench.cli import main

sys.exit(main(["figures", *sys.argv[1:]]))
