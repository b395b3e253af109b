"""What a user's type checker sees: `mypy --strict` of this file runs in the nox lint session.

Each `assert_type` pins an inferred type; each `# type: ignore[code]` marks a mistake that
must stay an error (`--strict` includes `warn_unused_ignores`, so an ignore that is no longer
needed fails the check). Not collected by pytest (no test functions); never executed.
"""

from __future__ import annotations

import asyncio
from typing import assert_type

import agentrewind


def fetch_rows(customer: str, limit: int = 10) -> list[str]:
    return [customer] * limit


async def lookup(order: str) -> dict[str, str]:
    return {"order": order}


middleware = agentrewind.Middleware("memory://")

with middleware.run("order-42") as run:
    assert_type(run, agentrewind.Run)
    rows = run.step("fetch", fetch_rows, "ada")
    assert_type(rows, list[str])
    assert_type(run.step("fetch", fetch_rows, "ada", limit=3), list[str])
    assert_type(run.step("fetch", fetch_rows, "ada", cache_ttl=60), list[str])
    # (`step` is overloaded for `cache_ttl=`: a wrong call matches no variant)
    run.step("fetch", fetch_rows, "ada", "wrong")  # type: ignore[call-overload]
    run.step("fetch", fetch_rows, "ada", 1, 2)  # type: ignore[call-overload]
    run.step("fetch", fetch_rows)  # type: ignore[call-overload]
    run.step("fetch", fetch_rows, "ada", size=3)  # type: ignore[call-arg]


@middleware.step("summarise")
def summarise(rows: list[str]) -> str:
    return f"{len(rows)} rows"


@middleware.step
def double(x: int) -> int:
    return 2 * x


@agentrewind.step("charge", side_effects=True)
def charge(amount: float) -> str:
    return f"charged {amount}"


@middleware.step("lookup-step")
async def lookup_step(order: str) -> dict[str, str]:
    return await lookup(order)


assert_type(summarise(["a"]), str)
assert_type(double(2), int)
assert_type(charge(1.5), str)
summarise("not a list")  # type: ignore[arg-type]
double()  # type: ignore[call-arg]
charge(amount="1")  # type: ignore[arg-type]


async def main() -> None:
    async with middleware.run("order-43") as arun:
        assert_type(await lookup_step("o-1"), dict[str, str])
        assert_type(await arun.step("lookup", lookup, "o-2"), dict[str, str])
        await arun.step("lookup", lookup, 42)  # type: ignore[call-overload]


class Pipeline:
    """A user's own object: `wrap` hands back the same type (here no adapter claims it)."""

    def invoke(self, text: str) -> str:
        return text


def wrap_it(pipeline: Pipeline) -> None:
    wrapped = middleware.wrap(pipeline)
    assert_type(wrapped, Pipeline)
    assert_type(wrapped.invoke("hi"), str)
    wrapped.invoke(1)  # type: ignore[arg-type]


asyncio.run(main())
