"""What a Redis flow yields: a script, a command or a pipeline of them (see `_io`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

__all__ = ["Command", "Pipeline", "RedisFlow", "Script", "queue", "scripted"]

T = TypeVar("T")


@dataclasses.dataclass(slots=True, frozen=True)
class Script:
    """Run the registered Lua script `name` with `keys` and `args`."""

    name: str
    keys: list[str]
    args: list[Any]


@dataclasses.dataclass(slots=True, frozen=True, init=False)
class Command:
    """Call the client method `name` with `args`."""

    name: str
    args: tuple[Any, ...]

    def __init__(self, name: str, *args: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)


@dataclasses.dataclass(slots=True, frozen=True)
class Pipeline:
    """Send `commands` in one non-transactional pipeline; the reply is their replies."""

    commands: Sequence[Script | Command]


RedisFlow = Generator[Script | Command | Pipeline, Any, T]
"""An operation that yields what to send and receives each reply."""


def scripted(item: Pipeline) -> bool:
    """Whether `item` holds a script (a cluster pipeline refuses them)."""
    return any(isinstance(c, Script) for c in item.commands)


def queue(pipe: Any, c: Script | Command, scripts: dict[str, tuple[str, str]]) -> None:
    """Add `c` to a redis-py pipeline (`scripts`: name -> (source, sha))."""
    if isinstance(c, Script):
        pipe.evalsha(scripts[c.name][1], len(c.keys), *c.keys, *c.args)
    else:
        getattr(pipe, c.name)(*c.args)
