"""Tool calls: the key, the side-effect policy, the replayed output and its callbacks."""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from agentrewind import Call, Run, SerializationError

from ._keys import site_name, tool_input_view, tool_key
from ._scope import REPLAYED_TAG, Scope

__all__ = ["ToolCallInfo", "begin_tool"]

logger = logging.getLogger("agentrewind.langchain")

SKIPPED_CONTENT = (
    "skipped: this tool call started in an earlier attempt that did not finish; "
    "agentrewind did not run it again (on_incomplete='skip')"
)


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

    def callback_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments for `CallbackManager.configure` and `on_tool_start` of a replay."""
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
        start = {
            "name": kw.get("run_name"),
            "run_id": kw.get("run_id"),
            "inputs": inputs,
            "tool_call_id": self.tool_call_id,
        }
        return configure, start

    def start_payload(self) -> tuple[dict[str, Any], str]:
        inputs = tool_input_view(self.tool, self.tool_input)
        return {"name": self.tool.name, "description": self.tool.description}, str(inputs)

    # -- record ---------------------------------------------------------------------------
    def error_output(self, output: Any) -> bool:
        """A handled tool error (status="error") is returned but never journaled."""
        return isinstance(output, ToolMessage) and output.status == "error"


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
    )


def not_journaled(call: Call, exc: SerializationError) -> None:
    logger.warning(
        "agentrewind: output of tool call %s not journaled (it re-runs on resume): %s",
        call.key,
        exc,
    )
