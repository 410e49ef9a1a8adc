"""Bounded caches of compiled programs, registered so that one call forgets them all.

A jitted program is built once per static configuration and reused: the engine per shape
group, distillation, the update balance, the quant lab's training and probe, a figure's
gradients. `compiled_cache(maxsize)` memoizes such a builder with `functools.lru_cache`
(the standard library's least-recently-used cache: nothing here is written by hand but the
registry), so a long sweep or figure build keeps at most `maxsize` programs per builder,
and registers it, so `clear_compiled_caches()` empties every one (a benchmark that times
compilation, a test that compiles from scratch, a process that wants its memory back).

Why here: every module that caches programs must import this one. `tasks` is the lowest
layer they all reach (`grokbench`, `figures` and `tasks.quant` import it); `numerics`, lower
still, is the public loss library and holds nothing but losses and their checks.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: weakref.WeakSet = weakref.WeakSet()  # a cache dropped with its module goes too


def compiled_cache(maxsize: int) -> Callable[[F], F]:
    """Decorator: memoize a builder of compiled programs (its arguments hashable), keeping
    the `maxsize` most recently used results, and register it for `clear_compiled_caches`.

    The decorated function has `functools.lru_cache`'s `cache_info()` and `cache_clear()`.
    """
    if isinstance(maxsize, bool) or not isinstance(maxsize, int):
        raise TypeError(f"maxsize must be an int, got {type(maxsize).__name__}")
    if maxsize < 1:
        raise ValueError(f"maxsize must be at least 1 (every cache is bounded), got {maxsize}")

    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _REGISTRY.add(cached)
        return cached  # type: ignore[return-value]

    return decorate


def compiled_caches() -> tuple[Callable[..., Any], ...]:
    """Every registered cache (of the modules imported so far), sorted by qualified name."""
    return tuple(sorted(_REGISTRY, key=lambda f: f"{f.__module__}.{f.__qualname__}"))


def clear_compiled_caches() -> None:
    """Empty every registered cache: the next use of each builder compiles anew."""
    for cached in list(_REGISTRY):
        cached.cache_clear()
