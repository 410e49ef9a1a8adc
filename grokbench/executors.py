"""Executors: where the units of a sweep (batches of one shape group) are trained.

A unit is a list of `RunConfig`s that share one compiled program (`experiment._plan_units`).
An executor trains units and yields each unit's `engine.RunOutput`s as it finishes; the
caller (`experiment.run_configs`) summarizes and stores them, so only one process ever
writes the store.

- `LocalExecutor`: one unit after another in this process; the engine shards each unit's
  run axis over every local JAX device (`jax.sharding`, `engine.shard_runs`).
- `_RayExecutor`: every unit is a Ray task, scheduled by Ray over the cluster at
  `address` (default: a new local Ray instance). Workers get this process's `XLA_FLAGS`
  (so as many host devices as here: the same padding and sharding, the same compiled
  program, and results identical to the local executor's) and must be able to import
  grokbench (an installed checkout, or a Ray `runtime_env` that ships one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from grokbench import engine
from grokbench.config import ConfigError, RunConfig

__all__ = ["EXECUTORS", "from_options", "ray_errors"]

EXECUTORS: tuple[str, ...] = ("local", "ray")
"""Executor names of `grokbench sweep --executor`."""

_Unit = Sequence[RunConfig]
_OnSteps = Callable[[int], object]

# Environment a Ray worker needs to compile the same program as this process (and to load
# it from the persistent compilation cache, where this process has one).
_WORKER_ENV = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_ENABLE_X64", "JAX_COMPILATION_CACHE_DIR")


class Executor(Protocol):
    """Trains units of runs; yields each unit's outputs (in any order) as it finishes."""

    def map(
        self,
        units: Sequence[_Unit],
        *,
        chunk_steps: int = 1000,
        fast: bool = True,
        on_steps: _OnSteps | None = None,
    ) -> Iterator[list[engine.RunOutput]]:
        """Train `units`; `on_steps(n)` is told of every n run-steps done, for a progress bar."""
        ...


class LocalExecutor:
    """Train the units one after another in this process."""

    def map(
        self,
        units: Sequence[_Unit],
        *,
        chunk_steps: int = 1000,
        fast: bool = True,
        on_steps: _OnSteps | None = None,
    ) -> Iterator[list[engine.RunOutput]]:
        """Train `units` in order, reporting progress per compiled chunk."""
        for unit in units:
            n_runs = len(unit)

            def tick(steps: int, n_runs: int = n_runs) -> None:
                if on_steps is not None:
                    on_steps(steps * n_runs)

            yield engine.train(
                unit, chunk_steps=chunk_steps, progress=False, fast=fast, on_chunk=tick
            )


def _train_unit(unit: _Unit, chunk_steps: int, fast: bool) -> list[engine.RunOutput]:
    """The body of one Ray task: a unit through the engine, in the worker process."""
    return engine.train(list(unit), chunk_steps=chunk_steps, progress=False, fast=fast)


def _ray_available() -> bool:
    """Whether Ray can be imported (it is the optional extra `grokbench[ray]`)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class _RayExecutor:
    """Spread units over a Ray cluster: one task per unit, results gathered as they finish.

    `address=None` starts a local Ray instance for the duration of `map` (`num_cpus` caps
    it; Ray's dashboard is off); otherwise it connects to that cluster (e.g. "auto" or
    "ray://head:10001"). Each task reserves `cpus_per_unit` CPUs.
    """

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None, cpus_per_unit: float = 1
    ) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.cpus_per_unit = cpus_per_unit

    def _init(self) -> bool:
        """Connect to (or start) Ray unless this process already is; True if we did."""
        import ray

        if ray.is_initialized():
            return False
        options: dict = {"logging_level": logging.ERROR, "log_to_driver": True}
        if self.address is None:
            # "local" always starts a fresh instance, never a cluster found by autodetection.
            options.update(address="local", num_cpus=self.num_cpus, include_dashboard=False)
        else:
            options.update(address=self.address)
        ray.init(**options)
        return True

    def map(
        self,
        units: Sequence[_Unit],
        *,
        chunk_steps: int = 1000,
        fast: bool = True,
        on_steps: _OnSteps | None = None,
    ) -> Iterator[list[engine.RunOutput]]:
        """Submit every unit as a Ray task and yield their outputs in completion order."""
        if not units:
            return
        import ray

        started = self._init()
        try:
            env = {k: os.environ[k] for k in _WORKER_ENV if k in os.environ}
            task = ray.remote(_train_unit).options(
                num_cpus=self.cpus_per_unit, runtime_env={"env_vars": env}
            )
            pending = {task.remote(list(unit), chunk_steps, fast): unit for unit in units}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                unit = pending.pop(ready[0])
                outputs = ray.get(ready[0])
                if on_steps is not None:
                    on_steps(sum(cfg.steps for cfg in unit))
                yield outputs
        finally:
            if started:
                ray.shutdown()


def from_options(name: str, address: str | None) -> Executor | None:
    """The executor `--executor NAME --ray-address ADDRESS` asks for (None: this process);
    ConfigError, before any work, for a combination that cannot run."""
    if name != "ray":
        if address is not None:
            raise ConfigError("--ray-address needs --executor ray")
        return None
    if not _ray_available():
        raise ConfigError("--executor ray needs Ray: pip install -e '.[ray]' in your clone")
    if address is not None:
        _check_reachable(address)
    return _RayExecutor(address)


def _unreachable(address: str, err: object) -> str:
    return (
        f"cannot reach the Ray cluster at {address} ({err}): `ray start --head` prints the "
        "address to use (on the head node, --ray-address auto finds it)"
    )


def _check_reachable(address: str) -> None:
    """Fail at once if nothing listens at a HOST:PORT Ray address (Ray would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # 'auto' and the like: Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise ConfigError(_unreachable(address, err.strerror or err)) from None


@contextlib.contextmanager
def ray_errors(executor: Executor | None) -> Iterator[None]:
    """A ConnectionError from Ray as a one-line ConfigError saying what to do."""
    try:
        yield
    except ConnectionError as err:
        if not isinstance(executor, _RayExecutor):
            raise
        if executor.address is None:
            raise ConfigError(f"could not start a local Ray instance ({err})") from None
        raise ConfigError(_unreachable(executor.address, err)) from None
