"""Tool calls: the key, the side-effect policy, the replayed output and its callbacks."""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from agentrewind import Call, Run

from ._keys import site_name, tool_input_view, tool_key
from ._outcome import Outcome
from ._scope import REPLAYED_TAG, Scope

__all__ = ["SKIPPED_CONTENT", "ToolCallInfo", "ToolReplay", "begin_tool", "tool_outcome"]

_UNSTORABLE = "output of tool call {key} not journaled (it re-runs on resume)"

SKIPPED_CONTENT = (
    "skipped: this tool call started in an earlier attempt that did not finish; "
    "agentrewind did not run it again (on_incomplete='skip')"
)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolReplay:
    """A replayed tool call: its output and the arguments of the callbacks it fires.

    Fired as `configure(*configure).on_tool_start(*start, **start_kwargs)`, then
    `on_tool_end(output)`, on the sync or async callback manager.
    """

    output: Any
    configure: tuple[Any, ...]
    start: tuple[dict[str, Any], str]
    start_kwargs: dict[str, Any]


class ToolCallInfo:
    """The arguments of one `BaseTool.run`/`arun` call that the journal cares about."""

    __slots__ = ("kwargs", "tool", "tool_call_id", "tool_input")

    def __init__(self, tool: BaseTool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.tool = tool
        self.tool_input = args[0] if args else kwargs.get("tool_input")
        self.tool_call_id: str | None = kwargs.get("tool_call_id")
        self.kwargs = kwargs

    def metadata(self) -> dict[str, Any] | None:
        config = self.kwargs.get("config") or {}
        return config.get("metadata") or self.kwargs.get("metadata")

    # -- replay ---------------------------------------------------------------------------
    def replayed(self, call: Call) -> Any:
        """The recorded output, re-addressed to the current tool call id."""
        value = call.value()
        tool = self.tool
        if value is None and call.record is not None and call.record.output is None:
            value = SKIPPED_CONTENT
        if isinstance(value, ToolMessage):
            if self.tool_call_id is None:
                return value.content
            if value.tool_call_id != self.tool_call_id:
                value = value.model_copy(update={"tool_call_id": self.tool_call_id})
            return value
        if self.tool_call_id is not None:
            from langchain_core.tools.base import _format_output

            return _format_output(value, None, self.tool_call_id, tool.name, "success")
        return value

    def replay(self, call: Call) -> ToolReplay:
        """The recorded output and the tagged callbacks a replay still fires."""
        output = self.replayed(call)
        kw, tool = self.kwargs, self.tool
        metadata = {**(kw.get("metadata") or {}), "agentrewind": "replayed"}
        configure = (
            kw.get("callbacks"),
            tool.callbacks,
            tool.verbose,
            [*(kw.get("tags") or []), REPLAYED_TAG],
            tool.tags,
            metadata,
            tool.metadata,
        )
        tool_input = self.tool_input
        inputs = tool_input_view(tool, tool_input) if isinstance(tool_input, dict) else None
        start_kwargs = {
            "name": kw.get("run_name"),
            "run_id": kw.get("run_id"),
            "inputs": inputs,
            "tool_call_id": self.tool_call_id,
        }
        serialized = {"name": tool.name, "description": tool.description}
        start = (serialized, str(tool_input_view(tool, tool_input)))
        return ToolReplay(output, configure, start, start_kwargs)

    # -- record ---------------------------------------------------------------------------
    def outcome(self, output: Any) -> Outcome:
        """A handled tool error (status="error") is returned but never journaled."""
        if isinstance(output, ToolMessage) and output.status == "error":
            return Outcome(failure=RuntimeError(str(output.content)))
        return tool_outcome(output)


def begin_tool(scope: Scope, info: ToolCallInfo) -> Call:
    """Decide whether this tool call replays (`call.hit`) or runs (and is marked started)."""
    tool = info.tool
    meta = tool.metadata or {}
    side_effects = bool(meta.get("agentrewind_side_effects", scope.tool_side_effects))
    run: Run = scope.run
    return run.begin(
        "tool",
        site_name(tool.name, info.metadata()),
        tool_key(tool, info.tool_input),
        side_effects=side_effects,
        on_incomplete=meta.get("agentrewind_on_incomplete"),
        inputs=tool_input_view(tool, info.tool_input),
        cache=scope.cache,
    )


def tool_outcome(output: Any) -> Outcome:
    """Complete a tool call with `output`; if it cannot be stored it re-runs on resume."""
    return Outcome(output, what=_UNSTORABLE)
