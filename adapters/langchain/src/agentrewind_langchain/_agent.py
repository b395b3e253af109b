"""`RewindAgentMiddleware`: record and replay for `create_agent`, without patching anything."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool

import agentrewind
from agentrewind import AgentRewindError, Call, Run, RunContext
from agentrewind.adapters import Chat

from . import _chat
from ._agent_runs import AgentRuns, current_invocation
from ._keys import (
    canonical,
    chat_key_digests,
    llm_string,
    message_digest,
    site_name,
    tool_input_view,
    tool_key,
)
from ._outcome import Outcome, aexecute, asettle, execute, settle
from ._runnable import resolve_run_id
from ._tools import SKIPPED_CONTENT, tool_outcome

__all__ = ["RewindAgentMiddleware"]


def _config() -> dict[str, Any]:
    from langgraph.config import get_config

    try:
        return dict(get_config())
    except RuntimeError:
        return {}


class RewindAgentMiddleware(AgentMiddleware):
    """Journal `create_agent` model and tool calls through the official middleware hooks.

    `create_agent(model, tools, middleware=[RewindAgentMiddleware("sqlite:///runs.db")])`
    records each model call (`wrap_model_call`) and tool call (`wrap_tool_call`) under the
    run named by `configurable["agentrewind_run_id"]` or `configurable["thread_id"]`; a
    rerun with the same id replays the finished ones. Unlike `Middleware.wrap`, nothing is
    patched, so calls made elsewhere (inside tools, lambdas, other middleware) are not
    recorded and replayed calls fire no model callbacks.

    Args:
        store: A `Store`, a store URL, an `agentrewind.Middleware`, or None (the default store).
        strict: Raise `DivergenceError` when a rerun's calls changed.
        on_incomplete: Policy for tool calls that started and never finished.
        ttl: Seconds each run is kept after its last write.
        tool_side_effects: Write a `started` record before each tool call.
    """

    def __init__(
        self,
        store: Any = None,
        *,
        strict: bool | None = None,
        on_incomplete: Any = None,
        ttl: float | None = None,
        tool_side_effects: bool = True,
    ) -> None:
        super().__init__()
        self.middleware = (
            store if isinstance(store, agentrewind.Middleware) else agentrewind.Middleware(store)
        )
        self.strict = strict
        self.on_incomplete = on_incomplete
        self.ttl = ttl
        self.tool_side_effects = tool_side_effects
        self._runs = AgentRuns(self.middleware, self._start)

    @property
    def name(self) -> str:
        """The hook name shown in traces."""
        return "RewindAgentMiddleware"

    # -- run lifecycle: see _agent_runs (one run per invocation, closed however it ends) ----
    def _start(self, run_id: str) -> RunContext:
        return self.middleware.run(
            run_id, strict=self.strict, on_incomplete=self.on_incomplete, ttl=self.ttl
        )

    @staticmethod
    def _run_id() -> str:
        run_id = resolve_run_id(_config())
        if run_id is None:
            raise AgentRewindError(
                "RewindAgentMiddleware needs a run id: invoke the agent with "
                'config={"configurable": {"thread_id": ...}} (or "agentrewind_run_id")'
            )
        return run_id

    def _get(self) -> tuple[str, Run]:
        run_id = self._run_id()
        return run_id, self._runs.get(run_id, current_invocation())

    async def _aget(self) -> tuple[str, Run]:
        run_id = self._run_id()
        return run_id, await self._runs.aget(run_id, current_invocation())

    def _fail(self, run_id: str) -> None:
        self._runs.end(run_id, current_invocation(), "failed")

    async def _afail(self, run_id: str) -> None:
        await self._runs.aend(run_id, current_invocation(), "failed")

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Close a run of this id that an earlier invocation left open."""
        self._runs.drop_stale(self._run_id(), current_invocation())
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async twin of `before_agent`."""
        await self._runs.adrop_stale(self._run_id(), current_invocation())
        return None

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Close the run: metrics written, lease released."""
        self._runs.end(self._run_id(), current_invocation(), "completed")
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async twin of `after_agent`."""
        await self._runs.aend(self._run_id(), current_invocation(), "completed")
        return None

    # -- model calls ---------------------------------------------------------------------
    def _begin_model(self, run: Run, request: ModelRequest) -> Call:
        model = request.model
        messages = list(request.messages)
        if request.system_message is not None:
            messages.insert(0, request.system_message)
        tools = [t.name if isinstance(t, BaseTool) else t for t in request.tools]
        extra = [tools, request.tool_choice, request.response_format]
        key, digests = chat_key_digests(llm_string(model), messages, request.model_settings, extra)
        name = site_name(model.get_name(), _config().get("metadata"))
        rest = {"tools": tools, "settings": json.loads(canonical(request.model_settings or {}))}
        return run.begin("llm", name, key, inputs=Chat(messages, digests, rest))

    @staticmethod
    def _replay_model(call: Call) -> ModelResponse:
        value = call.value() or {"result": [AIMessage(content="")], "structured": None}
        return ModelResponse(result=list(value["result"]), structured_response=value["structured"])

    @staticmethod
    def _model_outcome(response: Any) -> Outcome:
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        if not isinstance(response, ModelResponse):
            return Outcome(record=False)  # ExtendedModelResponse carries a Command: run again
        tokens = _chat.total_tokens(response.result)
        value = {"result": list(response.result), "structured": response.structured_response}
        parts = tuple(
            (message_digest(m), ["result", i])
            for i, m in enumerate(response.result)
            if isinstance(m, BaseMessage)
        )
        return Outcome(
            value, {"tokens": tokens}, what="model call {key} not journaled", parts=parts
        )

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        """Replay a recorded model call, or run it and record the response."""
        run_id, run = self._get()
        call = self._begin_model(run, request)
        if call.hit:
            return self._replay_model(call)
        try:
            response = execute(call, lambda: handler(request), track=False)
        except BaseException:
            self._fail(run_id)
            raise
        settle(call, self._model_outcome(response))
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        """Async twin of `wrap_model_call`."""
        run_id, run = await self._aget()
        call = self._begin_model(run, request)
        if call.hit:
            return self._replay_model(call)
        try:
            response = await aexecute(call, lambda: handler(request), track=False)
        except BaseException:
            await self._afail(run_id)
            raise
        await asettle(call, self._model_outcome(response))
        return response

    # -- tool calls ----------------------------------------------------------------------
    def _begin_tool(self, run: Run, request: Any) -> Call:
        tool_call = request.tool_call
        tool = request.tool
        args = tool_call.get("args") or {}
        key = tool_key(tool, args)
        meta = (tool.metadata if isinstance(tool, BaseTool) else None) or {}
        return run.begin(
            "tool",
            site_name(tool_call["name"], _config().get("metadata")),
            key,
            inputs=tool_input_view(tool, args) if isinstance(tool, BaseTool) else args,
            side_effects=bool(meta.get("agentrewind_side_effects", self.tool_side_effects)),
            on_incomplete=meta.get("agentrewind_on_incomplete"),
        )

    @staticmethod
    def _replay_tool(call: Call, request: Any) -> ToolMessage:
        value = call.value()
        tool_call = request.tool_call
        if not isinstance(value, ToolMessage):
            value = ToolMessage(
                content=SKIPPED_CONTENT if value is None else str(value),
                tool_call_id=tool_call["id"],
                name=tool_call["name"],
            )
        return value.model_copy(update={"tool_call_id": tool_call["id"]})

    @staticmethod
    def _tool_outcome(output: Any) -> Outcome:
        if isinstance(output, ToolMessage) and output.status != "error":
            return tool_outcome(output)  # unstorable: return its output, re-run on resume
        return Outcome(failure=RuntimeError("tool returned an error or a Command"))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Replay a recorded tool call, or run it (marked started first) and record it."""
        run_id, run = self._get()
        call = self._begin_tool(run, request)
        if call.hit:
            return self._replay_tool(call, request)
        try:
            output = execute(call, lambda: handler(request))
        except BaseException:
            self._fail(run_id)
            raise
        settle(call, self._tool_outcome(output))
        return output

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Async twin of `wrap_tool_call`."""
        run_id, run = await self._aget()
        call = self._begin_tool(run, request)
        if call.hit:
            return self._replay_tool(call, request)
        try:
            output = await aexecute(call, lambda: handler(request))
        except BaseException:
            await self._afail(run_id)
            raise
        await asettle(call, self._tool_outcome(output))
        return output
