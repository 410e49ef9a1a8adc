"""Every cache version of the results store, and the one stable hash that names stored runs.

A stored run is reused only while what produced it is unchanged. Two kinds of version say so:

- A **config version** is part of a run's name (its hash): bump it when a change moves any
  number a stored run holds (its metrics, its trained parameters). Every run it covers then
  gets a new name and is trained again on its next use; the old directories stay unread.
- A **summary version** is written into each `summary.json`: bump it when a summary's fields
  or the rules that compute them from the stored metrics change (`grokbench.summary`). A
  stored summary of another version is rebuilt from the run's metrics when it is loaded; the
  run is not retrained.

Each bump comes with new golden values (tests/grokbench/golden.py pins every constant here,
tests/grokbench/test_hashes.py the hashes of every recipe's configs): CONTRIBUTING.md, "The
golden test and CONFIG_VERSION". A new `RunConfig` field whose default keeps the old
behaviour needs no bump (`grokbench.config.ADDED_FIELDS`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = [
    "CONFIG_VERSION",
    "DISTILL_SUMMARY_VERSION",
    "DISTILL_VERSION",
    "QUANT_EVAL_VERSION",
    "QUANT_VERSION",
    "SUMMARY_VERSION",
]

CONFIG_VERSION = 5
"""Every `RunConfig` run's hash (`grokbench.config.config_hash`): bumped when the engine's
numbers or stored metrics change meaning.

2: LaProp clips g / sqrt(v_hat) to its exact bound (eps = 0 no longer gives inf).
3: `split` defaults to per_seed (a new train/test split per run seed; grokbench/recipes.py).
4: `numerics.cross_entropy` reads the logits twice forward (new sums, last bits).
5: float32 / float64 `numerics.cross_entropy` sums a stored, target-zeroed array of exps
   (one exp per entry): S_others moves in the last bit on some rows, so fp32 runs move.
"""

DISTILL_VERSION = 2
"""The distillation runs' own version (teacher_steps > 0), in their `config_hash` only: a change
that moves only their numbers bumps it and leaves every other stored run alone. 2: the fixed
`numerics.softmax` rewrite moved their fp64 KL metrics (`kl`, `test_kl`) by ~1e-15 relative
(1, before, is the hash without the key)."""

QUANT_VERSION = 8
"""The quantization lab's version, in every quant hash (`QuantConfig.train_hash`, `eval_hash`):
bumped when training or evaluation numbers change meaning.
6: the float32 `numerics.cross_entropy` layout of CONFIG_VERSION 5 (last bits). 7: the LM
head trains through `numerics.linear_cross_entropy` (last bits: the golden quant case's
parameter norm after 2 steps moved by 7e-13). 8: `linear_cross_entropy`'s backward lays
hidden^T out once (cdb6817, 2026-12-05), which moved the lab's training in the last bits
without a bump then: the quick encoder vanilla on `delimited_backcopy` ends at train loss
2.884286403656006 against 2.884286642074585 before, and over 6,000 steps at a constant lr
(run A's train hash) vanilla's max inf-norm reads 89.1 against run A's 260.8. The golden
quant case (2 steps, width 16) did not see it."""

QUANT_EVAL_VERSION = 2
"""The quantization lab's evaluations' own version, in `QuantConfig.eval_hash` only: a change
that moves only what an evaluation computes bumps it and leaves the trained models alone (1,
before, is the hash without the key). 2: the probe measures each head's value-vector norms on
delimiter and special tokens against the others (Fig. 2), a new output of the evaluation
program."""

SUMMARY_VERSION = 3
"""The summary of an ordinary run (`grokbench.summary`): bumped when its fields or the spike
rule (`grokbench.slingshot`) change; stored summaries are then rebuilt from their metrics.
3: the progress fields (`grokbench.fourier.final_measures`)."""

DISTILL_SUMMARY_VERSION = 2
"""The summary of a distillation run (`grokbench.summary`): bumped when its fields change;
stored summaries are then rebuilt from their metrics."""


def stable_hash(payload: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of `payload` as sorted-key JSON: the same on every machine
    and Python version, so it names stored runs (`config_hash`, `QuantConfig.train_hash`)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
