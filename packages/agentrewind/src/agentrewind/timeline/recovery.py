"""Recovery strategies for `Timeline.safe_execute`: how to change the state before a retry.

The names and behaviour follow agentstateprotocol 0.1.0 (`RetryWithBackoff`,
`AlternativePathStrategy`, `DegradeGracefully`, `CompositeStrategy`), with one difference:
a strategy never mutates the state it is given; it returns a new one.

`safe_execute` asks a strategy for a `Retry` plan (`plan()`: the next state and how long to
wait) and does the waiting itself, so `asafe_execute` waits with `asyncio.sleep` instead of
blocking the event loop; `apply()` is the same decision with the wait done in place.
"""

from __future__ import annotations

import abc
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "AlternativePathStrategy",
    "CompositeStrategy",
    "DegradeGracefully",
    "RecoveryStrategy",
    "Retry",
    "RetryWithBackoff",
]

State = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Retry:
    """A strategy's decision: retry with `state` after waiting `delay` seconds.

    Attributes:
        state: The state for the next attempt.
        delay: Seconds to wait first.
        sleep: How a sync caller waits (async callers use `asyncio.sleep` for `time.sleep`,
            and await what a custom `sleep` returns when it is awaitable).
    """

    state: State
    delay: float = 0.0
    sleep: Callable[[float], Any] = time.sleep

    def wait(self) -> State:
        """Wait `delay` seconds (with `sleep`) and return `state`."""
        if self.delay > 0:
            self.sleep(self.delay)
        return self.state


class RecoveryStrategy(abc.ABC):
    """Decides whether an error can be recovered from and with which state to retry."""

    @abc.abstractmethod
    def can_handle(self, error: BaseException) -> bool:
        """True when this strategy applies to `error`."""

    @abc.abstractmethod
    def apply(self, state: State, error: BaseException, attempt: int) -> State | None:
        """Return the state to retry with, or None when this strategy does not apply.

        Args:
            state: The state the failed attempt received (not modified).
            error: What the attempt raised.
            attempt: The failed attempt, counted from 0.
        """

    def plan(self, state: State, error: BaseException, attempt: int) -> Retry | None:
        """Like `apply`, without waiting: the state to retry with and the wait before it.

        The default calls `apply` (which then waits, if it waits, in place); strategies that
        wait override this so async callers can wait without blocking.
        """
        changed = self.apply(state, error, attempt)
        return None if changed is None else Retry(changed)


class RetryWithBackoff(RecoveryStrategy):
    """Wait `base_delay * 2**attempt` seconds (at most `max_delay`), then retry.

    For transient errors: rate limits, timeouts, connection resets.

    Args:
        base_delay: Seconds before the first retry.
        max_delay: Upper bound of one wait.
        jitter: Multiply each wait by a random factor in [0.5, 1.5) so agents do not retry
            in lockstep.
        error_types: Errors this strategy handles (default: `TimeoutError`,
            `ConnectionError`, `OSError`).
        sleep: The function that waits (tests pass a recorder).
    """

    def __init__(
        self,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        jitter: bool = True,
        error_types: tuple[type[BaseException], ...] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.jitter = jitter
        self.error_types = error_types or (TimeoutError, ConnectionError, OSError)
        self.sleep = sleep

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (from 0)."""
        delay = float(min(self.base_delay * (2**attempt), self.max_delay))
        if self.jitter:
            delay *= 0.5 + random.random()
        return delay

    def can_handle(self, error: BaseException) -> bool:
        return isinstance(error, self.error_types)

    def plan(self, state: State, error: BaseException, attempt: int) -> Retry | None:
        if not self.can_handle(error):
            return None
        delay = self.delay(attempt)
        retry = {"strategy": "backoff", "attempt": attempt + 1, "delay_applied": delay}
        return Retry({**state, "_retry_metadata": retry}, delay, self.sleep)

    def apply(self, state: State, error: BaseException, attempt: int) -> State | None:
        retry = self.plan(state, error, attempt)
        return None if retry is None else retry.wait()


class AlternativePathStrategy(RecoveryStrategy):
    """Try another approach on each retry.

    Args:
        alternatives: `fn(state, error) -> state | None`, one per retry in order; a function
            that raises or returns None falls back to `state_modifiers`.
        state_modifiers: Keys set in the state on every retry.
    """

    def __init__(
        self,
        alternatives: Sequence[Callable[[State, BaseException], State | None]] | None = None,
        state_modifiers: dict[str, Any] | None = None,
    ) -> None:
        self.alternatives = list(alternatives or [])
        self.state_modifiers = dict(state_modifiers or {})

    def can_handle(self, error: BaseException) -> bool:
        return True

    def apply(self, state: State, error: BaseException, attempt: int) -> State | None:
        modified = {**state, **self.state_modifiers}
        if attempt < len(self.alternatives):
            try:
                alternative = self.alternatives[attempt](dict(modified), error)
            except Exception:
                alternative = None
            if alternative:
                return alternative
        modified["_alternative_path"] = {"attempt": attempt + 1, "original_error": str(error)}
        return modified


class DegradeGracefully(RecoveryStrategy):
    """Retry with a cheaper configuration, one level further down per attempt.

    Args:
        degradation_levels: Keys merged into the state, least degraded first.
        error_types: Errors this strategy handles (default: `MemoryError`, `TimeoutError`,
            `RuntimeError`).
    """

    def __init__(
        self,
        degradation_levels: Sequence[dict[str, Any]] | None = None,
        error_types: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        self.degradation_levels = list(
            degradation_levels
            or [
                {"_quality": "reduced", "_max_tokens": 500},
                {"_quality": "minimal", "_max_tokens": 100},
                {"_quality": "fallback", "_use_cache": True},
            ]
        )
        if not self.degradation_levels:
            raise ValueError("degradation_levels must not be empty")
        self.error_types = error_types or (MemoryError, TimeoutError, RuntimeError)

    def can_handle(self, error: BaseException) -> bool:
        return isinstance(error, self.error_types)

    def apply(self, state: State, error: BaseException, attempt: int) -> State | None:
        if not self.can_handle(error):
            return None
        level = min(attempt, len(self.degradation_levels) - 1)
        return {
            **state,
            **self.degradation_levels[level],
            "_degradation_metadata": {"level": level, "reason": str(error)},
        }


class CompositeStrategy(RecoveryStrategy):
    """Ask each strategy in order; the first that handles the error decides."""

    def __init__(self, strategies: Sequence[RecoveryStrategy]) -> None:
        self.strategies = list(strategies)

    def can_handle(self, error: BaseException) -> bool:
        return any(s.can_handle(error) for s in self.strategies)

    def plan(self, state: State, error: BaseException, attempt: int) -> Retry | None:
        for strategy in self.strategies:
            if strategy.can_handle(error):
                retry = strategy.plan(state, error, attempt)
                if retry is not None:
                    return retry
        return None

    def apply(self, state: State, error: BaseException, attempt: int) -> State | None:
        retry = self.plan(state, error, attempt)
        return None if retry is None else retry.wait()
