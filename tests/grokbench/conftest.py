"""Fixtures shared by the grokbench tests."""

import pytest

from grokbench import audit

# (rows, classes): 16 x 512 elements instead of 512 x 8192, and wide enough for the linear-ce
# timing's hidden size (audit._LINEAR_SPEED_D = 256).
SMALL_SPEED_SHAPE = (16, 512)


@pytest.fixture
def small_speed_shape(request, monkeypatch):
    """`grokbench audit`'s speed row (audit._speed) on a SMALL_SPEED_SHAPE array in the fast
    tier: the same code, its two programs and 18 timed calls smaller (the bf16 linear-ce
    audit: 8.8 -> 4.3 s CPU, cold). No test reads the timing; the slow tier's audits keep
    audit.SPEED_SHAPE."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr(audit, "SPEED_SHAPE", SMALL_SPEED_SHAPE)
