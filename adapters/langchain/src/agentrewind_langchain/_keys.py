"""Replay keys: what identifies a chat or tool call, with everything random taken out.

Message ids (`add_messages` assigns uuid4s, models assign `lc_run--<uuid>`), tool-call ids,
provider response metadata and injected state/runtime arguments differ on every run; keeping
them would make every resumed call a miss. Memory addresses in reprs (`<function f at 0x..>`)
differ per process and are removed as well.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import var_child_runnable_config

__all__ = ["chat_key", "site_name", "tool_key"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ID_FIELDS = ("id", "tool_call_id")


def _scrub(value: Any) -> Any:
    """JSON-able copy of `value` with ids and addresses removed."""
    if isinstance(value, dict):
        return {str(k): _scrub(v) for k, v in value.items() if k not in _ID_FIELDS}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, BaseMessage):
        return message_key(value)
    return _ADDRESS.sub("", repr(value))


def message_key(message: BaseMessage) -> dict[str, Any]:
    """What a provider sees of a message: type, name, content, tool calls (no ids)."""
    out: dict[str, Any] = {"type": message.type, "content": _scrub(message.content)}
    if message.name:
        out["name"] = message.name
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        out["tool_calls"] = [{"name": c["name"], "args": _scrub(c["args"])} for c in tool_calls]
    if message.additional_kwargs:
        extra = {k: v for k, v in message.additional_kwargs.items() if k != "tool_calls"}
        if extra:
            out["extra"] = _scrub(extra)
    return out


def chat_key(llm_string: str, messages: list[BaseMessage]) -> dict[str, Any]:
    """Key input of a chat call: the model's `_get_llm_string` and the normalised messages."""
    return {"llm": _ADDRESS.sub("", llm_string), "messages": [message_key(m) for m in messages]}


def tool_key(tool: Any, tool_input: Any) -> Any:
    """Key input of a tool call: its input without injected (state, runtime, config) arguments."""
    if isinstance(tool_input, dict):
        return _scrub(tool._filter_injected_args(tool_input))
    return _scrub(tool_input)


def site_name(name: str, metadata: dict[str, Any] | None = None) -> str:
    """The call site: `name`, qualified by the LangGraph node and step when inside a graph.

    A graph resumed from its checkpointer does not re-run earlier nodes, so their recorded
    calls stay unconsumed; qualifying the site keeps them from being taken for divergence.
    """
    if metadata is None:
        config = var_child_runnable_config.get()
        metadata = config.get("metadata") if config else None
    if metadata:
        node = metadata.get("langgraph_node")
        if node is not None:
            return f"{name}@{node}:{metadata.get('langgraph_step', '')}"
    return name
