"""The face: the `grokbench` command, the one layer above both labs.

It is the only code that imports both the harness (the rest of `grokbench`) and `figures`
(lazily, in `grokbench.cli.commands`, for the `figures` and `quant` commands and the
unknown-recipe hint); no module of the harness imports `figures` or the face
(tests/grokbench/test_imports.py checks both). `grokbench.cli.app` parses the arguments
and dispatches, and its `main` is the console script (`grokbench = grokbench.cli:main`);
`grokbench.cli.commands` holds one function per command. `python -m grokbench.cli` is
`grokbench`, and `python -m figures` is `grokbench figures`.
"""

from grokbench.cli.app import main as main

__all__ = ["main"]
