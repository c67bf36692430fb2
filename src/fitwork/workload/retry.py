"""`Retry`: how many times a unit's call is tried on an item that raised, and after what pause.

Defaults follow what a user of a batch system expects: a compute unit's exception is not
retried (the same code on the same item fails the same way, as in Ray Data), while an I/O
unit's transient errors (``OSError``, which covers refused and reset connections, and
``TimeoutError``) are retried three times in all with exponential backoff, as Ray retries a
task whose worker failed.  A worker's *death* is different: the run retries the item on
another worker up to ``max_attempts``, whatever the unit's policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitwork.errors import UnitDefinitionError

TRANSIENT: tuple[type[BaseException], ...] = (OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Retry:
    """Tries per item (``attempts``, the first included), backoff, and which errors retry."""

    attempts: int = 1
    backoff: float = 0.1
    backoff_max: float = 10.0
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise UnitDefinitionError(f"retry: attempts={self.attempts} must be >= 1 (1 means "
                                      "no retry)")
        if self.backoff < 0 or self.backoff_max < 0:
            raise UnitDefinitionError("retry: backoff and backoff_max must be >= 0 seconds")
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in self.on):
            raise UnitDefinitionError(f"retry: on={self.on!r} must be exception classes")

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether a call that raised ``error`` on try number ``attempt`` (1-based) goes again."""
        return attempt < self.attempts and isinstance(error, self.on)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after try number ``attempt`` failed: doubling, capped."""
        factor: float = 2 ** (attempt - 1)  # an int, or a float below attempt 1
        return min(self.backoff_max, self.backoff * factor)


NO_RETRY = Retry()
IO_RETRY = Retry(attempts=3, backoff=0.1, on=TRANSIENT)


def retry_policy(value: int | Retry | None, io: bool) -> Retry:
    """The policy a unit declared (``retry=3`` is three tries on any exception), or the default."""
    if value is None:
        return IO_RETRY if io else NO_RETRY
    if isinstance(value, Retry):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Retry(attempts=value)
    raise UnitDefinitionError(f"retry={value!r}: give a number of tries or a fitwork.Retry")
