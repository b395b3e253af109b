"""What a LangGraph checkpoint means, in LangGraph's words.

Who wrote it, what runs next, why it stopped, and the thread's status. Reads checkpoint
tuples only; imports no framework.

- **Writer**: the nodes whose `versions_seen` moved between a checkpoint and its parent ran in
  the superstep that wrote it (`input` for the input checkpoint, `update_state` for an edit).
- **Next**: a node is due when its trigger channel (`branch:to:<node>`, or `__start__`) holds
  a value with a newer version than the node has seen, or a `Send` names it.
- **Interrupts**: the `__interrupt__` pending writes of a checkpoint, with their payloads.
- **Internal channels**: `branch:*`, `join:*` and `__*__` are LangGraph's bookkeeping; views
  hide them unless asked for everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

__all__ = [
    "errors_of",
    "interrupts_of",
    "is_internal",
    "jsonable",
    "next_nodes",
    "thread_status",
    "timestamp",
    "visible",
    "writer_nodes",
]

_TRIGGER = "branch:to:"


def is_internal(channel: str) -> bool:
    """Whether a channel is LangGraph's bookkeeping rather than graph state."""
    return channel.startswith(("branch:", "join:", "__"))


def visible(values: Mapping[str, Any], everything: bool = False) -> dict[str, Any]:
    """Channel values as JSON data, LangGraph's internal channels left out unless `everything`."""
    return {k: jsonable(v) for k, v in values.items() if everything or not is_internal(str(k))}


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return version is not None
    try:
        return bool(version > seen)
    except TypeError:
        return str(version) > str(seen)


def next_nodes(checkpoint: Mapping[str, Any]) -> list[str]:
    """The nodes a checkpoint has still to run (empty: the graph finished at it)."""
    versions: Mapping[str, Any] = checkpoint.get("channel_versions", {})
    seen: Mapping[str, Mapping[str, Any]] = checkpoint.get("versions_seen", {})
    values: Mapping[str, Any] = checkpoint.get("channel_values", {})
    due = []
    for channel, version in versions.items():
        if channel not in values:  # consumed: its trigger fired already
            continue
        node = channel[len(_TRIGGER) :] if channel.startswith(_TRIGGER) else None
        if channel == "__start__":
            node = "__start__"
        if node is not None and _newer(version, seen.get(node, {}).get(channel)):
            due.append(node)
    for packet in values.get("__pregel_tasks", None) or ():
        node = getattr(packet, "node", None)
        if isinstance(node, str):
            due.append(node)
    return sorted(set(due), key=due.index)


def writer_nodes(
    checkpoint: Mapping[str, Any], metadata: Mapping[str, Any], parent: Mapping[str, Any] | None
) -> list[str]:
    """The nodes whose superstep wrote `checkpoint` (given its `parent` checkpoint, if any)."""
    source = metadata.get("source")
    if source == "input":
        return ["input"]
    if source == "update":
        return ["update_state"]
    if source == "fork":
        return ["fork"]
    seen: Mapping[str, Any] = checkpoint.get("versions_seen", {})
    before: Mapping[str, Any] = (parent or {}).get("versions_seen", {})
    nodes = [n for n, v in seen.items() if not n.startswith("__input") and before.get(n) != v]
    return [n for n in nodes if n != "__start__"] or [n for n in nodes]


def interrupts_of(writes: list[tuple[str, str, Any]] | None) -> list[dict[str, Any]]:
    """The interrupts among a checkpoint's pending writes: `{"value": payload, "id": ...}`."""
    found: list[dict[str, Any]] = []
    for _, channel, value in writes or ():
        if channel != "__interrupt__":
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            found.append(
                {"value": jsonable(getattr(item, "value", item)), "id": getattr(item, "id", None)}
            )
    return found


def errors_of(writes: list[tuple[str, str, Any]] | None) -> list[Any]:
    """The errors a node left as pending writes of a checkpoint (the node raised)."""
    return [value for _, channel, value in writes or () if channel == "__error__"]


def thread_status(latest: Any, writer: Callable[[], tuple[str, bool]]) -> str:
    """The status of a thread from its latest checkpoint tuple and its writer.

    Args:
        latest: The thread's latest `CheckpointTuple` (None: no checkpoint).
        writer: Reads `(holder, live)` of the thread's lease or writer mark (see `_writers`);
            called only for a thread with nodes still to run.

    Returns:
        `paused` at an `interrupt()`, `failed` when a node raised, and for a thread with nodes
        still to run `running` (its writer is alive), `crashed` (its writer died) or `paused`
        (its saver stopped on purpose, as at a static interrupt); else `completed`.
    """
    if latest is None:
        return "completed"
    writes = latest.pending_writes or []
    if interrupts_of(writes):
        return "paused"
    if errors_of(writes):
        return "failed"
    if not next_nodes(latest.checkpoint):
        return "completed"
    holder, live = writer()
    if holder:
        return "running" if live else "crashed"
    return "paused"


def timestamp(text: Any) -> float:
    """A checkpoint's `ts` as Unix time (0.0 when unreadable)."""
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return 0.0


def jsonable(value: Any, depth: int = 0) -> Any:
    """Plain JSON data for display: models dumped, unknown objects as their repr."""
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), depth + 1)
        except Exception:
            pass
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)
