"""Fabricated progress-measure columns for the tests' fake engines (no training)."""

import numpy as np

from grokbench import fourier


def progress_columns(cfg, n_tests: int) -> dict[str, np.ndarray]:
    """Plausible `grokbench.fourier.columns(cfg)`: losses falling, one key frequency (1)."""
    cols = {}
    for name in fourier.columns(cfg):
        if name in ("logit_freq_share", "embed_freq_norm"):
            share = np.full((n_tests, cfg.p // 2), 0.01)
            share[:, 0] = np.linspace(0.01, 0.9, n_tests)
            cols[name] = share
        else:
            cols[name] = np.geomspace(3.0, 1e-3, n_tests)
    return cols
