"""Check or record the golden values on this machine: `python -m tests.grokbench.record_golden`.

The suite's settings (two host devices, strict dtype promotion: the root conftest.py) are set
before anything else imports jax, so the values are those the tests compute.
"""

import conftest  # noqa: F401  (sets XLA_FLAGS and jax's config as the test suite does)
from tests.grokbench.golden import main

if __name__ == "__main__":
    raise SystemExit(main())
