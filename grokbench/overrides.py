"""The one parser of `key=value` requests, for every command of both labs.

`parse` reads `key=value` and `key=v1,v2,...` tokens into {key: values}, each key by its
own reader: a config field by its type annotation (`typed`: int, float, bool, str, None
and unions of them; a comma list sweeps the field unless the field takes its text whole),
a count (`count`: seeds=N), a comma list of choices (`choices`: the quantization lab's
variants and families), or a key refused with a hint (`refused`). Every error is a one-line
`ConfigError`. The callers build the readers: `grokbench.config.parse_overrides`
(RunConfig's keys: `run`, `sweep`, `figures --set`) and
`grokbench.quant.parse_quant_overrides` (QuantConfig's: `quant`). This module imports
nothing of the lab but its error, so every module can use it.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from grokbench.errors import ConfigError

__all__ = []  # package-internal: only other harness modules use these names

Reader = Callable[[str, str], tuple]
"""(key, the text after `=`) -> the key's values, or a one-line `ConfigError`."""


def parse(
    tokens: Sequence[str],
    readers: Mapping[str, Reader],
    *,
    known: Sequence[str] | None = None,
    first: Collection[str] = (),
    check_lists: bool = False,
) -> dict[str, tuple]:
    """`key=value` tokens -> {key: the values `readers[key]` reads from the text}.

    A token without `=` or without a key, a key given twice and a key that has no reader are
    errors; `known` is what the unknown-key message lists (default: the readers' keys).
    `first`: keys read in a pass over every token before the other keys (their errors come
    first; they come first in the result). `check_lists`: before anything else, refuse a key
    with no value (`eps=`) and a comma list with an empty value (`eps=1e-8,`), whatever the
    key (`run` and `sweep`).
    """
    if check_lists:
        for token in tokens:
            key, sep, text = token.partition("=")
            if sep and key.strip() and not text.strip():
                raise ConfigError(f"{key.strip()}= lists no values")
            if sep and key.strip() and any(not part.strip() for part in text.split(",")):
                raise ConfigError(f"{token!r}: an empty value in the list")
    out: dict[str, tuple] = {}
    for early in (True, False) if first else (False,):
        for token in tokens:
            key, text = _split(token)
            if first and (key in first) != early:
                continue
            if key in out:
                raise ConfigError(f"key {key!r} given twice")
            if key not in readers:
                names = ", ".join(readers if known is None else known)
                raise ConfigError(f"unknown key {key!r}; known keys: {names}")
            out[key] = readers[key](key, text)
    return out


def _split(token: str) -> tuple[str, str]:
    """`key=value` -> (key, value text); ConfigError for no `=` or no key."""
    key, sep, text = token.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"expected key=value, got {token!r}")
    return key, text


def typed(tp: Any, *, whole: bool = False) -> Reader:
    """The reader of a config field annotated `tp`: a comma list is a sweep (its distinct
    values, in order), unless `whole` (the text is one value: `bits=W8A8,W6A6`). Precision
    names like 'fp32/bf16' contain no comma, so a comma always separates values."""

    def read(key: str, text: str) -> tuple:
        parts = [text] if whole else text.split(",")
        return tuple(dict.fromkeys(read_value(key, part.strip(), tp) for part in parts))

    return read


def count(key: str, text: str) -> tuple[int]:
    """The reader of a count such as `seeds=N`: one int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{key}={text!r}: expected a positive int") from None
    if value < 1:
        raise ConfigError(f"{key} must be >= 1, got {value}")
    return (value,)


def choices(options: Sequence[str]) -> Reader:
    """The reader of a comma list of `options` (empty entries skipped, at least one kept):
    a list the caller reads itself, not a sweep axis."""

    def read(key: str, text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        if not values or any(v not in options for v in values):
            known = ", ".join(options)
            raise ConfigError(f"{key} must be a comma list of {known}; got {text!r}")
        return values

    return read


def refused(message: str) -> Reader:
    """The reader of a key that must not be given: `ConfigError(message)`."""

    def read(key: str, text: str) -> tuple:
        raise ConfigError(message)

    return read


def read_value(key: str, text: str, tp: Any) -> Any:
    """One value of field `key` annotated `tp`, tried as each type of the union in order
    (`int | None`: an int, else none/null); ConfigError naming them all if none fits."""
    errors = []
    for member in members(tp):
        try:
            return _parse_as(member, text)
        except ValueError:
            errors.append(member.__name__)
    raise ConfigError(f"{key}={text!r}: expected {' or '.join(errors)}")


def members(tp: Any) -> tuple[type, ...]:
    """The plain types of an annotation: `int | None` -> (int, NoneType)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_as(tp: type, text: str) -> Any:
    if tp is type(None):
        if text.lower() in ("none", "null"):
            return None
        raise ValueError(text)
    if tp is bool:
        if text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        raise ValueError(text)
    if tp is int:
        return int(text)  # "1e4" and "1.5" are errors, not silently truncated
    if tp is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    if tp is str:
        if not text:
            raise ValueError(text)
        return text
    raise TypeError(f"unsupported field type {tp}")
