"""Batches of a wrapped runnable: one run per item, each item's config passed on untouched.

LangChain's default `batch`/`abatch`/`batch_as_completed`/`abatch_as_completed` call
`invoke` per item with the item's config; these do the same (same executor, same
`max_concurrency`) but hand each item the run id decided for it, so the config that the
runnable sees is exactly the caller's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, get_executor_for_config
from langchain_core.runnables.utils import gated_coro, gather_with_concurrency

from agentrewind.adapters import new_id

from ._scope import resolve_run_id

__all__ = ["Items", "plan"]

Invoke = Callable[[str, Any, RunnableConfig], Any]
AInvoke = Callable[[str, Any, RunnableConfig], Awaitable[Any]]


class Items:
    """The items of one batch: inputs, their configs and the run id decided for each."""

    def __init__(self, inputs: Sequence[Any], configs: list[RunnableConfig], ids: list[str]):
        self.inputs = inputs
        self.configs = configs
        self.run_ids = ids

    def _one(self, invoke: Invoke, i: int, return_exceptions: bool) -> Any:
        try:
            return invoke(self.run_ids[i], self.inputs[i], self.configs[i])
        except Exception as exc:
            if return_exceptions:
                return exc
            raise

    async def _aone(self, ainvoke: AInvoke, i: int, return_exceptions: bool) -> Any:
        try:
            return await ainvoke(self.run_ids[i], self.inputs[i], self.configs[i])
        except Exception as exc:
            if return_exceptions:
                return exc
            raise

    def batch(self, invoke: Invoke, return_exceptions: bool) -> list[Any]:
        """Every item's output (or exception), in input order."""
        n = len(self.inputs)
        if n == 1:
            return [self._one(invoke, 0, return_exceptions)]
        with get_executor_for_config(self.configs[0]) as executor:
            return list(executor.map(lambda i: self._one(invoke, i, return_exceptions), range(n)))

    async def abatch(self, ainvoke: AInvoke, return_exceptions: bool) -> list[Any]:
        """Async twin of `batch`."""
        coros = [self._aone(ainvoke, i, return_exceptions) for i in range(len(self.inputs))]
        return await gather_with_concurrency(self.configs[0].get("max_concurrency"), *coros)

    def as_completed(self, invoke: Invoke, return_exceptions: bool) -> Iterator[tuple[int, Any]]:
        """`(index, output)` pairs as items finish."""
        n = len(self.inputs)
        if n == 1:
            yield 0, self._one(invoke, 0, return_exceptions)
            return
        with get_executor_for_config(self.configs[0]) as executor:
            futures = {
                executor.submit(self._one, invoke, i, return_exceptions): i for i in range(n)
            }
            try:
                while futures:
                    done, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for future in done:
                        yield futures.pop(future), future.result()
            finally:
                for future in futures:
                    future.cancel()

    async def aas_completed(
        self, ainvoke: AInvoke, return_exceptions: bool
    ) -> AsyncIterator[tuple[int, Any]]:
        """Async twin of `as_completed`."""
        limit = self.configs[0].get("max_concurrency")
        semaphore = asyncio.Semaphore(limit) if limit else None

        async def indexed(i: int) -> tuple[int, Any]:
            return i, await self._aone(ainvoke, i, return_exceptions)

        coros = [
            gated_coro(semaphore, indexed(i)) if semaphore else indexed(i)
            for i in range(len(self.inputs))
        ]
        for coro in asyncio.as_completed(coros):
            yield await coro


def plan(inputs: Sequence[Any], config: RunnableConfig | Sequence[RunnableConfig] | None) -> Items:
    """Decide each item's run: its own id, `<id>:<i>` when one id is shared, else a new id."""
    configs = get_config_list(config, len(inputs))
    shared = not isinstance(config, Sequence)
    ids = [resolve_run_id(c) for c in configs]
    repeated = Counter(ids)
    run_ids: list[str] = []
    for i, run_id in enumerate(ids):
        if run_id is None:
            run_id = new_id()
        elif shared or repeated[run_id] > 1:
            run_id = f"{run_id}:{i}"
        run_ids.append(run_id)
    return Items(inputs, configs, run_ids)
