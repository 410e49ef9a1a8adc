"""Modular arithmetic datasets: every pair (a, b) as tokens `[a, b, =]`, a seeded split."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# Each operation maps int64 arrays (a, b) and p to (a op b) mod p. int64 keeps a^3 exact
# for any p below 2e6 (p^3 < 2^63), far past every task in the papers (p <= 113).
_OPS: dict[str, Callable[[np.ndarray, np.ndarray, int], np.ndarray]] = {
    "a+b": lambda a, b, p: (a + b) % p,
    "a-b": lambda a, b, p: (a - b) % p,
    "a*b": lambda a, b, p: (a * b) % p,
    # b^(p-2) is the inverse of b mod a prime p (Fermat); b = 0 is left out of the data.
    "a/b": lambda a, b, p: (a * _pow_mod(b, p - 2, p)) % p,
    "a^2+b^2": lambda a, b, p: (a * a + b * b) % p,
    "a^3+b": lambda a, b, p: ((a * a % p) * a + b) % p,
    "a^2+ab+b^2": lambda a, b, p: (a * a + a * b + b * b) % p,
}

OPERATIONS: tuple[str, ...] = tuple(_OPS)
"""The operation names `ModularTask.op` accepts."""

_MAX_P = 2_000_000  # keeps every intermediate product inside int64 (see _OPS)


def _pow_mod(base: np.ndarray, exponent: int, p: int) -> np.ndarray:
    """Elementwise base^exponent mod p by square-and-multiply (exact in int64)."""
    result = np.ones_like(base)
    base = base % p
    while exponent > 0:
        if exponent & 1:
            result = (result * base) % p
        base = (base * base) % p
        exponent >>= 1
    return result


def _is_prime(n: int) -> bool:
    """Trial division; p is at most a few thousand in practice."""
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


@dataclasses.dataclass(frozen=True)
class ModularTask:
    """A binary operation mod p with a seeded train/test split of all (a, b) pairs."""

    op: str = "a+b"  # the reference task of Varma et al. (fig2-top, Table 1)
    p: int = 31  # a+b mod 31 is the reference config (961 pairs)
    train_fraction: float = 0.5  # Varma et al.'s 50% split -> 480 training examples at p=31
    split_seed: int = 0  # the split is part of the task, so it has its own seed

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown op {self.op!r}; expected one of {OPERATIONS}")
        if isinstance(self.p, bool) or not isinstance(self.p, int | np.integer):
            raise TypeError(f"p must be an int, got {type(self.p).__name__}")
        if not 2 <= self.p <= _MAX_P:
            raise ValueError(f"p must be in [2, {_MAX_P}], got {self.p}")
        if self.op == "a/b" and not _is_prime(self.p):
            raise ValueError(f"a/b needs a prime p (every b != 0 invertible), got {self.p}")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {self.train_fraction}")
        n_train = self.num_train
        if n_train < 1 or n_train >= self.num_examples:
            raise ValueError(
                f"train_fraction {self.train_fraction} leaves {n_train} of "
                f"{self.num_examples} examples for training; both splits must be non-empty"
            )

    @property
    def eq_token(self) -> int:
        """Token id of `=`: p, the one token past the residues."""
        return self.p

    @property
    def vocab_size(self) -> int:
        """Input vocabulary: the p residues and `=`."""
        return self.p + 1

    @property
    def num_classes(self) -> int:
        """Output classes: the p residues."""
        return self.p

    @property
    def num_examples(self) -> int:
        """All pairs (a, b); b = 0 is excluded for a/b."""
        return self.p * (self.p - 1) if self.op == "a/b" else self.p * self.p

    @property
    def num_train(self) -> int:
        """floor(train_fraction * num_examples), as in Nanda et al.'s split."""
        return int(self.train_fraction * self.num_examples)


class ModularData(NamedTuple):
    """Train and test tokens `[a, b, =]` (int32, N x 3) and labels (int32, N)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def modular_table(task: ModularTask) -> tuple[np.ndarray, np.ndarray]:
    """All examples of `task` in (a, b) row-major order: tokens (N x 3) and labels (N), int32."""
    p = task.p
    a, b = np.meshgrid(np.arange(p, dtype=np.int64), np.arange(p, dtype=np.int64), indexing="ij")
    a, b = a.ravel(), b.ravel()
    if task.op == "a/b":
        keep = b != 0
        a, b = a[keep], b[keep]
    labels = _OPS[task.op](a, b, p)
    eq = np.full_like(a, task.eq_token)
    tokens = np.stack([a, b, eq], axis=-1).astype(np.int32)
    return tokens, labels.astype(np.int32)


def modular_split(task: ModularTask) -> ModularData:
    """The task's deterministic split: a permutation from `numpy.random.default_rng(split_seed)`."""
    tokens, labels = modular_table(task)
    order = np.random.default_rng(task.split_seed).permutation(len(labels))
    train, test = order[: task.num_train], order[task.num_train :]
    return ModularData(tokens[train], labels[train], tokens[test], labels[test])
