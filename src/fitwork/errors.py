"""One exception hierarchy: every message says what was needed, what was found, and the fix."""

from __future__ import annotations


class FitworkError(Exception):
    """Base of every error fitwork raises on purpose."""


class UnitDefinitionError(FitworkError, ValueError):
    """A unit or pipeline was declared in a way fitwork cannot run."""


class InputError(FitworkError, ValueError):
    """An input file or item could not be read; the message names the place."""


class PipelineLoadError(FitworkError, ImportError):
    """A `MODULE_OR_FILE:NAME` reference did not resolve to a pipeline."""


class TooManyFailures(FitworkError, RuntimeError):
    """More items failed than `max_failures` allows; the run was stopped."""


class EngineError(FitworkError, RuntimeError):
    """The engine itself could not go on (workers keep dying, a channel broke)."""
