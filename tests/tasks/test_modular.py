"""Modular arithmetic datasets: labels by brute force, the split, and the errors."""

import numpy as np
import pytest

from tasks import OPERATIONS, ModularTask, modular_split, modular_table

_BRUTE = {
    "a+b": lambda a, b, p: (a + b) % p,
    "a-b": lambda a, b, p: (a - b) % p,
    "a*b": lambda a, b, p: (a * b) % p,
    "a/b": lambda a, b, p: next(c for c in range(p) if (c * b) % p == a),
    "a^2+b^2": lambda a, b, p: (a**2 + b**2) % p,
    "a^3+b": lambda a, b, p: (a**3 + b) % p,
    "a^2+ab+b^2": lambda a, b, p: (a**2 + a * b + b**2) % p,
}


def test_every_operation_has_a_reference():
    assert set(OPERATIONS) == set(_BRUTE)


@pytest.mark.parametrize("p", [2, 7, 31])
@pytest.mark.parametrize("op", OPERATIONS)
def test_labels_match_brute_force(op, p):
    task = ModularTask(op=op, p=p, train_fraction=0.5)
    tokens, labels = modular_table(task)
    assert tokens.dtype == labels.dtype == np.int32
    assert tokens.shape == (task.num_examples, 3) and labels.shape == (task.num_examples,)
    assert np.all(tokens[:, 2] == p) and task.eq_token == p and task.vocab_size == p + 1
    assert np.all((tokens[:, :2] >= 0) & (tokens[:, :2] < p))
    expected = [_BRUTE[op](int(a), int(b), p) for a, b, _ in tokens]
    np.testing.assert_array_equal(labels, expected)
    assert len({(int(a), int(b)) for a, b, _ in tokens}) == task.num_examples


def test_division_skips_zero_and_non_prime_moduli_work_elsewhere():
    tokens, _ = modular_table(ModularTask(op="a/b", p=31))
    assert np.all(tokens[:, 1] != 0) and len(tokens) == 31 * 30
    tokens, labels = modular_table(ModularTask(op="a*b", p=10))
    assert len(tokens) == 100 and labels.max() < 10


def test_large_p_stays_exact():
    task = ModularTask(op="a^3+b", p=1009, train_fraction=0.5)
    tokens, labels = modular_table(task)
    a, b = tokens[-1, 0].astype(object), tokens[-1, 1].astype(object)
    assert labels[-1] == (a**3 + b) % 1009


def test_reference_split():
    data = modular_split(ModularTask())  # a+b mod 31, 50%
    assert data.x_train.shape == (480, 3) and data.x_test.shape == (481, 3)
    assert all(x.dtype == np.int32 for x in data)
    seen = {tuple(r) for r in data.x_train} | {tuple(r) for r in data.x_test}
    assert len(seen) == 961  # disjoint and complete
    np.testing.assert_array_equal(data.y_train, (data.x_train[:, 0] + data.x_train[:, 1]) % 31)


def test_split_is_deterministic_and_seeded():
    a = modular_split(ModularTask(split_seed=3))
    b = modular_split(ModularTask(split_seed=3))
    c = modular_split(ModularTask(split_seed=4))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.x_train, c.x_train)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"op": "a%b"}, "unknown op"),
        ({"p": 1}, "p must be"),
        ({"p": 0}, "p must be"),
        ({"train_fraction": 0.0}, "train_fraction"),
        ({"train_fraction": 1.0}, "train_fraction"),
        ({"train_fraction": -0.5}, "train_fraction"),
        ({"op": "a/b", "p": 8}, "prime"),
        ({"op": "a/b", "p": 1}, "p must be"),
        ({"p": 2, "train_fraction": 0.1}, "non-empty"),
    ],
)
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModularTask(**kwargs)


def test_p_must_be_an_int():
    with pytest.raises(TypeError):
        ModularTask(p=31.0)
