"""What the commands print while they work: counts in words, progress bars, a time forecast.

Every training loop (`grokbench.experiment`, `grokbench.distill`) draws the same kind of
bar (`bar`): one per call, counting run-steps (steps times runs), described as
"N runs in M programs". `_Forecast` watches that count and, once the first chunks have
given a measured speed, says how long the whole planned work will take when that is more
than `_LONG` seconds, so a huge run never starts silently (the bar may be off).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import tqdm

__all__ = ["duration", "plural"]

_LONG = 180.0
"""Seconds of planned work from which `_Forecast` speaks: a few minutes."""


def plural(n: int, word: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """A rough human duration: '40 s', '12 min', '3.5 h', '2.0 days', '31 years'."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


def advance(progress_bar: tqdm.tqdm, runs: int) -> Callable[[int], None]:
    """An `on_chunk(steps)` callback that moves `progress_bar` by steps x `runs` run-steps."""

    def on_chunk(steps: int) -> None:
        progress_bar.update(steps * runs)

    return on_chunk


class _Forecast:
    """Counts run-steps done of `total`; says once how long the rest takes, if long.

    The first `update` (a chunk that may include compilation) starts the clock; the speed
    from there to the second `update` gives the estimate, which `write` (default: above
    any bar, on stderr) prints when it exceeds `threshold` seconds (default: `_LONG`). `plan`
    describes the work ("2 runs in 1 program").
    """

    def __init__(
        self,
        total: int,
        plan: str,
        threshold: float | None = None,
        write: Callable[[str], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total, self.plan = total, plan
        self.threshold = _LONG if threshold is None else threshold
        self.write = write or (lambda text: tqdm.tqdm.write(text, file=sys.stderr))
        self.clock = clock
        self.done = 0
        self._first: tuple[float, int] | None = None
        self.estimate: float | None = None  # seconds left when measured

    def update(self, n: int) -> None:
        """Record `n` more run-steps done."""
        self.done += n
        if self.estimate is not None:
            return
        now = self.clock()
        if self._first is None:
            self._first = (now, self.done)
            return
        t0, done0 = self._first
        rate = (self.done - done0) / max(now - t0, 1e-9)
        self.estimate = (self.total - self.done) / rate
        if self.estimate > self.threshold:
            self.write(
                f"planned: {self.plan}, {self.total:,} run-steps; at the measured "
                f"{rate:,.0f} run-steps/s that takes about {duration(self.estimate)} more. "
                "Ctrl-C stops it and keeps the runs finished by then."
            )


class _Bar(tqdm.tqdm):
    """A tqdm bar that also feeds its `_Forecast`, shown or not."""

    def __init__(self, *args: Any, forecast: _Forecast, **kwargs: Any) -> None:
        self.forecast = forecast
        super().__init__(*args, **kwargs)

    def update(self, n: float | None = 1) -> bool | None:
        self.forecast.update(int(n or 0))
        return super().update(n)


def bar(total: int, desc: str, progress: bool) -> tqdm.tqdm:
    """The run-step progress bar every training loop shows (hidden if off or empty), with a
    `_Forecast` of the work it counts, which speaks even when the bar is hidden."""
    return _Bar(
        total=total,
        unit="run-step",
        unit_scale=True,
        desc=desc,
        disable=not progress or not total,
        forecast=_Forecast(total, desc),
    )
