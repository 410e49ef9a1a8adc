"""The oracle's digits do not depend on mpmath's backend (GMP through gmpy2, or pure Python)."""

import json
import os
import subprocess
import sys

import mpmath.libmp

_SCRIPT = """
import json, sys
import numpy as np
import mpmath.libmp
from numerics import oracle
z = np.array([[30.0, 0.0, -1.0, 1e-3], [2.0, 2.0, -700.0, 5.0]])
loss, grad = oracle.cross_entropy_value_and_grad(z, np.array([0, 3]), exact=True)
soft = oracle.soft_target_cross_entropy_grad(z, z[::-1], exact=True)
out = [str(v) for v in [*loss.ravel(), *grad.ravel(), *soft.ravel()]]
print(json.dumps([mpmath.libmp.BACKEND, out]))
"""


def _digits(no_gmpy: bool) -> tuple[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "MPMATH_NOGMPY"}
    if no_gmpy:
        env["MPMATH_NOGMPY"] = "1"
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    backend, digits = json.loads(run.stdout)
    return backend, digits


def test_gmpy2_is_the_backend_and_changes_no_digit():
    assert mpmath.libmp.BACKEND == "gmpy"  # pyproject.toml installs gmpy2
    fast, plain = _digits(no_gmpy=False), _digits(no_gmpy=True)
    assert (fast[0], plain[0]) == ("gmpy", "python")
    assert fast[1] == plain[1]
