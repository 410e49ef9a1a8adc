"""The harness's one input error, in a module of its own so that every module can raise it."""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config value or override that is unknown, ill-typed or out of range (one-line message)."""
